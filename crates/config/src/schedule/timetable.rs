//! The timetable: which instants a project's cron schedule names, and what is due at `now`.
//!
//! This module must never do I/O nor read a clock: the caller passes `now`. Every instant in
//! and out is UTC (`DateTime<Utc>`); the project's time zone only shapes which instants are on
//! the timetable.
//!
//! Two pieces:
//!
//! * [`Timetable`]: a cron expression (parsed by [`crate::parse_schedule`], the same
//!   parser as `fleet validate`) plus a time zone, answering [`Timetable::next_after`]: the
//!   first occurrence strictly after an instant.
//! * [`due`]: given the persisted cursor (the last occurrence handled, fired or skipped — never
//!   "now") and `now`, what the EVAL should do: which occurrence to fire, which were passed over,
//!   the new cursor, and when the next one is.
//!
//! # DST, as classic cron (cronie) keeps it
//!
//! cronie tells two kinds of job apart, and so does this module:
//!
//! * A **wall-clock job** has no `*` in its seconds, minutes and hours fields (`30 1 * * *`,
//!   `0 2,14 * * *`, `0 9-17 * * 1-5`). Its occurrences are wall-clock times. A wall-clock time
//!   that happens twice (the clock goes back) fires **once**, at its first instant. A wall-clock
//!   time that never happens (the clock jumps forward over it) fires **right after the jump**, at
//!   the first instant after the gap; several such times in one gap (`0,30 2 * * *`) give that
//!   one instant, so one run.
//! * An **interval job** has a `*` there (`*/15 * * * *`, `0 * * * *`, `*/2 * * * * *`). Its
//!   occurrences are the real instants whose local wall clock matches: in a repeated hour it
//!   runs in both halves (an hourly job still runs every real hour), and wall-clock times in a
//!   skipped hour simply do not happen.
//!
//! A UTC timetable has no DST, so none of this ever applies to it, whatever the host's local
//! zone (`Tz::UTC` is used, never the host's local time).
//!
//! croner 4 classifies jobs itself ([`croner::JobType`]), but more narrowly than cronie: only a
//! single value in each of the three fields is "fixed time", so `30 1,13 * * *` would fire twice
//! in a repeated hour and `0 2,14 * * *` would never fire on a spring-forward day. So interval
//! jobs go straight to croner's zoned search (which does exactly the above for them), and
//! wall-clock jobs are searched on the naive wall clock and mapped to instants here (see
//! [`Timetable::next_after`]).
//!
//! # Bounded catch-up
//!
//! [`due`] never walks every missed occurrence. The latest occurrence `<= now` is found with
//! `next_after` alone: a few forward steps from the cursor (the common case: one or two missed),
//! then galloping back from `now` in doubling windows until a window holds an occurrence, then
//! bisecting that window to the second — `O(log gap)` searches, so a year-long outage of a
//! per-second schedule costs about fifty searches, not 31 million. Skipped occurrences are
//! counted forward up to [`SKIP_COUNT_CAP`]; past that the [`SKIPPED_KEEP`] latest are found by
//! walking back from the fired one the same way, two more than kept: the count is exact up to
//! [`SKIP_COUNT_EXACT_MAX`], and past it `SKIP_COUNT_EXACT_MAX + 1`, a lower bound.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;

/// At most this many skipped occurrences are listed in [`Due::skipped`] (the latest ones).
pub const SKIPPED_KEEP: usize = 100;

/// Skipped occurrences are counted one by one, forward from the first, up to this many; the
/// rest are looked for backwards from the latest (see [`SKIP_COUNT_EXACT_MAX`]).
pub const SKIP_COUNT_CAP: u64 = 1000;

/// The largest [`Due::skipped_count`] that is exact: [`SKIP_COUNT_CAP`] counted forward, and up
/// to [`SKIPPED_KEEP`] + 2 found walking back, which meet. When the two walks do not meet, the
/// occurrence the forward walk stopped at lies below the backward one's last: that makes
/// `SKIP_COUNT_EXACT_MAX + 1` found, proof that there are more than `SKIP_COUNT_EXACT_MAX`, and
/// the count is that lower bound ([`Due::skipped_count_exact`] false). A count of exactly
/// `SKIP_COUNT_EXACT_MAX` is always exact.
pub const SKIP_COUNT_EXACT_MAX: u64 = SKIP_COUNT_CAP + SKIPPED_KEEP as u64 + 2;

