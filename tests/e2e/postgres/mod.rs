//! End-to-end tests of the `database` key: the daemon and every command on one PostgreSQL
//! database, with the run folders, the daemon lock and the control socket in the local state
//! directory. Each test gets a new database on a throwaway cluster (crates/pgtest) and skips
//! loudly (`SKIPPED: PostgreSQL not found`) where PostgreSQL is not installed, unless
//! `FLEET_REQUIRE_POSTGRES=1`.
//!
//! - `drain`: many runs over two capped namespaces, with a SIGKILL of the daemon in the middle;
//!   a run in flight across a restart is adopted and keeps its real exit code;
//! - `commands`: `runs --json`, `status`, `check`, `logs` against PostgreSQL; a bad URL refused at
//!   load without its password; an unreachable database at daemon start is waited for;
//! - `fencing`: a second daemon under a live host name from another state directory is refused
//!   and the first goes on; a clean stop frees the name, and the run left in flight is settled
//!   only where its files are; a silent host is taken over, and its daemon, fenced, stops and
//!   says why;
//! - `hosts`: two hosts (a, b) share the work without fencing each other and read each other's
//!   logs; a host forgotten while SIGSTOPped stops its stale command and rejoins;
//! - `outage`: the database restarted or stopped under a running daemon (a cluster of the test's
//!   own): no exit lost, nothing claimed while it is down, one log line each way;
//! - `roles`: the hosts', operators' and viewers' roles made as docs/OPERATIONS.md says: the
//!   viewer reads with every reading command and is refused writes, the operator writes rows,
//!   the hosts run them;
//! - `tls`: a server with TLS and certificates the test makes: two hosts drain runs over
//!   `require` and `verify-full`; a certificate for another name, an expired one and one of an
//!   unknown CA are refused with their reason; a client certificate `pg_hba.conf` requires is
//!   sent; `verify-full` and `require` never connect without TLS; bad TLS settings are refused
//!   at load.
//!
//! Run with `cargo test --all-features --test e2e postgres::`.

mod commands;
mod drain;
mod fencing;
mod hosts;
mod outage;
mod roles;
mod tls;

use std::path::Path;

use crate::common::*;

/// A new database as a `postgresql://` URL (pgtest hands out `key=value` strings), or `None`
/// after pgtest's loud skip line.
pub fn database_url() -> Option<String> {
    Some(url_of(&pgtest::database()?))
}

/// `db` as a `postgresql://` URL.
pub fn url_of(db: &pgtest::Database) -> String {
    let field = |k: &str| {
        db.url
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {}", db.url))
            .to_string()
    };
    format!(
        "postgresql://{}@/{}?host={}&port={}",
        field("user"),
        field("dbname"),
        field("host"),
        field("port")
    )
}

/// A fleet whose fleet.toml starts with `database = <url>`, followed by `body(folder)`.
pub fn pg_fleet(url: &str, body: impl FnOnce(&Path) -> String) -> Fleet {
    Fleet::with(|dir| format!("database = {}\n{}", toml_str(url), body(dir)))
}

/// Asserts the state directory holds no SQLite database: the store went to PostgreSQL.
pub fn assert_no_sqlite(f: &Fleet) {
    let db = f.state_dir().join("fleet.db");
    assert!(
        !db.exists(),
        "{} exists: something used SQLite instead of PostgreSQL\n{}",
        db.display(),
        f.diagnostics()
    );
}

/// Hosts a and b of one run at a time each, and projects p0 to p3 whose command runs `first`
/// (shell text), then waits until the file `go` exists: two of them running at once are one
/// on each host.
pub fn gated_on_hosts_a_and_b(go: &Path, first: &str) -> String {
    let mut projects =
        String::from("[hosts.a]\nmax_concurrency = 1\n[hosts.b]\nmax_concurrency = 1\n");
    for i in 0..4 {
        projects += &format!(
            "[projects.p{i}]\ncommand = {}\n",
            sh(&format!(
                "{first}while [ ! -e {} ]; do sleep 0.05; done",
                shell_quote(go)
            ))
        );
    }
    projects
}
