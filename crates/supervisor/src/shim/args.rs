//! The shim's arguments ([`ShimArgs`]) and their two encodings: the command line of an exec'd
//! `fleet shim` ([`ShimArgs::to_args`], [`ShimArgs::from_args`]), and the message the fork server
//! receives, which carries the command's environment too ([`ShimArgs::encode`],
//! [`ShimArgs::decode`]).
//!
//! Pure data: no I/O, no system call. Decoding never panics, whatever it is given.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::time::Duration;

/// Everything a shim needs to run one claim of one run; what follows `fleet shim` on its
/// command line ([`ShimArgs::to_args`] / [`ShimArgs::from_args`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimArgs {
    /// The state directory; the run's files are `<state_dir>/runs/<run_id>.*`.
    pub state_dir: PathBuf,
    /// The run's id.
    pub run_id: i64,
    /// The claim's token (the daemon increments it per claim); stamped on every record, and
    /// checked against the tombstones.
    pub token: u64,
    /// How long the command may run before the shim terminates its process group; `None` for
    /// no limit. Measured on the monotonic clock from the spawn.
    pub timeout: Option<Duration>,
    /// How long after SIGTERM the shim waits before SIGKILL.
    pub kill_grace: Duration,
    /// The command's working directory.
    pub cwd: PathBuf,
    /// The bound on the run's log, in bytes (`max_log_size`): the shim then reads the
    /// command's output through a pipe and keeps the log under it (see
    /// [`runrecord::log`]). `None`: the command writes to the log file directly, unbounded.
    pub max_log_size: Option<u64>,
    /// The command: program and arguments, no shell. Never empty.
    pub argv: Vec<OsString>,
    /// Changes to the command's environment, applied in order on top of the shim's own:
    /// `Some(value)` sets a variable, `None` removes it. Not part of [`ShimArgs::to_args`]:
    /// a command line is world-readable (`ps`), an environment is not, and project env may hold
    /// secrets. A shim started with `fleet shim` gets them as its own environment instead (and
    /// this list is empty); a shim forked by the fork server gets them here.
    pub env: Vec<(OsString, Option<OsString>)>,
    /// The shape of the shim's own log lines, the daemon's (`--log-style`, left out for plain
    /// text).
    pub log: super::log::ShimLog,
}

/// The largest message ([`ShimArgs::encode`]) the fork server accepts, and an idle shim reads, in
/// bytes (argv and environment of one run). Larger ones are refused before anything is sent;
/// the daemon then execs the shim instead.
pub const MAX_REQUEST: usize = 128 * 1024;

impl ShimArgs {
    /// The arguments that follow `fleet shim`:
    /// `--state-dir P --run-id N --token T [--timeout D] --kill-grace D --cwd P
    /// [--max-log-size BYTES] [--log-style text|journal|json] -- ARGV...`,
    /// where durations are written `SECONDS.NANOSECONDS` (nine digits) so they round-trip
    /// exactly. Paths and argv are passed as they are (non-UTF-8 included).
    pub fn to_args(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec![
            "--state-dir".into(),
            self.state_dir.clone().into_os_string(),
            "--run-id".into(),
            self.run_id.to_string().into(),
            "--token".into(),
            self.token.to_string().into(),
        ];
        if let Some(t) = self.timeout {
            out.push("--timeout".into());
            out.push(format_duration(t).into());
        }
        out.push("--kill-grace".into());
        out.push(format_duration(self.kill_grace).into());
        out.push("--cwd".into());
        out.push(self.cwd.clone().into_os_string());
        if let Some(max) = self.max_log_size {
            out.push("--max-log-size".into());
            out.push(max.to_string().into());
        }
        if self.log != super::log::ShimLog::Text {
            out.push("--log-style".into());
            out.push(self.log.as_str().into());
        }
        out.push("--".into());
        out.extend(self.argv.iter().cloned());
        out
    }