/// Forward steps `Timetable::last_from` takes before galloping back from the upper end.
const LINEAR_STEPS: usize = 64;

/// A safety net for the wall-clock search loop; never reached by a real time zone.
const WALL_STEPS_CAP: usize = 10_000;

/// How far (in minutes) a DST gap or repeated range is followed; real ones are at most hours.
const TRANSITION_MINUTES_CAP: i64 = 48 * 60;

/// The timetable identity stored beside a cursor (`expr @ zone`): when the config's differs, the
/// schedule starts afresh (its old cursor belonged to another timetable).
pub fn timetable_key(expr: &str, timezone: Option<&str>) -> String {
    format!("{expr} @ {}", timezone.unwrap_or("UTC"))
}

/// A project's timetable: its cron expression and time zone (keys `schedule` and `timezone` in
/// fleet.toml).
///
/// Occurrences are whole-second UTC instants. See the module docs for how DST shapes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timetable {
    cron: Cron,
    tz: Tz,
    /// cronie's "fixed-time" job: no `*` in the seconds, minutes or hours field.
    wall_clock: bool,
}

impl Timetable {
    /// Builds a timetable from a cron expression (5 fields, or 6 with seconds first, as
    /// [`crate::parse_schedule`] accepts) and an IANA time zone name (`None` = UTC).
    ///
    /// Errors are human-readable strings, like the config parser's.
    pub fn new(expr: &str, timezone: Option<&str>) -> Result<Timetable, String> {
        let cron = crate::parse_schedule(expr)?;
        let tz = match timezone {
            None => Tz::UTC,
            Some(name) => name
                .parse::<Tz>()
                .map_err(|_| format!("unknown time zone {name:?}"))?,
        };
        let p = &cron.pattern;
        let wall_clock =
            !(p.seconds.from_wildcard || p.minutes.from_wildcard || p.hours.from_wildcard);
        Ok(Timetable {
            cron,
            tz,
            wall_clock,
        })
    }

    /// The time zone that shapes the timetable (UTC unless the project sets `timezone`).
    #[cfg(test)]
    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// True for a wall-clock ("fixed-time") job, false for an interval job; see the module docs.
    #[cfg(test)]
    pub fn is_wall_clock(&self) -> bool {
        self.wall_clock
    }

