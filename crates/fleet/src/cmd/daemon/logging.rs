//! The daemon's log: where its lines go (stderr) and in which of three shapes.
//!
//! - `text` (the default): `TIME LEVEL target: message field=value …`, coloured on a terminal.
//! - `text` under systemd, when standard error is the journal's stream (`JOURNAL_STREAM` names
//!   it): no timestamp (the journal stamps every line itself), and each line starts with the
//!   sd-daemon priority prefix (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug and trace),
//!   which journald reads as the entry's priority (`journalctl -p warning` then works). A prefix
//!   rather than the journal's native protocol (tracing-journald): it needs no socket of its
//!   own, loses nothing when the journal is slow (the stream buffers), and the same lines read
//!   fine when stderr is redirected elsewhere by hand.
//! - `json`: one JSON object per line (`timestamp`, `level`, `target`, `fields`), for log
//!   shippers; chosen, it wins under systemd too (a prefix would break the JSON).

use std::fmt;

use config::LogFormat;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber: level from `RUST_LOG` (default `info`), lines in `format`
/// on stderr, each line a journal entry with its priority when stderr is the journal's stream.
pub fn init(format: LogFormat) {
    let filter = || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // A log line that cannot be written (stderr a pipe whose reader left, a full disk) is
    // dropped. With internal errors on, the subscriber reports the failure with `eprintln!`,
    // which panics on that same stderr and would take the daemon down.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    match format {
        LogFormat::Json => builder.json().with_ansi(false).init(),
        LogFormat::Text if stderr_is_journal() => builder
            .with_ansi(false)
            .event_format(Journal(
                tracing_subscriber::fmt::format()
                    .without_time()
                    .with_ansi(false),
            ))
            .init(),
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
}

/// Whether standard error is the journal's stream (the shims ask the same).
fn stderr_is_journal() -> bool {
    supervisor::shim::log::stderr_is_journal()
}

/// The sd-daemon priority prefix of a level (syslog priorities).
fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// An event format that writes `<N>` (the event's journal priority) before what `F` writes.
struct Journal<F>(F);

impl<S, N, F> FormatEvent<S, N> for Journal<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", priority(event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_map_to_syslog_priorities() {
        assert_eq!(priority(&Level::ERROR), 3);
        assert_eq!(priority(&Level::WARN), 4);
        assert_eq!(priority(&Level::INFO), 6);
        assert_eq!(priority(&Level::DEBUG), 7);
        assert_eq!(priority(&Level::TRACE), 7);
    }
}