    /// Parses what [`ShimArgs::to_args`] produced (options in any order, each at most once).
    ///
    /// Errors: a message naming the problem — unknown or repeated option, missing value, bad
    /// number or duration, missing required option, missing `--` or empty command. Never panics.
    pub fn from_args(args: &[OsString]) -> Result<ShimArgs, String> {
        let mut state_dir = None;
        let mut run_id = None;
        let mut token = None;
        let mut timeout = None;
        let mut kill_grace = None;
        let mut cwd = None;
        let mut max_log_size = None;
        let mut log = None;
        let mut argv = None;
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let name = arg
                .to_str()
                .ok_or_else(|| format!("unexpected argument {arg:?}"))?;
            if name == "--" {
                argv = Some(it.by_ref().cloned().collect::<Vec<_>>());
                break;
            }
            let value = it
                .next()
                .ok_or_else(|| format!("missing value for {name}"))?;
            match name {
                "--state-dir" => set_once(&mut state_dir, name, PathBuf::from(value))?,
                "--run-id" => set_once(&mut run_id, name, parse_number::<i64>(name, value)?)?,
                "--token" => set_once(&mut token, name, parse_number::<u64>(name, value)?)?,
                "--timeout" => set_once(&mut timeout, name, parse_duration(name, value)?)?,
                "--kill-grace" => set_once(&mut kill_grace, name, parse_duration(name, value)?)?,
                "--cwd" => set_once(&mut cwd, name, PathBuf::from(value))?,
                "--max-log-size" => {
                    set_once(&mut max_log_size, name, parse_number::<u64>(name, value)?)?
                }
                "--log-style" => {
                    let style = value
                        .to_str()
                        .and_then(super::log::ShimLog::parse)
                        .ok_or_else(|| format!("bad value {value:?} for {name}"))?;
                    set_once(&mut log, name, style)?
                }
                _ => return Err(format!("unknown option {name}")),
            }
        }
        let argv = argv.ok_or("missing `--` before the command")?;
        if argv.is_empty() {
            return Err("empty command after `--`".into());
        }
        Ok(ShimArgs {
            state_dir: state_dir.ok_or("missing --state-dir")?,
            run_id: run_id.ok_or("missing --run-id")?,
            token: token.ok_or("missing --token")?,
            timeout,
            kill_grace: kill_grace.ok_or("missing --kill-grace")?,
            cwd: cwd.ok_or("missing --cwd")?,
            max_log_size,
            argv,
            env: Vec::new(),
            log: log.unwrap_or_default(),
        })
    }

    /// The arguments and the environment changes as one message for the fork server: `u32
    /// count` then `u32 length, bytes` for each of [`ShimArgs::to_args`], then the same for
    /// [`ShimArgs::env`] as `KEY=VALUE` (set) or `KEY` (remove). Numbers in native byte order
    /// (both ends are the same binary on the same host). Paths and values may be any bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut list = |items: Vec<Vec<u8>>| {
            out.extend_from_slice(&(items.len() as u32).to_ne_bytes());
            for item in items {
                out.extend_from_slice(&(item.len() as u32).to_ne_bytes());
                out.extend_from_slice(&item);
            }
        };
        list(self.to_args().into_iter().map(OsString::into_vec).collect());
        list(
            self.env
                .iter()
                .map(|(k, v)| {
                    let mut item = k.as_bytes().to_vec();
                    if let Some(v) = v {
                        item.push(b'=');
                        item.extend_from_slice(v.as_bytes());
                    }
                    item
                })
                .collect(),
        );
        out
    }

    /// The inverse of [`ShimArgs::encode`]; `None` if the bytes are not a well-formed message
    /// (a list cut short, or arguments [`ShimArgs::from_args`] refuses).
    /// Never panics, whatever the bytes.
    pub fn decode(bytes: &[u8]) -> Option<ShimArgs> {
        let mut rest = bytes;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, tail) = (rest.get(..n)?, rest.get(n..)?);
            rest = tail;
            Some(head)
        };
        let mut list = || -> Option<Vec<Vec<u8>>> {
            let count = u32::from_ne_bytes(take(4)?.try_into().ok()?) as usize;
            let mut items = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                let len = u32::from_ne_bytes(take(4)?.try_into().ok()?) as usize;
                items.push(take(len)?.to_vec());
            }
            Some(items)
        };
        let argv = list()?;
        let env = list()?;
        let argv: Vec<OsString> = argv.into_iter().map(OsString::from_vec).collect();
        let mut args = ShimArgs::from_args(&argv).ok()?;
        args.env = env
            .into_iter()
            .map(|item| match item.iter().position(|&b| b == b'=') {
                Some(i) => (
                    OsString::from_vec(item[..i].to_vec()),
                    Some(OsString::from_vec(item[i + 1..].to_vec())),
                ),
                None => (OsString::from_vec(item), None),
            })
            .collect();
        Some(args)
    }
}

fn set_once<T>(slot: &mut Option<T>, name: &str, value: T) -> Result<(), String> {
    if slot.is_some() {
        return Err(format!("{name} given twice"));
    }
    *slot = Some(value);
    Ok(())
}

fn parse_number<T: std::str::FromStr>(name: &str, value: &OsStr) -> Result<T, String> {
    value
        .to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{name}: not a valid number: {value:?}"))
}

fn format_duration(d: Duration) -> String {
    format!("{}.{:09}", d.as_secs(), d.subsec_nanos())
}