    /// The first occurrence strictly after `after` (a UTC instant), as a whole-second UTC
    /// instant; `None` if the expression never matches again (e.g. `0 0 30 2 *`, or past the
    /// year 5000 where croner stops looking).
    ///
    /// This is the one source of truth for what is on the timetable: [`due`] (through
    /// `last_from`) and the tests' `last_in` are built on it alone, so they can never disagree
    /// with it.
    ///
    /// Interval jobs use croner's zoned search. Wall-clock jobs walk the naive wall clock with
    /// croner and map each matching wall-clock time `w` to `min { t : local(t) >= w }`: a time
    /// that happens once maps to itself, a repeated one to its first instant, one inside a gap to
    /// the first instant after the gap. That map never decreases, which is what makes the
    /// classic-cron DST rules (in a repeated hour an occurrence fires once; an occurrence
    /// inside a skipped hour fires right after the jump) hold.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let next = if self.wall_clock {
            self.next_wall_clock(after)
        } else {
            self.cron
                .find_next_occurrence(&after.with_timezone(&self.tz), false)
                .ok()
                .map(|t| t.with_timezone(&Utc))
        };
        next.filter(|t| *t > after)
    }

    /// The latest occurrence in `(after, upto]`, or `None` if there is none. Bounded cost
    /// whatever the gap (see the module docs, "Bounded catch-up"). The tests' oracle checks
    /// [`due`]'s search through it.
    #[cfg(test)]
    pub fn last_in(&self, after: DateTime<Utc>, upto: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let first = self.next_after(after).filter(|t| *t <= upto)?;
        Some(self.last_from(first, upto))
    }

    /// The latest occurrence `<= upto`, given `first`, an occurrence `<= upto`.
    fn last_from(&self, first: DateTime<Utc>, upto: DateTime<Utc>) -> DateTime<Utc> {
        let mut cur = first;
        for _ in 0..LINEAR_STEPS {
            match self.next_after(cur) {
                Some(n) if n <= upto => cur = n,
                _ => return cur,
            }
        }
        // `cur` is an occurrence, so the first occurrence after `cur - 1s` is `cur`.
        self.last_upto(cur - TimeDelta::seconds(1), cur, upto)
    }

    /// The latest occurrence `<= upto`, given an instant `good` whose next occurrence,
    /// `good_next`, is `<= upto`. Gallops back from `upto`, then bisects; whole seconds only,
    /// since occurrences are whole seconds.
    fn last_upto(
        &self,
        mut good: DateTime<Utc>,
        mut good_next: DateTime<Utc>,
        upto: DateTime<Utc>,
    ) -> DateTime<Utc> {
        // Occurrences are whole seconds, so flooring changes neither side's answer.
        let upto = floor_second(upto);
        good = floor_second(good);
        // The next occurrence after `bad` is > upto, so the answer is in (good, bad].
        let mut bad = upto;
        let mut width = TimeDelta::seconds(1);
        loop {
            let probe = upto - width;
            if probe <= good {
                break;
            }
            match self.next_after(probe) {
                Some(n) if n <= upto => {
                    good = probe;
                    good_next = n;
                    break;
                }
                _ => bad = probe,
            }
            width = width * 2;
        }
        while (bad - good).num_seconds() > 1 {
            let mid = good + TimeDelta::seconds((bad - good).num_seconds() / 2);
            match self.next_after(mid) {
                Some(n) if n <= upto => {
                    good = mid;
                    good_next = n;
                }
                _ => bad = mid,
            }
        }
        good_next
    }

    /// [`Timetable::next_after`] for a wall-clock job.
    fn next_wall_clock(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Every wall-clock time the local clock has shown up to `after` maps to an instant
        // <= after. That is local(after), except in the second half of a repeated range, where
        // the clock already showed the whole range once.
        let mut wall = floor_naive(after.with_timezone(&self.tz).naive_local());
        if let LocalResult::Ambiguous(_, later) = self.tz.from_local_datetime(&wall) {
            if after >= later {
                wall = self.last_repeated_wall(wall)?;
            }
        }
        for _ in 0..WALL_STEPS_CAP {
            wall = self.cron.find_next_occurrence(&wall, false).ok()?;
            let t = self.first_instant_at_or_after(wall)?;
            if t > after {
                return Some(t);
            }
        }
        None
    }

    /// `min { t : local(t) >= wall }`: the instant of a wall-clock time that happens once, the
    /// first instant of a repeated one, the first instant after the gap for a skipped one.
    fn first_instant_at_or_after(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        let exists = |w: &NaiveDateTime| self.tz.from_local_datetime(w).earliest();
        if let Some(t) = exists(&wall) {
            return Some(t.with_timezone(&Utc));
        }
        // In a gap: find the first wall-clock second after it, minutes first, then seconds.
        let mut probe = wall;
        for _ in 0..TRANSITION_MINUTES_CAP {
            probe += TimeDelta::minutes(1);
            if let Some(mut first) = exists(&probe) {
                for _ in 0..59 {
                    probe -= TimeDelta::seconds(1);
                    match exists(&probe) {
                        Some(t) => first = t,
                        None => break,
                    }
                }
                return Some(first.with_timezone(&Utc));
            }
        }
        None
    }

    /// The last wall-clock second of the repeated range that `wall` (ambiguous) is in.
    fn last_repeated_wall(&self, wall: NaiveDateTime) -> Option<NaiveDateTime> {
        let repeated = |w: &NaiveDateTime| {
            matches!(self.tz.from_local_datetime(w), LocalResult::Ambiguous(..))
        };
        let mut probe = wall;
        for _ in 0..TRANSITION_MINUTES_CAP {
            let step = probe + TimeDelta::minutes(1);
            if !repeated(&step) {
                for _ in 0..59 {
                    let s = probe + TimeDelta::seconds(1);
                    if !repeated(&s) {
                        break;
                    }
                    probe = s;
                }
                return Some(probe);
            }
            probe = step;
        }
        None
    }
}

