//! `fleet logs RUN [--follow]` for a run another host ran: its log lives in that host's
//! `runs/`, so it is read from what the database kept (the tail its daemon stored when the run
//! ended) or, while the run is active, through that host's HTTP listener (`GET
//! /api/runs/ID/log`, chunk after chunk; with `--follow`, polled until the run has ended).
//!
//! It owns the words for every way that can fail (no listener published, listener unreachable)
//! — each names the host and says where the log can be read. It never reads a local file.

use store::{HostRow, Run, Store};
use supervisor::http::remote::get_log;

use crate::console;
use crate::failure::{Failure, Result};

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
pub fn print(store: &Store, run: &Run, host: &str, follow: bool) -> Result<()> {
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
        crate::logs::wait_for_more()?;
    }
}
