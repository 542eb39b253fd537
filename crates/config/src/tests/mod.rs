//! Tests of fleet.toml loading and validation, grouped by what they exercise: `load` (reading,
//! defaults, paths, display), `syntax` (syntax errors, unknown keys, types, error order), `keys`
//! (each key's own rules), `cron` (cron expressions: macros, errors naming the field, schedules
//! that never fire), `register` (the key register against docs/CONFIG.md) and `no_panic`
//! (no input makes the checker panic). This module holds the fixtures they share.

use std::path::{Path, PathBuf};

use super::{Config, ConfigErrors};

mod cron;
mod hosts;
mod http_listen;
mod keys;
mod load;
mod no_panic;
mod parallel;
mod register;
mod retention;
mod syntax;

const FULL: &str = r#"# every key
state_dir = "var/state"
max_concurrency = 8
tick = "250ms"
keep_runs = 50
keep_for = "7d"
max_log_size = "1MiB"
http_listen = "127.0.0.1:9464"
log_format = "json"
database = "postgresql://fleet:secret@db.example:5432/fleet"
host = "build-1.example"

[hosts."build-1.example"]
max_concurrency = 3

[namespaces.ops]
max_concurrency = 2
weight = 3

[namespaces.batch]
max_concurrency = 1

[projects.hello]
command = ["sh", "-c", "echo hello from $FLEET_PROJECT"]
namespace = "ops"
cwd = "work/./dir"
env = { GREETING = "hi", EMPTY = "" }
timeout = "10m"
kill_grace = "3s"
retries = 2
retry_backoff = "1m 30s"
schedule = "*/5 * * * *"
timezone = "Europe/Paris"
starting_deadline = "5m"
overlap = "replace"
accept_args = true

[projects."tidy.up-2"]
command = ["true"]
namespace = "default"
schedule = "30 0 6 * * 1-5"
overlap = "queue"
keep_runs = "off"
keep_for = "1h"
max_log_size = "8KiB"
on_failure = "minimal"
max_parallel = 2
hosts = ["build-1.example", "build-2"]

[projects.minimal]
command = ["true"]
"#;

fn path() -> &'static Path {
    Path::new("fleet.toml")
}

/// (line, key, message) of every error `text` yields.
fn errors(text: &str) -> Vec<(usize, String, String)> {
    match Config::parse(text, path()) {
        Ok(c) => panic!("expected errors, parsed {c:#?}"),
        Err(ConfigErrors(errs)) => errs
            .into_iter()
            .map(|e| {
                assert_eq!(e.file, path());
                (
                    e.line.expect("every parse error has a line"),
                    e.key,
                    e.message,
                )
            })
            .collect(),
    }
}

/// The single error `text` yields, as (line, key), after checking its message contains `needle`.
fn one(text: &str, needle: &str) -> (usize, String) {
    let errs = errors(text);
    assert_eq!(errs.len(), 1, "expected one error, got {errs:#?}");
    let (line, key, message) = errs.into_iter().next().unwrap();
    assert!(
        message.contains(needle),
        "message {message:?} should contain {needle:?}"
    );
    (line, key)
}

fn project(body: &str) -> String {
    format!("[projects.p]\ncommand = [\"true\"]\n{body}\n")
}

fn docs_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/CONFIG.md")
}
