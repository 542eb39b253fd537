//! Polling with a deadline, the only way the tests wait for anything, and the wall clock the
//! commands' records and fleet's times are read against.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Checks `cond`, then every `every`, until it holds; panics after `deadline` naming `what`,
/// followed by `context()` (called only then: the runs table, daemons' logs...).
pub fn wait_for(
    deadline: Duration,
    every: Duration,
    what: &str,
    mut cond: impl FnMut() -> bool,
    context: impl FnOnce() -> String,
) {
    let start = Instant::now();
    loop {
        if cond() {
            return;
        }
        if start.elapsed() > deadline {
            panic!(
                "timed out after {deadline:?} waiting for {what}\n{}",
                context()
            );
        }
        std::thread::sleep(every);
    }
}

/// Sets its flag when dropped: a helper thread looping until the flag is set stops however
/// the test's own thread leaves (a failed assertion too), instead of keeping a scope waiting.
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Wall-clock milliseconds since the epoch (the clock fleet's times are in).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Wall-clock nanoseconds since the epoch (the clock `date +%s%N` in the records reads).
pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
