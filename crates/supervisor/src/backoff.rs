//! [`Backoff`]: a wait that doubles with each failure in a row, from a first wait up to a cap,
//! and the instant the next try is due.
//!
//! It reads no clock: every instant is handed in (`now`), so the same calls give the same waits
//! and the same due instants, whatever clock drives them — the monotonic one of the loop
//! ([`tokio::time::Instant`]), a thread's ([`std::time::Instant`]), or the wall clock's
//! milliseconds ([`store::Millis`]), the EVAL's own. There is no jitter.
//!
//! | call | the wait after it | due |
//! | --- | --- | --- |
//! | [`Backoff::new`], [`Backoff::reset`] | none | none |
//! | [`Backoff::fail`] | the first wait, or the last one doubled, up to the cap | `now` + the wait |
//! | [`Backoff::next_wait`] | as `fail` (for a caller that sleeps the wait itself) | unchanged |
//! | [`Backoff::hold`] | the given wait (the next failure doubles it) | `now` + the wait |
//! | [`Backoff::postpone`] | unchanged | `now` + the given delay |

use std::time::Duration;

/// An instant a [`Backoff`] can put a wait after.
pub trait Moment: Copy + Ord {
    /// `self` plus `wait`, or the farthest instant the type can say when that is beyond it
    /// (never earlier than `self`).
    fn after(self, wait: Duration) -> Self;
}

/// How far ahead an [`std::time::Instant`] is put when `wait` itself cannot be added: about
/// thirty years, as good as never for a retry.
const FAR_AHEAD: Duration = Duration::from_secs(86_400 * 365 * 30);

impl Moment for std::time::Instant {
    fn after(self, wait: Duration) -> Self {
        self.checked_add(wait)
            .or_else(|| self.checked_add(FAR_AHEAD))
            .unwrap_or(self)
    }
}

impl Moment for tokio::time::Instant {
    fn after(self, wait: Duration) -> Self {
        self.checked_add(wait)
            .or_else(|| self.checked_add(FAR_AHEAD))
            .unwrap_or(self)
    }
}

/// Milliseconds since the Unix epoch ([`store::Millis`]).
impl Moment for i64 {
    fn after(self, wait: Duration) -> Self {
        self.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX))
    }
}

/// A doubling wait between tries, and when the next try is due.
///
/// After a reset (and when new) there is no wait and nothing is due. Each failure in a row
/// waits [`first`](Backoff::new) the first time, then twice the wait before, never more than
/// the cap (doubling saturates: huge waits stay at the cap, they never overflow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff<I> {
    first: Duration,
    cap: Duration,
    /// The last wait, `None` since the last reset.
    wait: Option<Duration>,
    /// When the next try is due, if a wait was set since the last reset.
    due: Option<I>,
    /// Failures since the last reset.
    failures: u32,
}

impl<I: Moment> Backoff<I> {
    /// A back-off whose first wait is `first`, doubling up to `cap` (a cap below `first` is
    /// raised to it).
    pub const fn new(first: Duration, cap: Duration) -> Backoff<I> {
        Backoff {
            first,
            cap: if cap.as_nanos() < first.as_nanos() {
                first
            } else {
                cap
            },
            wait: None,
            due: None,
            failures: 0,
        }
    }

    /// One more failure: returns its wait, the first one after a reset, else the last one
    /// doubled, up to the cap. The due instant is left as it was: for a caller that sleeps the
    /// wait out itself.
    pub fn next_wait(&mut self) -> Duration {
        let wait = match self.wait {
            None => self.first,
            Some(w) => w.saturating_mul(2).min(self.cap),
        };
        self.wait = Some(wait);
        self.failures = self.failures.saturating_add(1);
        wait
    }

    /// One more failure at `now`: [`Self::next_wait`], and the next try is due that wait after
    /// `now`. Returns the wait.
    pub fn fail(&mut self, now: I) -> Duration {
        let wait = self.next_wait();
        self.due = Some(now.after(wait));
        wait
    }

    /// Holds the next try back for `wait` from `now`, a wait decided elsewhere rather than by
    /// a failure (the failures are not counted): the next failure doubles it.
    pub fn hold(&mut self, now: I, wait: Duration) {
        self.wait = Some(wait);
        self.due = Some(now.after(wait));
    }

    /// Moves the next try to `by` after `now`, keeping the wait the next failure doubles.
    pub fn postpone(&mut self, now: I, by: Duration) {
        self.due = Some(now.after(by));
    }

