//! The host keys: `host`, `[hosts.<name>]` and a project's `hosts`, each refused with the file's
//! line and key when bad, and what they give the packer.

use super::{errors, one, path, project};
use crate::{machine_hostname, valid_host_name, Config};

#[test]
fn host_defaults_to_the_machine_hostname_and_is_checked() {
    let c = Config::parse("", path()).unwrap();
    assert_eq!(Ok(c.host.clone()), machine_hostname());
    let c = Config::parse("host = \"build-1.example\"\n", path()).unwrap();
    assert_eq!(c.host, "build-1.example");
    let (line, key) = one("\nhost = \"a b\"\n", "invalid host name \"a b\"");
    assert_eq!((line, key.as_str()), (2, "host"));
    let (line, key) = one("host = \"\"\n", "host name must not be empty");
    assert_eq!((line, key.as_str()), (1, "host"));
    let long = "h".repeat(65);
    let (_, key) = one(&format!("host = \"{long}\"\n"), "at most 64");
    assert_eq!(key, "host");
    let (_, key) = one("host = 3\n", "expected a string, found integer 3");
    assert_eq!(key, "host");
    assert!(valid_host_name(&"h".repeat(64)));
    assert!(!valid_host_name("a/b"));
}

#[test]
fn host_tables_need_a_positive_capacity_and_no_other_key() {
    let c = Config::parse("[hosts.a]\nmax_concurrency = 2\n", path()).unwrap();
    assert_eq!(c.host_capacity("a"), Some(2));
    assert_eq!(c.host_capacity("b"), None);
    let (line, key) = one("[hosts.a]\nmax_concurrency = 0\n", "must be at least 1");
    assert_eq!((line, key.as_str()), (2, "hosts.a.max_concurrency"));
    let (line, key) = one("[hosts.a]\n", "missing required key");
    assert_eq!((line, key.as_str()), (1, "hosts.a.max_concurrency"));
    let (line, key) = one(
        "[hosts.a]\nmax_concurrency = 1\nweight = 2\n",
        "unknown key; expected one of max_concurrency",
    );
    assert_eq!((line, key.as_str()), (3, "hosts.a.weight"));
    let (line, key) = one(
        "[hosts.\"a b\"]\nmax_concurrency = 1\n",
        "invalid host name",
    );
    assert_eq!((line, key.as_str()), (1, "hosts.\"a b\""));
    let (_, key) = one("hosts = 3\n", "expected a table");
    assert_eq!(key, "hosts");
}

#[test]
fn project_hosts_is_a_non_empty_list_of_host_names() {
    let (line, key) = one(&project("hosts = []"), "must not be empty");
    assert_eq!((line, key.as_str()), (3, "projects.p.hosts"));
    let (line, key) = one(&project("hosts = \"a\""), "expected an array of host names");
    assert_eq!((line, key.as_str()), (3, "projects.p.hosts"));
    let errs = errors(&project("hosts = [\"ok\", \"no way\", 4]"));
    let keys: Vec<&str> = errs.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(keys, ["projects.p.hosts[1]", "projects.p.hosts[2]"]);
}

#[test]
fn placement_and_capacity_reach_the_packer() {
    let text = "host = \"here\"\n\
                [hosts.here]\nmax_concurrency = 2\n\
                [projects.any]\ncommand = [\"true\"]\n\
                [projects.pinned]\ncommand = [\"true\"]\nhosts = [\"here\", \"there\"]\n\
                [projects.away]\ncommand = [\"true\"]\nhosts = [\"there\", \"yonder\"]\n";
    let c = Config::parse(text, path()).unwrap();
    assert!(c.projects["any"].placed_on("here"));
    assert!(c.projects["pinned"].placed_on("here"));
    assert!(!c.projects["away"].placed_on("here"));
    assert!(c.projects["away"].placed_on("yonder"));
    assert_eq!(
        c.undeclared_hosts().into_iter().collect::<Vec<_>>(),
        ["there", "yonder"]
    );
    let caps = c.caps();
    assert_eq!(caps.host.name, "here");
    assert_eq!(caps.host.max_concurrency, Some(2));
    assert_eq!(
        caps.host.placed_elsewhere.iter().collect::<Vec<_>>(),
        ["away"]
    );
    // Read on another host: its own (undeclared) capacity, its own placement.
    let there = c.for_host("there".into()).caps();
    assert_eq!(there.host.max_concurrency, None);
    assert!(there.host.placed_elsewhere.is_empty());
}
