//! `fleet logs RUN [--follow]`: copies a run's log to stdout, streamed (a log may be larger than
//! memory). A read error names the log file; a write error is stdout's, and a reader that left
//! ends the command quietly ([`crate::console`]), even while `--follow` has nothing to write.
//!
//! A log with a size bound is compacted by its shim while it grows: the file is replaced by one
//! that starts with a marker line (how many bytes of output were dropped in all) and holds the
//! newest output. `--follow` therefore keeps its place as a position in the command's whole
//! output, not in the file: after a compaction it goes on where it was if the new file still
//! holds that point, and otherwise prints the marker for what it missed and goes on from the
//! oldest output kept (see `runrecord::log`).
//!
//! A run another host ran (on a shared database) has its log in that host's `runs/`: it is read
//! from what the database kept (the tail its daemon stored when the run ended) or, while the run
//! is active, through that host's HTTP listener (`GET /api/runs/ID/log`, chunk after chunk; with
//! `--follow`, polled until the run has ended) — never from a local file. Every way that can
//! fail (no listener published, listener unreachable) names the host and says where the log can
//! be read.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use fleet_http::remote::get_log;
use runrecord::{marker_line, parse_marker, RunFiles, MARKER_MAX_LEN};
use store::{HostRow, Run, RunId, Store};
use supervisor::statedir::StateDir;

use crate::console;
use crate::ctx::{self, Ctx, IfInvalid};
use crate::failure::{Failure, Result};

/// What `fleet logs` was asked.
#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    /// The run id.
    pub run: RunId,
    /// Keep printing as the run writes, until it ends.
    #[arg(long, short)]
    pub follow: bool,
}

/// How often `--follow` looks for more output.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Whether a run claimed by `host` ran on this machine. With SQLite every run did (the
/// database is this state directory's alone, whatever name its daemon ran under). On a shared
/// database the name decides, never the files that happen to be here (a state directory that
/// used SQLite before may hold files of other runs with the same ids): the name the last
/// daemon here ran as, else the config's `host` (or the hostname). With neither (no daemon
/// ever ran here and the config cannot be read), a run with files here counts as this host's,
/// and one without as another host's: its log is looked for there, and a failure says so,
/// where taking it for this host's would print nothing and succeed.
fn ran_here(ctx: &Ctx, state: &StateDir, store: &Store, host: &str, files: &RunFiles) -> bool {
    if !store.is_shared() {
        return true;
    }
    if let Some(name) = state.recorded_host() {
        return name == host;
    }
    if let Some(c) = ctx.config_if_valid() {
        return c.host == host;
    }
    files.exists().unwrap_or(false)
}

/// `fleet logs RUN [--follow]`.
pub fn logs(ctx: &Ctx, args: &LogsArgs) -> Result<()> {
    let LogsArgs { run, follow } = *args;
    let state = ctx.state(IfInvalid::Warn)?;
    let Some(store) = ctx::open_existing(&state)? else {
        return Err(Failure::unknown_run(run));
    };
    let row = store
        .get_run(run)
        .map_err(|e| Failure::run_not_read(run, e))?;
    let dir = RunFiles::new(state.root(), run);
    let log = dir.log_path();
    // A run another host ran has its log there, not here.
    if let Some(host) = row
        .host
        .as_deref()
        .filter(|h| !ran_here(ctx, &state, &store, h, &dir))
    {
        return print_remote(&store, &row, host, follow);
    }
    // The position in the command's whole output of the next byte to print; `None` until the
    // first copy, which prints the file as it is, marker included.
    let mut position: Option<u64> = None;
    // On a shared database a run no host has claimed has no log anywhere yet: files with its
    // id here are another install's (see `ran_here`).
    let unclaimed = |r: &Run| store.is_shared() && r.host.is_none() && r.started_at.is_none();
    if !follow {
        if unclaimed(&row) {
            return Ok(());
        }
        return copy_new(&log, &mut position);
    }
    loop {
        // Read the status before the file: whatever the run wrote before it ended is then
        // printed by the copy that follows.
        // Ended: recorded as such, or (no daemon running to record it) its shim wrote the exit
        // record of the current claim.
        let now = store.get_run(run);
        // A run followed while queued may be claimed by another host: its log is there. Nothing
        // was printed from here yet (it has no files here), so the follow goes on there.
        if let Ok(r) = &now {
            if let Some(host) = r
                .host
                .as_deref()
                .filter(|h| !ran_here(ctx, &state, &store, h, &dir))
            {
                return print_remote(&store, r, host, follow);
            }
        }
        let not_yet = matches!(&now, Ok(r) if unclaimed(r));
        let done = match now {
            Ok(r) if r.status.is_terminal() => true,
            // An exit record that cannot be read must not pass for none: that would follow a
            // run that ended forever.
            Ok(r) if r.status.is_active() => dir
                .read_exit()
                .map_err(|e| Failure::action(format!("{}: {e}", dir.lock_path().display())))?
                .is_some_and(|e| e.token == r.claim_token),
            _ => false,
        };
        if !not_yet {
            copy_new(&log, &mut position)?;
        }
        if done {
            return Ok(());
        }
        wait_for_more()?;
    }
}