fn parse_duration(name: &str, value: &OsStr) -> Result<Duration, String> {
    let bad = || format!("{name}: not a duration in SECONDS.NANOSECONDS: {value:?}");
    let s = value.to_str().ok_or_else(bad)?;
    let (secs, nanos) = s.split_once('.').unwrap_or((s, "0"));
    let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(secs) || !all_digits(nanos) || nanos.len() > 9 {
        return Err(bad());
    }
    let secs: u64 = secs.parse().map_err(|_| bad())?;
    // "5" after the point means half a second: pad on the right to nine digits.
    let nanos: u32 = format!("{nanos:0<9}").parse().map_err(|_| bad())?;
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn sample() -> ShimArgs {
        ShimArgs {
            state_dir: "/var/lib/fleet state".into(),
            run_id: 17,
            token: 4,
            timeout: Some(Duration::new(600, 500)),
            kill_grace: Duration::from_millis(10_250),
            cwd: "/srv/job".into(),
            max_log_size: Some(64 << 20),
            argv: os(&["sh", "-c", "echo --token; exit 3", "--"]),
            env: Vec::new(),
            // Not the default: the round trip must carry it.
            log: crate::shim::log::ShimLog::Json,
        }
    }

    #[test]
    fn args_round_trip() {
        let a = sample();
        assert_eq!(ShimArgs::from_args(&a.to_args()), Ok(a.clone()));
        let no_timeout = ShimArgs {
            timeout: None,
            run_id: -3,
            token: u64::MAX,
            kill_grace: Duration::MAX,
            max_log_size: None,
            ..a
        };
        assert_eq!(
            ShimArgs::from_args(&no_timeout.to_args()),
            Ok(no_timeout.clone())
        );
        let odd = ShimArgs {
            cwd: PathBuf::from(OsString::from_vec(vec![b'/', 0xff, b'x'])),
            argv: vec![OsString::from_vec(vec![0xfe, b'a'])],
            ..no_timeout
        };
        assert_eq!(ShimArgs::from_args(&odd.to_args()), Ok(odd));
    }

    #[test]
    fn args_accept_short_fractions_and_any_order() {
        let args = os(&[
            "--cwd",
            "/",
            "--kill-grace",
            "2.5",
            "--token",
            "1",
            "--timeout",
            "3",
            "--run-id",
            "9",
            "--state-dir",
            "/s",
            "--",
            "true",
        ]);
        let a = ShimArgs::from_args(&args).unwrap();
        assert_eq!(a.kill_grace, Duration::from_millis(2500));
        assert_eq!(a.timeout, Some(Duration::from_secs(3)));
        assert_eq!(a.run_id, 9);
    }

    #[test]
    fn bad_args_are_errors() {
        let good = sample().to_args();
        let cases: Vec<(Vec<OsString>, &str)> = vec![
            (vec![], "missing `--`"),
            (good[..good.len() - 4].to_vec(), "empty command"),
            (good[2..].to_vec(), "missing --state-dir"),
            (os(&["--run-id"]), "missing value"),
            (os(&["--run-id", "x"]), "not a valid number"),
            (os(&["--token", "-1"]), "not a valid number"),
            (os(&["--timeout", "1.5s"]), "not a duration"),
            (os(&["--timeout", "1."]), "not a duration"),
            (os(&["--timeout", ".5"]), "not a duration"),
            (os(&["--timeout", "1.0000000001"]), "not a duration"),
            (
                os(&["--kill-grace", "99999999999999999999"]),
                "not a duration",
            ),
            (os(&["--bogus", "1"]), "unknown option"),
            (os(&["--token", "1", "--token", "2"]), "given twice"),
        ];
        for (args, expected) in cases {
            let err = ShimArgs::from_args(&args).unwrap_err();
            assert!(err.contains(expected), "{args:?}: {err}");
        }
        assert!(ShimArgs::from_args(&[OsString::from_vec(vec![0xff])]).is_err());
    }

    fn with_env() -> ShimArgs {
        ShimArgs {
            state_dir: PathBuf::from("/var/lib/fleet"),
            run_id: 12,
            token: 99,
            timeout: Some(Duration::from_millis(1500)),
            kill_grace: Duration::from_secs(10),
            cwd: PathBuf::from("/srv"),
            max_log_size: None,
            log: crate::shim::log::ShimLog::Journal,
            argv: vec!["sh".into(), "-c".into(), "echo a=b".into()],
            env: vec![
                ("FLEET_RUN_ID".into(), Some("12".into())),
                ("EMPTY".into(), Some("".into())),
                ("WITH_EQ".into(), Some("x=y=z".into())),
                ("FLEET_OCCURRENCE".into(), None),
                (
                    OsString::from_vec(vec![b'K', 0xff]),
                    Some(OsString::from_vec(vec![0xfe])),
                ),
            ],
        }
    }

    #[test]
    fn requests_round_trip() {
        let a = with_env();
        assert_eq!(ShimArgs::decode(&a.encode()), Some(a));
    }

    #[test]
    fn malformed_requests_are_refused_not_panicked_on() {
        let good = with_env().encode();
        for cut in 0..good.len() {
            assert_eq!(ShimArgs::decode(&good[..cut]), None, "cut at {cut}");
        }
        assert_eq!(ShimArgs::decode(&[0xff; 16]), None);
    }
}
