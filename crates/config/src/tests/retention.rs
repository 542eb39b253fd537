//! `keep_runs`, `keep_for`, `max_log_size`: parsing, "off", inheritance, and errors naming the
//! line and key.

use std::time::Duration;

use super::{one, path, project};
use crate::{Config, Retention};

#[test]
fn defaults_top_level_and_project_values_combine() {
    let c = Config::parse(&project(""), path()).unwrap();
    assert_eq!(c.retention, Retention::default());
    assert_eq!(c.project("p").unwrap().retention.max_log_size, 64 << 20);

    let text = format!(
        "keep_runs = 20\nkeep_for = \"off\"\nmax_log_size = \"1MiB\"\n{}",
        project("keep_for = \"2h\"\nmax_log_size = 4096")
    );
    let c = Config::parse(&text, path()).unwrap();
    assert_eq!(
        c.retention,
        Retention {
            keep_runs: Some(20),
            keep_for: None,
            max_log_size: 1 << 20
        }
    );
    assert_eq!(
        c.project("p").unwrap().retention,
        Retention {
            keep_runs: Some(20),
            keep_for: Some(Duration::from_secs(7200)),
            max_log_size: 4096
        }
    );
    let off = Config::parse(&project("keep_runs = \"off\"\nkeep_for = \"off\""), path()).unwrap();
    assert!(!off.project("p").unwrap().retention.prunes());
    let si = Config::parse("max_log_size = \"2 KB\"", path()).unwrap();
    assert_eq!(si.retention.max_log_size, 2000);
}

#[test]
fn bad_values_name_line_and_key() {
    assert_eq!(
        one("keep_runs = 0", "write \"off\""),
        (1, "keep_runs".to_string())
    );
    assert_eq!(
        one(&project("keep_runs = \"all\""), "\"off\""),
        (3, "projects.p.keep_runs".to_string())
    );
    assert_eq!(
        one(&project("keep_for = \"10x\""), "invalid duration"),
        (3, "projects.p.keep_for".to_string())
    );
    assert_eq!(
        one("max_log_size = \"64 furlongs\"", "invalid size"),
        (1, "max_log_size".to_string())
    );
    // fleet's own words, not the parsing crate's.
    assert_eq!(
        one(
            "max_log_size = \"-5MiB\"",
            "expected a size such as \"64MiB\""
        ),
        (1, "max_log_size".to_string())
    );
    assert_eq!(
        one("max_log_size = \"99999999999999999999999GiB\"", "too large"),
        (1, "max_log_size".to_string())
    );
    assert_eq!(
        one("max_log_size = 100", "at least 1KiB"),
        (1, "max_log_size".to_string())
    );
    assert_eq!(
        one(&project("max_log_size = true"), "expected a size"),
        (3, "projects.p.max_log_size".to_string())
    );
}
