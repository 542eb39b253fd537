//! The shim's writes of its records: each one retried until it is on disk (a full or failing
//! disk delays a record, never loses it), in the run's record slot. It owns the retry policy and where the exit record's
//! failpoints sit; it must never give up on a record while the shim holds the run's lock (that
//! would turn a real status into `lost`), and never write without that lock.

use std::io;
use std::time::Duration;

use runrecord::{ExitRecord, Record, RunFiles, RunLock};

use crate::backoff::Backoff;

use super::failpoint_macros::{crash_point, io_failpoint};
use super::log;
use super::ShimArgs;

/// How long the shim waits before it tries again to write a record it could not write (a full
/// or failing disk); the wait doubles after each failure, up to [`RECORD_RETRY_MAX`].
const RECORD_RETRY_FIRST: Duration = Duration::from_millis(50);
/// The longest wait between two attempts at writing a record.
const RECORD_RETRY_MAX: Duration = Duration::from_secs(5);

/// Writes the `exit` record durably, retrying until it is (see [`write_retrying`]): the command
/// is gone, and its status exists nowhere else.
pub(super) fn write_exit(
    a: &ShimArgs,
    dir: &RunFiles,
    lock: &RunLock,
    record: &ExitRecord,
) -> io::Result<()> {
    crash_point!("shim-before-exit-file");
    let record = Record::Exit(record.clone());
    write_retrying(a, "exit", || {
        io_failpoint!("shim-exit-record-fails");
        crash_point!("shim-exit-record-torn", dir.write_torn(lock, &record));
        write_record(dir, lock, record.clone())
    })?;
    crash_point!("shim-after-exit-file");
    Ok(())
}

/// Writes one record, appended to the run's record slot. A shim writes no tombstone:
/// `InvalidInput`.
pub(super) fn write_record(dir: &RunFiles, lock: &RunLock, record: Record) -> io::Result<()> {
    match record {
        Record::Started(r) => dir.write_started(lock, &r),
        Record::Running(r) => dir.write_running(lock, &r),
        Record::Exit(r) => dir.write_exit(lock, &r),
        Record::Tombstone(_) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a shim never writes a tombstone",
        )),
    }
}

/// Calls `write` until it succeeds, waiting [`RECORD_RETRY_FIRST`] after the first failure and
/// twice as long after each next one, up to [`RECORD_RETRY_MAX`]. For the records recovery reads
/// to decide a run's fate: while the shim holds the run's lock, the run is alive to the daemon
/// (its status waits), whereas a shim that gave up would release the lock with the record
/// missing, and a real status would become `lost`. Failures are reported on stderr (the first,
/// then at doubling intervals, so a disk full for hours does not flood the log), and so is the
/// success after them.
///
/// Errors: only `InvalidInput` (a record written under another run's lock: a bug that no
/// retry can mend), at once.
pub(super) fn write_retrying(
    a: &ShimArgs,
    record: &str,
    mut write: impl FnMut() -> io::Result<()>,
) -> io::Result<()> {
    let mut retry = Backoff::<std::time::Instant>::new(RECORD_RETRY_FIRST, RECORD_RETRY_MAX);
    loop {
        match write() {
            Ok(()) => {
                let failures = retry.failures();
                if failures > 0 {
                    log::warn(format_args!(
                        "fleet shim: run {} claim {}: the {record} record is written, after {failures} failed attempt(s)",
                        a.run_id, a.token
                    ));
                }
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => return Err(e),
            Err(e) => {
                let wait = retry.next_wait();
                let failures = retry.failures();
                if failures.is_power_of_two() {
                    log::warn(format_args!(
                        "fleet shim: run {} claim {}: could not write the {record} record ({e}); retrying, keeping the run's lock (attempt {failures}, next in {} ms)",
                        a.run_id,
                        a.token,
                        wait.as_millis()
                    ));
                }
                // The shim is single-threaded and has nothing else to do until the record is
                // written: signals stay blocked and pending (a cancel of a command that has not
                // started yet is honoured once it has).
                std::thread::sleep(wait);
            }
        }
    }
}
