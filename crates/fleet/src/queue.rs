//! Queueing a run by hand (`fleet enqueue`, `fleet rerun`): the write, the new run's id alone on
//! stdout, and a nudge so that a running daemon starts it at once.
//!
//! The run is in the database whether or not a daemon runs (it waits in the queue for one), and
//! whether or not anyone reads its id: the nudge goes out either way.

use config::Config;
use store::{NewRun, RunId, Store};
use supervisor::statedir::StateDir;

use crate::console;
use crate::ctx;
use crate::failure::{Failure, Result};

/// Queues `run` in `store`, prints its id, and nudges the daemon of `config`'s state directory.
///
/// Errors: the database (exit 1); writing to stdout, once the nudge is sent.
pub fn add(store: &Store, config: &Config, run: &NewRun) -> Result<RunId> {
    let id = store
        .enqueue(run, store::now_ms())
        .map_err(Failure::action)?;
    let printed = console::println(id);
    ctx::nudge(&StateDir::of(config));
    printed.map(|()| id)
}