    /// Forgets every failure: no wait, nothing due; the next failure waits the first wait.
    pub fn reset(&mut self) {
        self.wait = None;
        self.due = None;
        self.failures = 0;
    }

    /// Takes `first` and `cap` as the first wait and the cap from now on, keeping the last
    /// wait and what is due: for one back-off that several kinds of failure share, each with
    /// its own limits.
    pub fn set_limits(&mut self, first: Duration, cap: Duration) {
        let limits = Backoff::<I>::new(first, cap);
        self.first = limits.first;
        self.cap = limits.cap;
    }

    /// No failure (nor hold) since the last reset.
    pub fn is_reset(&self) -> bool {
        self.wait.is_none()
    }

    /// The last wait, `None` since the last reset.
    pub fn wait(&self) -> Option<Duration> {
        self.wait
    }

    /// When the next try is due; `None` when nothing holds it back.
    pub fn due(&self) -> Option<I> {
        self.due
    }

    /// Whether a try may be made at `now`: nothing is due, or it is due by then.
    pub fn is_due(&self, now: I) -> bool {
        self.due.is_none_or(|due| due <= now)
    }

    /// Failures since the last reset.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Backoff, Moment};

    const MS: Duration = Duration::from_millis(1);

    fn waits(b: &mut Backoff<i64>, n: usize) -> Vec<u128> {
        (0..n).map(|_| b.next_wait().as_millis()).collect()
    }

    #[test]
    fn a_new_backoff_holds_nothing_back() {
        let b = Backoff::<i64>::new(100 * MS, 5_000 * MS);
        assert!(b.is_reset());
        assert_eq!(b.wait(), None);
        assert_eq!(b.due(), None);
        assert_eq!(b.failures(), 0);
        assert!(
            b.is_due(i64::MIN),
            "nothing is due: a try may be made at any instant"
        );
    }

    #[test]
    fn the_first_failure_waits_the_first_wait_from_now() {
        let mut b = Backoff::<i64>::new(200 * MS, 10_000 * MS);
        assert_eq!(b.fail(1_000), 200 * MS);
        assert_eq!(b.wait(), Some(200 * MS));
        assert_eq!(b.due(), Some(1_200));
        assert_eq!(b.failures(), 1);
        assert!(!b.is_reset());
        assert!(!b.is_due(1_199), "held until the wait is over");
        assert!(b.is_due(1_200), "due the very instant the wait ends");
    }

