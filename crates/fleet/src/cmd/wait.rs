//! `fleet wait RUN... [--timeout DURATION]`: blocks until each run, with its retries, has ended,
//! and exits as its command did ([`crate::run_end`]). It reads the database only: it works with
//! no daemon running and across a daemon's crash and restart.

use std::time::Duration;

use store::RunId;

use crate::ctx::{self, Ctx, IfInvalid};
use crate::failure::{Failure, Result};
use crate::run_end;

/// What `fleet wait` was asked.
#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    /// Run ids.
    #[arg(value_name = "RUN", required = true)]
    pub runs: Vec<RunId>,
    /// Give up after this long (exit 124), leaving the runs as they are.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
}

/// `fleet wait RUN…`.
///
/// Errors: see [`run_end::wait`]; no database at all is an unknown id (exit 2).
pub fn wait(ctx: &Ctx, args: &WaitArgs) -> Result<()> {
    let state = ctx.state(IfInvalid::Warn)?;
    let Some(store) = ctx::open_existing(&state)? else {
        return Err(Failure::unknown_run(args.runs[0]));
    };
    run_end::wait(&store, &args.runs, args.timeout)
}