/// What the EVAL should do for one scheduled project at `now` — the output of [`due`].
///
/// All instants are UTC and whole seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The occurrence to fire now: the latest one in `(cursor, now]`, if it is within the
    /// project's `starting_deadline` (older missed ones are never started). At most one per
    /// call.
    pub fire: Option<DateTime<Utc>>,
    /// Occurrences passed over — missed while the daemon was down, the machine asleep or the
    /// clock stepped (they are skipped, and the log says so) — ascending, at most the
    /// [`SKIPPED_KEEP`] latest. Includes [`Due::too_late`] when that is set.
    pub skipped: Vec<DateTime<Utc>>,
    /// How many occurrences were skipped in all (including a too-late one). Exact when
    /// [`Due::skipped_count_exact`]; otherwise a lower bound, one more than
    /// [`SKIP_COUNT_EXACT_MAX`] (and one more again with a too-late one).
    pub skipped_count: u64,
    /// Whether [`Due::skipped_count`] is exact.
    pub skipped_count_exact: bool,
    /// The earliest skipped occurrence (which [`Due::skipped`] may not list when it is capped).
    pub skipped_first: Option<DateTime<Utc>>,
    /// The latest missed occurrence when it was beyond `starting_deadline` — the reason nothing
    /// fires although occurrences were missed. It is also in [`Due::skipped`].
    pub too_late: Option<DateTime<Utc>>,
    /// The new persisted cursor, "the last occurrence handled" (the next occurrence is always
    /// computed from it, never from `now`, so an early or repeated EVAL neither repeats nor
    /// loses one): the latest occurrence `<= now`, fired or skipped; unchanged when nothing is
    /// due. It moves backwards only when the clock did ([`Due::clock_back`]).
    pub cursor: DateTime<Utc>,
    /// The next occurrence after the new cursor, for the daemon's wake-up timer; `None` if the
    /// expression never matches again.
    pub next: Option<DateTime<Utc>>,
    /// Set when the persisted cursor was later than `now` by more than
    /// [`crate::clock::STEP_BACK_TOLERANCE_MS`]: the clock has stepped back since it was
    /// written. Holds that cursor; [`Due::cursor`] then restarts from `now`, as for a new
    /// schedule. Without this, the schedule would fire nothing until the clock caught up
    /// with the old cursor again — for as long as the clock had been wrong.
    pub clock_back: Option<DateTime<Utc>>,
}

/// Decides what is due for one scheduled project at `now` (a UTC instant), from the persisted
/// `cursor` (the last occurrence handled, fired or skipped — never "now").
///
/// * `cursor == None`: a new schedule. Nothing fires for the past; the new cursor is `now`
///   (rounded down to the second), so the first occurrence after `now` fires when due.
/// * `cursor` later than `now` by more than [`crate::clock::STEP_BACK_TOLERANCE_MS`]: the
///   clock stepped back since the cursor was written. Nothing fires now; the schedule restarts
///   from `now` as a new one does, and [`Due::clock_back`] holds the old cursor (for the log
///   and `fleet status`). The occurrences it proposes again later that were already handled
///   under the clock that was ahead never get a second run: the store's unique key
///   (project, occurrence) refuses it.
/// * No occurrence in `(cursor, now]` (including `now <= cursor` after a step back within the
///   tolerance): nothing fires, the cursor is unchanged. So calling twice with the same `now`
///   and the returned cursor fires nothing the second time, and no occurrence `<= cursor`
///   ever fires.
/// * Otherwise let `L` be the latest occurrence in `(cursor, now]`. `L` fires iff
///   `now - L <= starting_deadline`; `starting_deadline == None` means no deadline, so `L`
///   always fires however late (as a Kubernetes CronJob without `startingDeadlineSeconds`).
///   The occurrences in `(cursor, L)` are skipped; a too-late `L` is skipped too and reported
///   in [`Due::too_late`]. The cursor becomes `L`.
///
/// Cost is bounded whatever the gap; see the module docs.
pub fn due(
    tt: &Timetable,
    cursor: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    starting_deadline: Option<Duration>,
) -> Due {
    let nothing = |cursor: DateTime<Utc>, next: Option<DateTime<Utc>>| Due {
        fire: None,
        skipped: Vec::new(),
        skipped_count: 0,
        skipped_count_exact: true,
        skipped_first: None,
        too_late: None,
        cursor,
        next,
        clock_back: None,
    };
    let Some(cursor) = cursor else {
        let cursor = floor_second(now);
        return nothing(cursor, tt.next_after(cursor));
    };
    if crate::clock::ahead_of_clock(cursor.timestamp_millis(), now.timestamp_millis()) {
        let fresh = floor_second(now);
        return Due {
            clock_back: Some(cursor),
            ..nothing(fresh, tt.next_after(fresh))
        };
    }
    let first = match tt.next_after(cursor) {
        Some(first) if first <= now => first,
        next => return nothing(cursor, next),
    };
    let latest = tt.last_from(first, now);
    let in_time = match starting_deadline.map(TimeDelta::from_std) {
        // None, or a deadline too large for chrono: no limit.
        None | Some(Err(_)) => true,
        Some(Ok(deadline)) => now - latest <= deadline,
    };

    let (mut skipped, mut skipped_count, skipped_count_exact) = skipped_before(tt, first, latest);
    let too_late = (!in_time).then_some(latest);
    if let Some(late) = too_late {
        if skipped.len() == SKIPPED_KEEP {
            skipped.remove(0);
        }
        skipped.push(late);
        skipped_count += 1;
    }
    Due {
        fire: in_time.then_some(latest),
        skipped_first: (skipped_count > 0).then_some(first),
        skipped,
        skipped_count,
        skipped_count_exact,
        too_late,
        cursor: latest,
        next: tt.next_after(latest),
        clock_back: None,
    }
}