    #[test]
    fn each_failure_in_a_row_doubles_the_wait_up_to_the_cap() {
        let mut b = Backoff::<i64>::new(100 * MS, 5_000 * MS);
        assert_eq!(
            waits(&mut b, 9),
            [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000, 5_000]
        );
        assert_eq!(b.failures(), 9);
        // A cap that is no power of two of the first wait is reached, not skipped.
        let mut b = Backoff::<i64>::new(1_000 * MS, 60_000 * MS);
        assert_eq!(
            waits(&mut b, 8),
            [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
        );
    }

    #[test]
    fn next_wait_leaves_the_due_instant_and_fail_sets_it() {
        let mut b = Backoff::<i64>::new(50 * MS, 5_000 * MS);
        b.next_wait();
        assert_eq!(b.due(), None);
        assert!(!b.is_reset(), "a failure, even with nothing due");
        assert_eq!(b.fail(10_000), 100 * MS);
        assert_eq!(b.due(), Some(10_100));
        b.next_wait();
        assert_eq!(b.due(), Some(10_100), "next_wait leaves what was due");
    }

    #[test]
    fn a_reset_starts_over_at_the_first_wait() {
        let mut b = Backoff::<i64>::new(1_000 * MS, 30_000 * MS);
        for now in [0, 1_000, 3_000] {
            b.fail(now);
        }
        assert_eq!(b.wait(), Some(4_000 * MS));
        b.reset();
        assert!(b.is_reset());
        assert_eq!((b.wait(), b.due(), b.failures()), (None, None, 0));
        assert!(b.is_due(0));
        assert_eq!(b.fail(50_000), 1_000 * MS);
        assert_eq!(b.due(), Some(51_000));
        assert_eq!(b.failures(), 1);
    }

    #[test]
    fn a_cap_below_the_first_wait_is_the_first_wait() {
        let mut b = Backoff::<i64>::new(2_000 * MS, 500 * MS);
        assert_eq!(waits(&mut b, 3), [2_000, 2_000, 2_000]);
    }

    #[test]
    fn huge_waits_saturate_at_the_cap_and_their_due_instant_never_overflows() {
        let mut b = Backoff::<i64>::new(Duration::MAX / 3, Duration::MAX);
        b.fail(i64::MAX - 10);
        assert_eq!(b.fail(i64::MAX - 10), Duration::MAX / 3 * 2);
        assert_eq!(b.fail(i64::MAX - 10), Duration::MAX, "doubling saturates");
        assert_eq!(b.fail(i64::MAX - 10), Duration::MAX);
        assert_eq!(b.due(), Some(i64::MAX));
        assert!(!b.is_due(i64::MAX - 1));

        let mut b = Backoff::<i64>::new(MS, Duration::MAX);
        for _ in 0..200 {
            b.fail(0);
        }
        assert_eq!(b.wait(), Some(Duration::MAX));
        assert_eq!(b.failures(), 200);

        let now = std::time::Instant::now();
        assert!(
            now.after(Duration::MAX) > now,
            "never earlier than now, never a panic"
        );
        let now = tokio::time::Instant::now();
        assert!(now.after(Duration::MAX) > now);
    }

    #[test]
    fn the_same_calls_give_the_same_waits_and_due_instants_on_every_clock() {
        let first = 5 * MS;
        let cap = Duration::from_secs(1);
        let mut millis = Backoff::<i64>::new(first, cap);
        let mut std_b = Backoff::<std::time::Instant>::new(first, cap);
        let mut tokio_b = Backoff::<tokio::time::Instant>::new(first, cap);
        let (std0, tokio0) = (std::time::Instant::now(), tokio::time::Instant::now());
        let mut again = Backoff::<i64>::new(first, cap);
        let mut elapsed = Duration::ZERO;
        for _ in 0..12 {
            let ms = i64::try_from(elapsed.as_millis()).unwrap();
            let w = millis.fail(ms);
            assert_eq!(
                again.fail(ms),
                w,
                "no jitter: the same calls, the same waits"
            );
            assert_eq!(std_b.fail(std0 + elapsed), w);
            assert_eq!(tokio_b.fail(tokio0 + elapsed), w);
            elapsed += w;
            assert_eq!(
                millis.due(),
                Some(i64::try_from(elapsed.as_millis()).unwrap())
            );
            assert_eq!(std_b.due(), Some(std0 + elapsed));
            assert_eq!(tokio_b.due(), Some(tokio0 + elapsed));
        }
        assert_eq!(millis, again);
    }

    #[test]
    fn a_hold_sets_the_wait_the_next_failure_doubles() {
        let mut b = Backoff::<i64>::new(200 * MS, 5_000 * MS);
        b.hold(1_000, 30 * MS);
        assert_eq!(
            (b.wait(), b.due(), b.failures()),
            (Some(30 * MS), Some(1_030), 0)
        );
        assert!(!b.is_reset());
        assert_eq!(b.fail(2_000), 60 * MS);
        assert_eq!(b.due(), Some(2_060));
        assert_eq!(b.failures(), 1);
    }

    #[test]
    fn a_postponement_moves_what_is_due_and_keeps_the_wait() {
        let mut b = Backoff::<i64>::new(200 * MS, 5_000 * MS);
        b.fail(0);
        b.fail(0);
        b.postpone(1_000, 50 * MS);
        assert_eq!(
            (b.wait(), b.due(), b.failures()),
            (Some(400 * MS), Some(1_050), 2)
        );
        assert_eq!(b.fail(2_000), 800 * MS);
    }

    #[test]
    fn new_limits_apply_to_the_next_failure_from_the_last_wait() {
        let mut b = Backoff::<i64>::new(100 * MS, 5_000 * MS);
        b.fail(0);
        b.fail(0);
        b.set_limits(1_000 * MS, 30_000 * MS);
        assert_eq!(b.wait(), Some(200 * MS), "the last wait is kept");
        assert_eq!(b.due(), Some(200), "and what is due");
        assert_eq!(b.fail(0), 400 * MS, "doubled from the last wait");
        b.set_limits(50 * MS, 300 * MS);
        assert_eq!(b.fail(0), 300 * MS, "up to the new cap");
        b.reset();
        assert_eq!(b.fail(0), 50 * MS, "the new first wait after a reset");
    }
}
