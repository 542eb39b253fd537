//! `max_parallel`: a positive integer per project, default 1, refused with the file's line and
//! key otherwise.

use super::{one, path, project};
use crate::Config;

#[test]
fn max_parallel_must_be_a_positive_integer() {
    let (line, key) = one(&project("max_parallel = 0"), "must be at least 1, found 0");
    assert_eq!((line, key.as_str()), (3, "projects.p.max_parallel"));
    let (line, key) = one(&project("max_parallel = 2.5"), "expected an integer, found");
    assert_eq!((line, key.as_str()), (3, "projects.p.max_parallel"));
    let (line, key) = one(
        &project("max_parallel = \"3\""),
        "expected an integer, found",
    );
    assert_eq!((line, key.as_str()), (3, "projects.p.max_parallel"));
}

#[test]
fn max_parallel_defaults_to_one_and_reaches_the_caps() {
    let text = "[projects.p]\ncommand = [\"true\"]\nmax_parallel = 3\n\n[projects.q]\ncommand = [\"true\"]\n";
    let config = Config::parse(text, path()).unwrap();
    assert_eq!(config.max_parallel("p"), 3);
    assert_eq!(config.max_parallel("q"), 1);
    assert_eq!(config.max_parallel("unknown"), 1);
    let caps = config.caps();
    assert_eq!(caps.max_parallel_of("p"), 3);
    assert_eq!(caps.max_parallel_of("q"), 1);
}
