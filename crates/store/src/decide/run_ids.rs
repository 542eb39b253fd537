//! Moving the next run id past a given one ([`crate::Store::reserve_run_ids`]): whether it is
//! needed, allowed, and from where. A backend reads the highest id its database has handed out
//! (read again under its write lock before it moves anything) and asks here; it moves its
//! counter only for [`Reserved::Moved`].

use crate::{Reserved, RunId, MAX_RESERVE_JUMP};

/// What reserving `highest` does when the database has handed out ids up to `last` (0 for
/// none): nothing when the next id is above `highest` already ([`Reserved::Ahead`]); nothing
/// when `highest` is more than [`MAX_RESERVE_JUMP`] past it ([`Reserved::TooFar`], so that a
/// stray file's name cannot use up the id range); else new runs are numbered above `highest`,
/// from the next id as it was ([`Reserved::Moved`]).
pub(crate) fn reserve(last: RunId, highest: RunId) -> Reserved {
    if last >= highest {
        Reserved::Ahead
    } else if highest - last > MAX_RESERVE_JUMP {
        Reserved::TooFar { next: last + 1 }
    } else {
        Reserved::Moved { from: last + 1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ahead_moved_or_too_far() {
        assert_eq!(reserve(0, 0), Reserved::Ahead);
        assert_eq!(reserve(7, 5), Reserved::Ahead);
        assert_eq!(reserve(7, 7), Reserved::Ahead);
        assert_eq!(reserve(7, 8), Reserved::Moved { from: 8 });
        assert_eq!(reserve(0, 5), Reserved::Moved { from: 1 });
        assert_eq!(
            reserve(7, 7 + MAX_RESERVE_JUMP),
            Reserved::Moved { from: 8 }
        );
        assert_eq!(
            reserve(7, 8 + MAX_RESERVE_JUMP),
            Reserved::TooFar { next: 8 }
        );
        assert_eq!(reserve(41, RunId::MAX), Reserved::TooFar { next: 42 });
        // The last id possible: never a step past it.
        assert_eq!(reserve(RunId::MAX, RunId::MAX), Reserved::Ahead);
    }
}
