//! The shim's side of a run's bounded log (`max_log_size`, [`runrecord::log`]): the command's
//! stdout and stderr go to a pipe, and the shim copies what comes out of it into the log while
//! it waits for the command and its signals, in one `poll`. Without a bound the command writes
//! to the log file itself.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use runrecord::{BoundedLog, RunFiles};

use super::log::warn;
use crate::sys::files;
use crate::sys::readiness::{self, SignalReader};
use crate::sys::signals::{BlockedSignals, Signal};

/// Where the command's stdout and stderr go: the write end of a [`LogPump`]'s pipe when the log
/// has a bound (`max_log_size`, bytes), the log file itself otherwise. `Err` carries the
/// one-line message for the log and the exit record.
pub(super) fn command_output(
    max_log_size: Option<u64>,
    dir: &RunFiles,
    signals: &BlockedSignals,
) -> Result<(OwnedFd, Option<LogPump>), String> {
    let cannot_open = |e: io::Error| {
        format!(
            "fleet: could not open the run's log {}: {e}",
            dir.log_path().display()
        )
    };
    match max_log_size {
        Some(max) => {
            let (pump, write) = LogPump::new(dir, max, signals).map_err(cannot_open)?;
            Ok((write, Some(pump)))
        }
        None => Ok((dir.open_log().map_err(cannot_open)?.into(), None)),
    }
}

/// The first read's buffer, in bytes: one page, enough for a command that prints a few lines
/// (most print nothing, and the pipe's end-of-file needs no room at all).
const FIRST_READ: usize = 4096;

/// The buffer once a read filled [`FIRST_READ`], in bytes: a pipe's default capacity, so that a
/// command writing fast is read in as few calls as the pipe allows.
const LARGE_READ: usize = 64 * 1024;

/// The most the pump reads in one turn of the wait loop before it looks at signals and
/// deadlines again: a command that writes without pause must not starve a cancel.
const READS_PER_TURN: usize = 16;

/// The shim's side of a bounded log: the read end of the pipe the command writes its stdout
/// and stderr to, the log it copies into, and a reader for the shim's blocked signals, so that
/// the single-threaded shim waits for output, signals and deadlines in one `poll`.
///
/// The command is never blocked for the bound (output past it is dropped, not held back) nor
/// killed for it; a log that cannot be written (a full disk) is reported once and the output
/// is discarded meanwhile, so the command never waits for the disk either.
#[derive(Debug)]
pub(super) struct LogPump {
    pipe: Option<OwnedFd>,
    /// The run's files, for the log's first opening.
    files: RunFiles,
    /// The bound, bytes.
    max: u64,
    /// The log, once the first output made (or reopened) it.
    log: Option<BoundedLog>,
    signals: SignalReader,
    buf: Vec<u8>,
    write_failed: bool,
}

impl LogPump {
    /// A pump into the log of `dir` with the bound `max` (bytes), through a close-on-exec pipe;
    /// returns the pump and the pipe's write end, to become the command's stdout and stderr.
    /// The log itself is opened (made, if new) at the first output.
    ///
    /// Errors: no descriptors left.
    pub(super) fn new(
        dir: &RunFiles,
        max: u64,
        signals: &BlockedSignals,
    ) -> io::Result<(LogPump, OwnedFd)> {
        let (read, write) = files::pipe()?;
        readiness::set_nonblocking(&read)?;
        let pump = LogPump {
            pipe: Some(read),
            files: dir.clone(),
            max,
            log: None,
            signals: SignalReader::new(signals)?,
            buf: vec![0u8; FIRST_READ],
            write_failed: false,
        };
        Ok((pump, write))
    }

    /// Waits at most `timeout` (forever if `None`) for output, which it copies to the log,
    /// or for a blocked signal, which it consumes and returns. `None`: output was copied, or
    /// the time ran out, or the wait was interrupted — the caller looks at the command and the
    /// clock again either way.
    ///
    /// Errors: `poll` failed.
    pub(super) fn wait(&mut self, timeout: Option<Duration>) -> io::Result<Option<Signal>> {
        let ready = readiness::wait_pipe_or_signal(self.pipe.as_ref(), &self.signals, timeout)?;
        if ready.pipe {
            self.drain(READS_PER_TURN);
        }
        Ok(if ready.signal {
            self.signals.take()
        } else {
            None
        })
    }

    /// Copies what the pipe holds now, without waiting: for the end, once the command and
    /// everything it started are gone (a process that could not be killed, having changed
    /// user, may still write later: that is not waited for).
    pub(super) fn finish(&mut self) {
        self.drain(usize::MAX);
    }

    /// Reads up to `turns` times, until the pipe is empty or closed.
    fn drain(&mut self, turns: usize) {
        for _ in 0..turns {
            let Some(pipe) = &self.pipe else { return };
            match readiness::read(pipe, &mut self.buf) {
                Ok(0) => {
                    // Every writer is gone: nothing more will come.
                    self.pipe = None;
                    return;
                }
                Ok(n) => {
                    // A full buffer: the command writes a lot, so read in large chunks from
                    // now on (zeroing them costs page faults a quiet command never pays).
                    if n == self.buf.len() && self.buf.len() < LARGE_READ {
                        self.buf.resize(LARGE_READ, 0);
                    }
                    let written = match &mut self.log {
                        Some(log) => log.append(&self.buf[..n]),
                        None => BoundedLog::open(&self.files, self.max).and_then(|mut log| {
                            let done = log.append(&self.buf[..n]);
                            self.log = Some(log);
                            done
                        }),
                    };
                    if let Err(e) = written {
                        if !self.write_failed {
                            self.write_failed = true;
                            warn(format_args!(
                                "fleet shim: could not write the run's log ({e}); output is dropped until it can"
                            ));
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    warn(format_args!(
                        "fleet shim: could not read the command's output: {e}"
                    ));
                    self.pipe = None;
                    return;
                }
            }
        }
    }
}
