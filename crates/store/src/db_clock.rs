//! The clock a process judges time by on a shared database: the database's own.
//!
//! Many hosts act on instants other hosts wrote: a heartbeat's age decides whether a host is
//! alive (and whether `fleet hosts forget` may take its runs), a schedule's cursor and a retry's
//! `not_before` decide when the next run starts, whichever host claims it. Judged by each
//! host's own clock, a host 45 s behind looks silent while it runs and one 45 s ahead fires
//! occurrences early. So on PostgreSQL every reading of [`crate::now_ms`] is the database
//! server's time: a process measures the server's clock ([`crate::Store::database_clock`]) and
//! [`follow`]s it, and from then on `now_ms` is the server's time at the last measurement plus
//! the monotonic time elapsed since (a step of the local wall clock changes nothing). The
//! daemon measures at its start, before it takes over, and again at every heartbeat; a command
//! once, when it opens the database. A process that never follows (SQLite, one host) reads its
//! local clock, as before.
//!
//! The offset measured (the local wall clock's time minus the database's, at the midpoint of
//! the query's round trip: positive when the host is ahead) is kept for what the host reports: its log, its heartbeat (`fleet
//! hosts`, `fleet status`) and `/metrics`. A host whose offset passes [`SKEW_MS`] is told so,
//! since its own log lines (and its commands' view of time) are that far off.
//!
//! Process-wide, like the test clock: one process has one database. Nothing here names SQL.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::Millis;

/// An offset from the database's clock past this (ms, either way) is said: in the host's log,
/// `fleet hosts`, `fleet status` and `/metrics`. Under it, the offset is the usual drift of
/// NTP-kept clocks plus the measurement's error (half a round trip).
pub const SKEW_MS: Millis = 2_000;

/// One measurement of the database's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockReading {
    /// The monotonic instant the database's time is taken to have been read at (the midpoint
    /// of the round trip).
    pub at: Instant,
    /// The database's time then (ms UTC).
    pub database_ms: Millis,
    /// The local wall clock then (ms UTC), as this process reads it without following.
    pub local_ms: Millis,
    /// The round trip of the measurement: the reading is right to half of it.
    pub round_trip: Duration,
}

impl ClockReading {
    /// How far the local clock is ahead of the database's (ms; negative when it is behind).
    pub fn offset_ms(&self) -> Millis {
        self.local_ms - self.database_ms
    }
}

/// Whether an offset of `offset_ms` from the database's clock is past [`SKEW_MS`].
pub fn skewed(offset_ms: Millis) -> bool {
    offset_ms.abs() > SKEW_MS
}

/// "this host's clock is 45.0 s behind the database's (more than 2 s)", for an offset
/// (local minus database, ms).
pub fn skew_words(offset_ms: Millis) -> String {
    format!(
        "this host's clock is {:.1} s {} the database's (more than {} s)",
        offset_ms.abs() as f64 / 1000.0,
        if offset_ms > 0 { "ahead of" } else { "behind" },
        SKEW_MS / 1000
    )
}

/// The reading this process follows, if any.
static FOLLOWED: Mutex<Option<ClockReading>> = Mutex::new(None);

/// From now on [`crate::now_ms`] in this process is the database's time as `reading` gives it
/// (plus the monotonic time elapsed since). Returns the offset the previous reading had, if
/// there was one, so that the caller can say when the offset crosses [`SKEW_MS`].
pub fn follow(reading: ClockReading) -> Option<Millis> {
    let mut followed = FOLLOWED.lock().unwrap_or_else(|e| e.into_inner());
    followed.replace(reading).map(|r| r.offset_ms())
}

/// The offset of the reading this process follows (local minus database, ms), if it follows
/// one.
pub fn offset_ms() -> Option<Millis> {
    followed().map(|r| r.offset_ms())
}

/// `local_ms`, an instant of this machine's wall clock (a shim's record, say), as the database's
/// clock had it, by the offset of the reading this process follows; unchanged when it follows
/// none.
pub fn to_database(local_ms: Millis) -> Millis {
    local_ms.saturating_sub(offset_ms().unwrap_or(0))
}

/// The database's time now, by the reading this process follows; `None` when it follows none.
pub(crate) fn followed_now() -> Option<Millis> {
    let r = followed()?;
    let elapsed = Instant::now().saturating_duration_since(r.at);
    Some(
        r.database_ms
            .saturating_add(i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)),
    )
}

fn followed() -> Option<ClockReading> {
    *FOLLOWED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The reading made of a query of the database's time (`database_ms`) sent at `sent` (local
/// wall clock `local_at_send`) and answered at `answered`.
pub(crate) fn reading(
    sent: Instant,
    local_at_send: Millis,
    database_ms: Millis,
    answered: Instant,
) -> ClockReading {
    let round_trip = answered.saturating_duration_since(sent);
    let half = round_trip / 2;
    ClockReading {
        at: sent + half,
        database_ms,
        local_ms: local_at_send.saturating_add(i64::try_from(half.as_millis()).unwrap_or(i64::MAX)),
        round_trip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_is_taken_at_the_midpoint_of_its_round_trip() {
        let sent = Instant::now();
        let r = reading(sent, 1_000, 46_000, sent + Duration::from_millis(10));
        assert_eq!(r.at, sent + Duration::from_millis(5));
        assert_eq!(r.local_ms, 1_005);
        assert_eq!(r.offset_ms(), -44_995);
        assert!(skew_words(r.offset_ms()).starts_with("this host's clock is 45.0 s behind"));
        assert!(skewed(r.offset_ms()) && skewed(-r.offset_ms()));
        assert!(!skewed(SKEW_MS) && !skewed(-SKEW_MS) && skewed(SKEW_MS + 1));
    }

    /// An instant of this machine's clock (a shim's record) is written in the database's time:
    /// 45 s ahead, it is taken 45 s back; followed by nobody, it is left as it is.
    #[test]
    fn a_local_instant_is_moved_to_the_database_clock() {
        assert_eq!(to_database(100_000), 100_000);
        let sent = Instant::now();
        follow(reading(sent, 145_000, 100_000, sent));
        assert_eq!(to_database(145_500), 100_500);
    }
}
