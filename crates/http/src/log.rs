//! A run's log, as the log API (`/api/runs/{id}/log`) and the dashboard's run page serve it.
//!
//! Positions count the command's whole output (see [`read_chunk`]). The log of a run this host
//! ran is its file in `runs/`. With many hosts on one database, a run another host ran has its
//! log on that host's disk: it is relayed from that host's listener (see [`super::remote`]),
//! or read from the tail the database kept once the run ended — so that every host's dashboard
//! shows every run's output, not an empty log for the runs it did not run.
//!
//! Which host ran a run is what its row says, never what files happen to be here: a state
//! directory may hold files of another install's runs with the same ids (one that used SQLite
//! before it joined a shared database), and serving those as another host's run would show one
//! command's output as another's.

use std::io::{Cursor, Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use runrecord::{marker_line, parse_marker, RunFiles, MARKER_MAX_LEN};
use serde::Deserialize;
use store::{LogTail, Run, RunId, StoreError};

use super::api::{get_run, QueryOf, RunIdPath};
use super::observed::{Observed, MAX_RELAYS};
use super::remote;

/// The most bytes of log one `/api/runs/{id}/log` answer carries.
pub(super) const LOG_CHUNK: u64 = 256 * 1024;

/// The query of `/api/runs/{id}/log`.
#[derive(Deserialize)]
pub(super) struct LogQuery {
    /// The first byte wanted (default 0).
    offset: Option<u64>,
}

/// One read of a run's log, in positions of the command's whole output (see [`read_chunk`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct LogChunk {
    /// What to send: a marker line for output dropped before the log's oldest byte kept, when
    /// the position asked for is older than that, then the output itself.
    pub(super) bytes: Vec<u8>,
    /// The position to ask for next: where this chunk's output ends.
    pub(super) next: u64,
    /// How much output the command had written in all at the read (dropped bytes included).
    pub(super) size: u64,
    /// The position of the oldest output the log still holds (0 unless it was compacted).
    pub(super) first: u64,
}

