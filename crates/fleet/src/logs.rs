//! `fleet logs RUN [--follow]`: copies a run's log to stdout, streamed (a log may be larger than
//! memory). A read error names the log file; a write error is stdout's, and a reader that left
//! ends the command quietly ([`crate::console`]), even while `--follow` has nothing to write.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use supervisor::shim::rundir::RunDir;

use crate::cli::{open_existing_at, state_of, Failure, Result};
use crate::console;

/// How often `--follow` looks for more output.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// `fleet logs RUN [--follow]`.
pub fn logs(path: &Path, run: i64, follow: bool) -> Result<()> {
    let state = state_of(path)?;
    let Some(store) = open_existing_at(&state)? else {
        return Err(Failure::input(format!("unknown run id {run}")));
    };
    store.get_run(run).map_err(|e| match e {
        store::StoreError::UnknownRun(_) => Failure::input(format!("unknown run id {run}")),
        other => Failure::action(other),
    })?;
    let dir = RunDir::new(state.root(), run);
    let log = dir.log_path();
    let mut offset = 0u64;
    if !follow {
        return copy_from(&log, &mut offset);
    }
    loop {
        // Read the status before the file: whatever the run wrote before it ended is then
        // printed by the copy that follows.
        // Ended: recorded as such, or (no daemon running to record it) its shim wrote the exit
        // record of the current claim.
        let done = match store.get_run(run) {
            Ok(r) if r.status.is_terminal() => true,
            // An exit record that cannot be read must not pass for none: that would follow a
            // run that ended forever.
            Ok(r) if r.status.is_active() => dir
                .read_exit()
                .map_err(|e| {
                    Failure::action(format!(
                        "{}: {e}",
                        dir.path()
                            .join(supervisor::shim::rundir::EXIT_FILE)
                            .display()
                    ))
                })?
                .is_some_and(|e| e.token == r.claim_token),
            _ => false,
        };
        copy_from(&log, &mut offset)?;
        if done {
            return Ok(());
        }
        let until = Instant::now() + FOLLOW_POLL;
        while Instant::now() < until {
            // A run may stay silent for hours: a reader that left is noticed here, not at the
            // next write.
            if console::stdout_reader_gone() {
                return Err(Failure::reader_gone());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Copies the log from `offset` to its current end onto stdout, moving `offset` past what was
/// copied. A log not yet created is empty.
///
/// Errors: reading the log (exit 1, naming it); writing to stdout ([`console::stdout_failure`]).
fn copy_from(log: &Path, offset: &mut u64) -> Result<()> {
    let blame_log = |e: std::io::Error| Failure::action(format!("{}: {e}", log.display()));
    let mut file = match File::open(log) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(blame_log(e)),
    };
    file.seek(SeekFrom::Start(*offset)).map_err(blame_log)?;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(blame_log(e)),
        };
        out.write_all(&buf[..n]).map_err(console::stdout_failure)?;
        *offset += n as u64;
    }
    out.flush().map_err(console::stdout_failure)
}