/// Waits [`FOLLOW_POLL`] before `--follow` looks for more output.
///
/// Errors: the reader of stdout left ([`Failure::reader_gone`]): a run may stay silent for
/// hours, so it is noticed here, not at the next write.
fn wait_for_more() -> Result<()> {
    let until = Instant::now() + FOLLOW_POLL;
    while Instant::now() < until {
        if console::stdout_reader_gone() {
            return Err(Failure::reader_gone());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Copies onto stdout what the log holds past `position` (a position in the command's whole
/// output, see the module documentation; `None`: the whole file), and moves `position` past
/// what was copied. A log not yet created is empty. When the log was compacted past
/// `position`, a marker line for the bytes missed comes first.
///
/// Errors: reading the log (exit 1, naming it); writing to stdout ([`console::stdout_failure`]).
fn copy_new(log: &Path, position: &mut Option<u64>) -> Result<()> {
    let blame_log = |e: std::io::Error| Failure::action(format!("{}: {e}", log.display()));
    let mut file = match File::open(log) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(blame_log(e)),
    };
    // One descriptor for the marker and the output: a compaction replaces the file whole (a
    // rename), so what this descriptor reads is one consistent log.
    let mut start = Vec::with_capacity(MARKER_MAX_LEN);
    (&mut file)
        .take(MARKER_MAX_LEN as u64)
        .read_to_end(&mut start)
        .map_err(blame_log)?;
    let (marker_len, dropped) = parse_marker(&start).map_or((0, 0), |(l, d)| (l as u64, d));
    let len = file.metadata().map_err(blame_log)?.len();
    let mut out = std::io::stdout().lock();
    let offset = match *position {
        None => 0,
        Some(p) if p >= dropped => (marker_len + (p - dropped)).min(len),
        Some(p) => {
            out.write_all(marker_line(dropped - p).as_bytes())
                .map_err(console::stdout_failure)?;
            marker_len
        }
    };
    file.seek(SeekFrom::Start(offset)).map_err(blame_log)?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(blame_log(e)),
        };
        out.write_all(&buf[..n]).map_err(console::stdout_failure)?;
    }
    // The file's end is this far into the command's whole output (the marker line is not
    // output).
    let end = file.stream_position().map_err(blame_log)?;
    *position = Some(dropped + end.saturating_sub(marker_len));
    out.flush().map_err(console::stdout_failure)
}

/// Prints the log of `run`, which host `host` ran (not this one); with `follow`, goes on
/// printing its output as the run writes it, until the run has ended and everything it wrote
/// is printed.
///
/// The listener serves at most one chunk per request, by position in the command's whole
/// output (a compacted log included): every chunk up to the end is read in turn, so a log
/// longer than a chunk is printed whole.
///
/// Errors: exit 1 when the log cannot be read from here: an active run on a host that serves
/// no `http_listen`, or whose listener cannot be reached or refuses (also in the middle of a
/// `--follow`); the database's errors; the reader of stdout gone.
fn print_remote(store: &Store, run: &Run, host: &str, follow: bool) -> Result<()> {
    // An ended run's whole log, when the database kept it whole: no need to ask the host. A
    // cut one is the fallback when the host cannot serve the whole log.
    let mut cut_tail = None;
    if run.status.is_terminal() {
        if let Some(t) = store.log_tail(run.id).map_err(Failure::action)? {
            if !t.cut {
                return console::write_bytes(&t.tail);
            }
            cut_tail = Some(t);
        }
    }
    let print_cut_tail = |t: &store::LogTail| {
        console::eprintln(format!(
            "(tail of the log kept in the database; the full log is on host {}, whose listener cannot be read from here)",
            t.host
        ));
        // A cut tail may start inside a character: from the first whole one.
        let from = t
            .tail
            .iter()
            .take(3)
            .take_while(|b| (**b & 0xC0) == 0x80)
            .count();
        console::write_bytes(&t.tail[from..])
    };
    let hosts = store.hosts().map_err(Failure::action)?;
    let addr = hosts
        .iter()
        .find(|h: &&HostRow| h.name == host)
        .and_then(|h| h.http_addr.clone());
    let Some(addr) = addr else {
        if let Some(t) = &cut_tail {
            return print_cut_tail(t);
        }
        return Err(Failure::action(format!(
            "run {} is {} on host {host}, whose log cannot be read from here (it serves no http_listen); run `fleet logs {}` on {host}",
            run.id,
            if run.status.is_terminal() { "ended" } else { "running" },
            run.id
        )));
    };
    // Nothing printed yet: the cut tail can still stand in for the whole log.
    if let Some(t) = &cut_tail {
        if get_log(&addr, host, run.id, 0, false).is_err() {
            return print_cut_tail(t);
        }
    }
    let unreadable = |e: String| {
        Failure::action(format!(
            "run {} ran on host {host}, whose listener {addr} cannot be read: {e}; run `fleet logs {}` on {host}",
            run.id, run.id
        ))
    };
    let mut position = 0;
    loop {
        // The status before the log: whatever the run wrote before it ended is then read by
        // the copy that follows.
        let done = !follow
            || store
                .get_run(run.id)
                .map_err(Failure::action)?
                .status
                .is_terminal();
        loop {
            let chunk = get_log(&addr, host, run.id, position, false).map_err(unreadable)?;
            console::write_bytes(&chunk.body)?;
            let next = chunk.next_offset;
            // Caught up: nothing new, or the end of what the log held at that read.
            let caught_up = next <= position || chunk.size.is_some_and(|size| next >= size);
            position = position.max(next);
            if caught_up {
                break;
            }
        }
        if done {
            return Ok(());
        }
        wait_for_more()?;
    }
}
