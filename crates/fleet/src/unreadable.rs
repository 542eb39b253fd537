//! Rows of `runs` another program wrote with a value fleet cannot read, as a listing (`fleet
//! runs`, `fleet projects`) reports them: left out, named on stderr, and the exit status 1, so
//! that no reader takes the listing for the whole.

use crate::console;
use crate::failure::{Failure, Result};

/// After a listing that left out `rows`: `Ok` when there are none; else each is named on
/// stderr, and the failure (exit 1) says how many. Its message is the row's own when there is
/// one. What was printed on stdout stays valid (`reported`: no error object is added to a
/// `--json` listing); `what` says what the rows are missing from.
pub fn unless_all_read(rows: &[store::UnreadableRun], what: &str) -> Result<()> {
    let said = |r: &store::UnreadableRun| format!("{} ({what})", r.error);
    match rows {
        [] => Ok(()),
        [one] => Err(Failure::action(said(one)).reported()),
        many => {
            for r in many {
                console::eprintln(format_args!("fleet: {}", said(r)));
            }
            Err(Failure::action(format!(
                "{} rows hold values fleet cannot read, named above ({what})",
                many.len()
            ))
            .reported())
        }
    }
}
