//! The shim's own log lines (a record it cannot write, a signal it cannot block…), written to
//! the stderr it shares with the daemon, in the daemon's shape: plain text, text with the
//! journal's `<4>` priority prefix when stderr is the journal's stream, or one JSON object per
//! line (`timestamp`, `level`, `target`, `fields.message`, as the daemon's JSON lines) when the
//! daemon logs JSON. The daemon decides once, at start, and passes it in [`ShimArgs`]
//! (`--log-style`): the shim has no config and no `JOURNAL_STREAM` of its own.
//!
//! Hand-written, no subscriber: the shim stays single-threaded and small.
//!
//! [`ShimArgs`]: super::ShimArgs

use std::io::{self, Write};
use std::sync::OnceLock;

use config::LogFormat;

/// The shape of the shim's log lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShimLog {
    /// A plain line.
    #[default]
    Text,
    /// A plain line after the journal's warning prefix `<4>`.
    Journal,
    /// One JSON object.
    Json,
}

impl ShimLog {
    /// The shape matching the daemon's log: `format` as the daemon applies it, the journal's
    /// prefix when stderr is the journal's stream.
    pub fn for_daemon(format: LogFormat) -> ShimLog {
        match format {
            LogFormat::Json => ShimLog::Json,
            LogFormat::Text if stderr_is_journal() => ShimLog::Journal,
            LogFormat::Text => ShimLog::Text,
        }
    }

    /// The spelling on the shim's command line (`--log-style`).
    pub fn as_str(self) -> &'static str {
        match self {
            ShimLog::Text => "text",
            ShimLog::Journal => "journal",
            ShimLog::Json => "json",
        }
    }

    /// The inverse of [`ShimLog::as_str`]; `None` for anything else.
    pub fn parse(s: &str) -> Option<ShimLog> {
        [ShimLog::Text, ShimLog::Journal, ShimLog::Json]
            .into_iter()
            .find(|l| l.as_str() == s)
    }
}

/// This shim's shape, set once its arguments are read; plain text until then.
static STYLE: OnceLock<ShimLog> = OnceLock::new();

/// Sets this process's shape (the first call wins).
pub fn set(style: ShimLog) {
    let _ = STYLE.set(style);
}

/// `message` as one line (newline included) of warning in `style`.
pub fn line(style: ShimLog, message: &str) -> String {
    match style {
        ShimLog::Text => format!("{message}\n"),
        ShimLog::Journal => format!("<4>{message}\n"),
        ShimLog::Json => {
            let object = serde_json::json!({
                "timestamp": store::rfc3339(store::now_ms()),
                "level": "WARN",
                "fields": { "message": message },
                "target": "fleet::shim",
            });
            format!("{object}\n")
        }
    }
}

/// Writes a warning line to stderr in this shim's shape, ignoring failure: the daemon's stderr
/// may be gone, and `eprintln!` would panic then.
pub fn warn(message: std::fmt::Arguments<'_>) {
    let style = STYLE.get().copied().unwrap_or_default();
    let _ = io::stderr().write_all(line(style, &message.to_string()).as_bytes());
}

/// Whether standard error is the journal's stream: `JOURNAL_STREAM` (`DEVICE:INODE`, set by
/// systemd for a service whose output goes to the journal) names what stderr is open on. The
/// variable alone is not enough: a daemon started by hand from a shell inside a systemd service
/// inherits it, with stderr elsewhere.
pub fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    crate::sys::files::identity(io::stderr()).is_ok_and(|id| id == (dev, ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape round-trips on the command line, and a JSON line is one object.
    #[test]
    fn shapes() {
        for s in [ShimLog::Text, ShimLog::Journal, ShimLog::Json] {
            assert_eq!(ShimLog::parse(s.as_str()), Some(s));
        }
        assert_eq!(line(ShimLog::Journal, "x"), "<4>x\n");
        let v: serde_json::Value = serde_json::from_str(&line(ShimLog::Json, "a \"b\"")).unwrap();
        assert_eq!(v["fields"]["message"], "a \"b\"");
        assert_eq!(v["level"], "WARN");
    }
}