/// Up to [`LOG_CHUNK`] bytes of run `id`'s log file from position `offset` in the command's
/// whole output (see [`read_chunk`]). A log not written yet reads as empty. `growing`: the run
/// may still write (see [`utf8_cut`]).
///
/// Errors: opening or reading the log (other than its absence).
pub(super) fn read_log(
    state_dir: &std::path::Path,
    id: RunId,
    offset: u64,
    growing: bool,
) -> std::io::Result<LogChunk> {
    let path = RunFiles::new(state_dir, id).log_path();
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(empty()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    read_chunk(&mut file, len, offset, growing)
}

/// The chunk of a log that does not exist (yet): nothing, at position 0.
fn empty() -> LogChunk {
    LogChunk {
        bytes: Vec::new(),
        next: 0,
        size: 0,
        first: 0,
    }
}

/// Up to [`LOG_CHUNK`] bytes of the log `log` (its `len` bytes as they are on disk: a file, or
/// a whole log the database kept) from position `offset` in the command's whole output, cut
/// to character boundaries (see [`utf8_cut`]; `growing`: more may be written).
///
/// Positions count the output since the command started, not the bytes of the file: a log with
/// a size bound is compacted as it grows (its file replaced by one that starts with a marker
/// line saying how many bytes were dropped, see [`runrecord::log`]), and a reader that
/// follows it by file offsets would skip or repeat output after each compaction. A position
/// older than the oldest output kept gets a marker line for the bytes it missed, then the
/// oldest output kept — as `fleet logs --follow` does with the file itself. One descriptor
/// reads the marker and the output, so they belong to the same file.
///
/// Errors: reading `log`.
fn read_chunk<R: Read + Seek>(
    log: &mut R,
    len: u64,
    offset: u64,
    growing: bool,
) -> std::io::Result<LogChunk> {
    let mut start = Vec::with_capacity(MARKER_MAX_LEN);
    (&mut *log)
        .take(MARKER_MAX_LEN as u64)
        .read_to_end(&mut start)?;
    let (marker_len, dropped) = parse_marker(&start).map_or((0, 0), |(l, d)| (l as u64, d));
    let size = dropped + len.saturating_sub(marker_len);
    let (mut bytes, from) = if offset < dropped {
        (marker_line(dropped - offset).into_bytes(), marker_len)
    } else {
        (Vec::new(), (marker_len + (offset - dropped)).min(len))
    };
    log.seek(SeekFrom::Start(from))?;
    let mut output = Vec::new();
    log.take(LOG_CHUNK).read_to_end(&mut output)?;
    let skipped = utf8_cut(&mut output, growing);
    let next = dropped + (from + (skipped + output.len()) as u64).saturating_sub(marker_len);
    bytes.append(&mut output);
    Ok(LogChunk {
        bytes,
        next,
        size,
        first: dropped,
    })
}

/// Cuts `buf` (log bytes read from some offset) to UTF-8 character boundaries, so that each
/// chunk decodes on its own: drops up to 3 leading continuation bytes (an offset inside a
/// character) and a trailing incomplete character (cut by the chunk's size, or not fully
/// written yet: it comes whole in the next chunk). Returns how many bytes were dropped at the
/// start. Bytes that are not UTF-8 at all are left as they are.
///
/// A piece of one character that is all there is left is kept back only while the log is
/// `growing` (its command may still write the rest; passed on, the rest would come alone and be
/// dropped as a stray continuation). Once the run has ended nothing more will come, so such a
/// piece is passed on as it is, never held back for ever.
fn utf8_cut(buf: &mut Vec<u8>, growing: bool) -> usize {
    let skip = buf
        .iter()
        .take(3)
        .take_while(|b| (**b & 0xC0) == 0x80)
        .count();
    if skip > 0 && skip < buf.len() {
        buf.drain(..skip);
    } else if skip > 0 {
        return 0;
    }
    // Only the last 4 bytes can hold an incomplete character.
    let tail_from = buf.len().saturating_sub(4);
    let tail = &buf[tail_from..];
    for lead in (0..tail.len()).rev() {
        let b = tail[lead];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let need = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        let at = tail_from + lead;
        if need > buf.len() - at && (at > 0 || growing) {
            buf.truncate(at);
        }
        break;
    }
    skip
}

/// Where a run's log is read from, seen from this daemon.
enum Source {
    /// Its file here: the database is this host's alone, this host ran the run, or the
    /// request is another daemon's relay.
    Here,
    /// No host ever claimed it (queued, or ended before a claim): it has no log.
    Nowhere,
    /// Another host ran it; the run has ended and the database kept its whole log.
    Tail(LogTail),
    /// Another host ran it: its listener (`None`: it publishes none), and the tail the
    /// database kept of its log, when the run has ended (cut: the log was longer).
    Host {
        name: String,
        addr: Option<String>,
        tail: Option<LogTail>,
    },
}

/// Where run `run`'s log is, for a request that is (`relayed`) or is not another daemon's
/// relay. Errors: the database's.
fn locate(o: &Observed, run: &Run, relayed: bool) -> Result<Source, StoreError> {
    let config = o.config();
    if relayed || config.database.is_none() {
        return Ok(Source::Here);
    }
    let other = match run.host.as_deref() {
        // Claimed by no host: never started, no log anywhere.
        None if run.started_at.is_none() => return Ok(Source::Nowhere),
        // Started before the database knew hosts (an upgrade of a shared database): its files
        // are where it ran, and only there can they be read.
        None => return Ok(Source::Here),
        Some(h) if h == config.host => return Ok(Source::Here),
        Some(h) => h,
    };
    let tail = if run.status.is_terminal() {
        o.store.log_tail(run.id)?
    } else {
        None
    };
    match tail {
        // The whole log, in the same positions as the file's: no need to ask the host.
        Some(t) if !t.cut => Ok(Source::Tail(t)),
        tail => {
            let addr = o
                .store
                .hosts()?
                .into_iter()
                .find(|h| h.name == other)
                .and_then(|h| h.http_addr);
            Ok(Source::Host {
                name: other.to_string(),
                addr,
                tail,
            })
        }
    }
}

/// A chunk of a log, and where it came from when not from this host's file.
pub(super) struct Served {
    /// The chunk, in positions of the command's whole output — but for a cut tail
    /// (`source` `tail-cut`), whose positions count from the tail's first byte.
    pub(super) chunk: LogChunk,
    /// `tail` or `tail-cut` when read from the tail the database kept (from here, or by the
    /// host relayed to), as the answer's `X-Log-Source` says.
    pub(super) source: Option<String>,
    /// The host the tail came from, when it is cut (the whole log is there).
    pub(super) cut_from: Option<String>,
}

/// Why a log could not be served: the status to answer and a one-line reason.
pub(super) struct Unserved {
    /// 502 (another host's log that cannot be read from here), 500 (this host's file cannot
    /// be read) or 503 (the database).
    pub(super) status: StatusCode,
    /// One line, naming the run (and the host).
    pub(super) reason: String,
}

/// The chunk of `run`'s log at `offset`, wherever the log is (see [`Source`]): a relay that
/// fails falls back to the tail the database kept, when it kept one.
///
/// Errors ([`Unserved`]): the database cannot be read (503); this host's file cannot be read
/// (500); another host's log, when that host publishes no listener or its listener cannot be
/// read, and the database kept no tail (502).
pub(super) async fn chunk_of(
    o: &Arc<Observed>,
    run: Run,
    offset: u64,
    relayed: bool,
) -> Result<Served, Unserved> {
    let id = run.id;
    let growing = !run.status.is_terminal();
    let down = |e: &dyn std::fmt::Display| Unserved {
        status: StatusCode::SERVICE_UNAVAILABLE,
        reason: format!("the database could not be read: {e}"),
    };
    let source = match o.read(move |o| locate(o, &run, relayed)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(down(&e)),
        Err(e) => return Err(down(&e)),
    };
    let here = |chunk| Served {
        chunk,
        source: None,
        cut_from: None,
    };
    let (name, addr, tail) = match source {
        Source::Here => {
            return match o
                .read(move |o| read_log(&o.state_dir, id, offset, growing))
                .await
            {
                Ok(Ok(chunk)) => Ok(here(chunk)),
                Ok(Err(e)) => Err(Unserved {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    reason: format!("run {id}: the log could not be read: {e}"),
                }),
                Err(e) => Err(down(&e)),
            }
        }
        Source::Nowhere => return Ok(here(empty())),
        Source::Tail(t) => return Ok(tail_chunk(t, offset)),
        Source::Host { name, addr, tail } => (name, addr, tail),
    };
    let Some(addr) = addr else {
        return tail.map(|t| tail_chunk(t, offset)).ok_or_else(|| Unserved {
            status: StatusCode::BAD_GATEWAY,
            reason: format!(
                "run {id} ran on host {name}, which serves no http_listen: its log is on that host (`fleet logs {id}` there)"
            ),
        });
    };
    let answer = relay(o, &addr, &name, id, offset)
        .await
        .and_then(|a| sane(a, growing));
    match answer {
        Ok(a) => Ok(Served {
            chunk: LogChunk {
                size: a.size.unwrap_or(a.next_offset),
                next: a.next_offset,
                bytes: a.body,
                first: 0,
            },
            source: a.source,
            cut_from: None,
        }),
        Err(e) => tail.map(|t| tail_chunk(t, offset)).ok_or_else(|| Unserved {
            status: StatusCode::BAD_GATEWAY,
            reason: format!(
                "run {id} ran on host {name}, whose listener {addr} cannot be read: {e}; its log is on that host (`fleet logs {id}` there)"
            ),
        }),
    }
}

/// Asks host `host`'s listener at `addr` for the chunk of run `id` at `offset`, on a blocking
/// thread, at most [`MAX_RELAYS`] at once (a request waits its turn for as long as one relay
/// may take, then gives up). Errors: in words, for a message.
async fn relay(
    o: &Arc<Observed>,
    addr: &str,
    host: &str,
    id: RunId,
    offset: u64,
) -> Result<remote::LogAnswer, String> {
    let wait: Duration = remote::TIMEOUT;
    let Ok(Ok(_turn)) = tokio::time::timeout(wait, o.relays.acquire()).await else {
        return Err(format!(
            "{MAX_RELAYS} relays to other hosts were under way for {} s",
            wait.as_secs()
        ));
    };
    let (addr, host) = (addr.to_string(), host.to_string());
    tokio::task::spawn_blocking(move || remote::get_log(&addr, &host, id, offset, true))
        .await
        .unwrap_or_else(|e| Err(e.to_string()))
}

/// A relayed answer as this daemon passes it on: at most one chunk (and a marker line), and an
/// `X-Log-Source` only where one can be (`tail` or `tail-cut`, for a run that has ended), so
/// that whatever answers at a host's address cannot make the dashboard take a running log for
/// a kept tail. Errors: an answer larger than a chunk, in words.
fn sane(mut a: remote::LogAnswer, growing: bool) -> Result<remote::LogAnswer, String> {
    if a.body.len() as u64 > LOG_CHUNK + MARKER_MAX_LEN as u64 {
        return Err(format!(
            "its answer carries {} bytes, more than one chunk of log",
            a.body.len()
        ));
    }
    if growing || !matches!(a.source.as_deref(), Some("tail" | "tail-cut")) {
        a.source = None;
    }
    Ok(a)
}

/// The chunk at `offset` of a tail the database kept: a whole log is read as its file would
/// be (positions of the whole output, a compaction's marker included); a cut one, the end of
/// a longer log, in its own positions, from its first whole character.
fn tail_chunk(t: LogTail, offset: u64) -> Served {
    let len = t.tail.len() as u64;
    if !t.cut {
        // Reading bytes in memory cannot fail.
        let chunk =
            read_chunk(&mut Cursor::new(&t.tail), len, offset, false).unwrap_or_else(|_| empty());
        return Served {
            chunk,
            source: Some("tail".into()),
            cut_from: None,
        };
    }
    let from = offset.min(len) as usize;
    let mut bytes = t.tail[from..].to_vec();
    bytes.truncate(LOG_CHUNK as usize);
    let skipped = utf8_cut(&mut bytes, false);
    Served {
        chunk: LogChunk {
            next: (from + skipped + bytes.len()) as u64,
            bytes,
            size: len,
            first: 0,
        },
        source: Some("tail-cut".into()),
        cut_from: Some(t.host),
    }
}

/// `GET /api/runs/{id}/log?offset=N`: the run's log (stdout and stderr) from byte N of the
/// command's whole output, at most 256 KiB of it, as `text/plain` (see [`read_chunk`]); the
/// header `X-Log-Next-Offset` says where the next read starts, `X-Log-Size` how much output
/// there was in all, and `X-Fleet-Host` names this host. Another host's run: relayed from that
/// host's listener, or read from the tail the database kept (header `X-Log-Source: tail`, or
/// `tail-cut` when the tail is only the end of the log, whose positions then count from the
/// tail's first byte). 404 for an unknown run; 400 for an id or offset that is not a whole
/// number; 502 with a one-line reason when another host's log cannot be read from here.
pub(super) async fn log(
    State(o): State<Arc<Observed>>,
    RunIdPath(id): RunIdPath,
    QueryOf(q): QueryOf<LogQuery>,
    headers: HeaderMap,
) -> Response {
    let run = match get_run(&o, id).await {
        Ok(run) => run,
        Err(res) => return res,
    };
    let relayed = headers.contains_key(remote::RELAYED);
    let mut res = match chunk_of(&o, run, q.offset.unwrap_or(0), relayed).await {
        Ok(served) => {
            let mut res = (
                [
                    (
                        header::CONTENT_TYPE,
                        "text/plain; charset=utf-8".to_string(),
                    ),
                    (
                        header::HeaderName::from_static("x-log-next-offset"),
                        served.chunk.next.to_string(),
                    ),
                    (
                        header::HeaderName::from_static("x-log-size"),
                        served.chunk.size.to_string(),
                    ),
                ],
                served.chunk.bytes,
            )
                .into_response();
            if let Some(v) = served.source.and_then(|s| HeaderValue::from_str(&s).ok()) {
                res.headers_mut()
                    .insert(header::HeaderName::from_static("x-log-source"), v);
            }
            res
        }
        Err(u) => (u.status, format!("{}\n", u.reason)).into_response(),
    };
    // Which host answered: a reader that meant another (at an address that host published
    // once) refuses the answer.
    if let Ok(v) = HeaderValue::from_str(&o.config().host) {
        res.headers_mut()
            .insert(header::HeaderName::from_static(remote::HOST_HEADER), v);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::{read_log, tail_chunk, utf8_cut, LogChunk};
    use runrecord::marker_line;
    use runrecord::RunFiles;
    use store::LogTail;

    /// Positions count the command's whole output: in a compacted log, a position older than
    /// the oldest output kept gets a marker for the bytes it missed, a later one the output
    /// after it, so a reader that follows `next` neither repeats nor skips across a compaction.
    #[test]
    fn log_positions_count_the_whole_output_across_a_compaction() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("runs")).unwrap();
        let log = RunFiles::new(dir.path(), 7).log_path();
        let read = |offset| read_log(dir.path(), 7, offset, false).unwrap();
        let chunk = |bytes: String, next, size, first| LogChunk {
            bytes: bytes.into_bytes(),
            next,
            size,
            first,
        };
        assert_eq!(read(0), chunk(String::new(), 0, 0, 0), "no log yet");

        // Never compacted: positions are the file's offsets.
        std::fs::write(&log, "0123456789").unwrap();
        assert_eq!(read(0), chunk("0123456789".into(), 10, 10, 0));
        assert_eq!(read(4), chunk("456789".into(), 10, 10, 0));
        assert_eq!(read(99), chunk(String::new(), 10, 10, 0));

        // Compacted: 1,000 bytes dropped, then the newest output, "abcdef" (positions
        // 1000..1006).
        std::fs::write(&log, format!("{}abcdef", marker_line(1_000))).unwrap();
        assert_eq!(
            read(0),
            chunk(format!("{}abcdef", marker_line(1_000)), 1_006, 1_006, 1_000)
        );
        assert_eq!(
            read(10),
            chunk(format!("{}abcdef", marker_line(990)), 1_006, 1_006, 1_000),
            "a reader at position 10 missed 990 bytes"
        );
        assert_eq!(read(1_002), chunk("cdef".into(), 1_006, 1_006, 1_000));
        assert_eq!(read(1_006), chunk(String::new(), 1_006, 1_006, 1_000));
        assert_eq!(read(u64::MAX), chunk(String::new(), 1_006, 1_006, 1_000));
    }

    #[test]
    fn chunks_are_cut_on_character_boundaries() {
        let text = "aé€😀b".as_bytes().to_vec();
        // Every start and end offset: what is kept decodes, and is the text between boundaries.
        for from in 0..text.len() {
            for to in from + 1..=text.len() {
                let mut buf = text[from..to].to_vec();
                let skipped = utf8_cut(&mut buf, false);
                if std::str::from_utf8(&text[from..to]).is_ok() {
                    assert_eq!(skipped, 0);
                    assert_eq!(buf, &text[from..to]);
                }
                if buf.len() > 3 || std::str::from_utf8(&buf).is_ok() {
                    let kept = &text[from + skipped..from + skipped + buf.len()];
                    assert_eq!(buf, kept);
                }
                // Only a piece of one character, alone, is left as it is.
                if buf.len() > 3 {
                    assert!(std::str::from_utf8(&buf).is_ok(), "{from}..{to}: {buf:?}");
                }
            }
        }
    }

    /// A character not fully written yet comes whole in a later chunk, even when its first
    /// bytes are all there is to read — while the run may still write. Once it has ended, a
    /// piece that will never be completed is passed on as it is.
    #[test]
    fn a_character_being_written_is_held_back_until_whole() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("runs")).unwrap();
        let log = RunFiles::new(dir.path(), 7).log_path();
        let read = |offset, growing| read_log(dir.path(), 7, offset, growing).unwrap();
        // "ab", then the first two bytes of 日 (e6 97 a5).
        std::fs::write(&log, b"ab\xe6\x97").unwrap();
        let first = read(0, true);
        assert_eq!((first.bytes.as_slice(), first.next), (&b"ab"[..], 2));
        let held = read(2, true);
        assert_eq!((held.bytes.as_slice(), held.next), (&b""[..], 2));
        std::fs::write(&log, b"ab\xe6\x97\xa5cd\n").unwrap();
        let rest = read(2, true);
        assert_eq!(String::from_utf8(rest.bytes).unwrap(), "日cd\n");
        assert_eq!(rest.next, 8);
        // Ended with a piece of a character: passed on, not held for ever.
        std::fs::write(&log, b"ab\xe6\x97").unwrap();
        assert_eq!(read(2, false).bytes, b"\xe6\x97");
    }

    /// A whole log the database kept reads as its file would, a compaction's marker included:
    /// the same positions as the host that ran it serves. A cut one reads in its own
    /// positions, from its first whole character.
    #[test]
    fn a_kept_tail_reads_as_its_file_would() {
        let whole = LogTail {
            host: "a".into(),
            tail: format!("{}abcdef", marker_line(1_000)).into_bytes(),
            cut: false,
        };
        let served = tail_chunk(whole.clone(), 1_002);
        assert_eq!(served.chunk.bytes, b"cdef");
        assert_eq!((served.chunk.next, served.chunk.size), (1_006, 1_006));
        assert_eq!(served.source.as_deref(), Some("tail"));
        let served = tail_chunk(whole, 6);
        assert_eq!(
            served.chunk.bytes,
            format!("{}abcdef", marker_line(994)).into_bytes()
        );

        let cut = LogTail {
            host: "a".into(),
            // The last bytes of 日 (e6 97 a5), then text.
            tail: b"\x97\xa5xyz".to_vec(),
            cut: true,
        };
        let served = tail_chunk(cut, 0);
        assert_eq!(served.chunk.bytes, b"xyz");
        assert_eq!((served.chunk.next, served.chunk.size), (5, 5));
        assert_eq!(served.source.as_deref(), Some("tail-cut"));
        assert_eq!(served.cut_from.as_deref(), Some("a"));
    }

    /// A relayed answer carries at most a chunk, and a kept tail's `X-Log-Source` only for a
    /// run that has ended.
    #[test]
    fn a_relayed_answer_is_passed_on_only_as_one_could_be() {
        let answer = |body: usize, source: Option<&str>| crate::remote::LogAnswer {
            body: vec![b'x'; body],
            next_offset: body as u64,
            size: None,
            source: source.map(str::to_string),
        };
        assert_eq!(
            super::sane(answer(5, Some("tail-cut")), true)
                .unwrap()
                .source,
            None
        );
        assert_eq!(
            super::sane(answer(5, Some("tail-cut")), false)
                .unwrap()
                .source
                .as_deref(),
            Some("tail-cut")
        );
        assert_eq!(
            super::sane(answer(5, Some("other")), false).unwrap().source,
            None
        );
        let limit = (super::LOG_CHUNK as usize) + runrecord::MARKER_MAX_LEN;
        assert!(super::sane(answer(limit, None), true).is_ok());
        assert!(super::sane(answer(limit + 1, None), true).is_err());
    }
}