/// The occurrences in `[first, latest)` (`first` an occurrence): the [`SKIPPED_KEEP`] latest,
/// ascending, their count, and whether the count is exact.
fn skipped_before(
    tt: &Timetable,
    first: DateTime<Utc>,
    latest: DateTime<Utc>,
) -> (Vec<DateTime<Utc>>, u64, bool) {
    // Forward, counting, up to the cap.
    let mut kept: VecDeque<DateTime<Utc>> = VecDeque::new();
    let mut count = 0u64;
    let mut cur = Some(first);
    while let Some(o) = cur.filter(|o| *o < latest) {
        if count == SKIP_COUNT_CAP {
            break;
        }
        if kept.len() == SKIPPED_KEEP {
            kept.pop_front();
        }
        kept.push_back(o);
        count += 1;
        cur = tt.next_after(o);
    }
    let Some(resume) = cur.filter(|o| *o < latest) else {
        return (kept.into(), count, true);
    };
    // Too many to walk: collect the latest ones backwards from `latest`, up to two more than
    // kept. The walks meet when this one reaches `resume`: the count is then exact, up to
    // SKIP_COUNT_EXACT_MAX. Otherwise `resume` lies below all it collected, which makes
    // SKIP_COUNT_EXACT_MAX + 1 found: more than SKIP_COUNT_EXACT_MAX, a true lower bound.
    let mut back = Vec::with_capacity(SKIPPED_KEEP + 2);
    let mut upto = latest - TimeDelta::seconds(1);
    while back.len() < SKIPPED_KEEP + 2 && resume <= upto {
        let o = tt.last_upto(resume - TimeDelta::seconds(1), resume, upto);
        back.push(o);
        upto = o - TimeDelta::seconds(1);
    }
    // The backward walk stops at `resume` once it has collected everything in [resume, latest);
    // otherwise `resume` and whatever lies between it and the walk are uncounted.
    if back.last() == Some(&resume) {
        count += back.len() as u64;
        let mut all: Vec<_> = kept.into();
        all.extend(back.into_iter().rev());
        let drop = all.len().saturating_sub(SKIPPED_KEEP);
        all.drain(..drop);
        (all, count, true)
    } else {
        // `resume` and what `back` holds: SKIP_COUNT_EXACT_MAX + 1 found, so more than
        // SKIP_COUNT_EXACT_MAX in all.
        count += back.len() as u64 + 1;
        back.truncate(SKIPPED_KEEP);
        back.reverse();
        (back, count, false)
    }
}

/// `t` with its sub-second part dropped.
fn floor_second(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_nanosecond(0).unwrap_or(t)
}

/// `t` with its sub-second part dropped.
fn floor_naive(t: NaiveDateTime) -> NaiveDateTime {
    t.with_nanosecond(0).unwrap_or(t)
}

#[cfg(test)]
mod tests;
