//! When a host publishes its local fleet.toml: an operator's `fleet reload` publishes the file
//! whenever it differs from the published one (so a bad published config can be replaced from
//! any host), while the watcher publishes only a change of the file's content (so a `touch`
//! on a host whose file lags the published config reverts nothing fleet-wide).

use super::harness::*;
use crate::common::*;

/// The published config's version and publisher, read from the database.
fn published(h: &Hosts) -> (i64, String) {
    let row = h
        .sql()
        .query_one("SELECT version, published_by FROM published_config", &[])
        .unwrap_or_else(|e| panic!("read published_config: {e}"));
    (row.get(0), row.get(1))
}

fn body(cap: usize) -> impl Fn(&std::path::Path) -> String {
    move |_| format!("max_concurrency = {cap}\n[projects.p]\ncommand = [\"true\"]\n")
}

/// Starts hosts a and b; a's operator lowers the global cap and reloads, so that b's file lags
/// the published config. Returns the two daemons and the version a published.
fn b_lagging(h: &Hosts) -> (Daemon<'_>, Daemon<'_>, i64) {
    let a = h.start("a");
    let b = h.start("b");
    h.wait_until(DEADLINE, "a first config published", || {
        h.sql()
            .query_opt("SELECT 1 FROM published_config", &[])
            .unwrap()
            .is_some()
    });
    let old = std::fs::read_to_string(&h.fleet("a").config).unwrap();
    h.fleet("a")
        .replace_config(&old.replace("max_concurrency = 4", "max_concurrency = 3"));
    h.fleet("a").cmd_ok(&["reload"]);
    h.wait_until(DEADLINE, "a's edit published", || {
        let (v, by) = published(h);
        v >= 2 && by == "a"
    });
    let (version, _) = published(h);
    h.wait_until(DEADLINE, "b on the published version", || {
        h.host_row("a", "b")
            .is_some_and(|r| r["config_version"].as_i64() == Some(version))
    });
    h.wait_until(DEADLINE, "b to say its file now differs", || {
        b.stderr()
            .contains("this host's fleet.toml differs from the config published")
    });
    (a, b, version)
}

#[test]
fn rewriting_the_same_bytes_on_a_lagging_host_publishes_nothing() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], body(4)) else {
        return;
    };
    let (_a, b, version) = b_lagging(&h);
    // A tool writes b's file again, same bytes: the watcher sees a write, not an edit.
    let same = std::fs::read(&h.fleet("b").config).unwrap();
    h.fleet("b")
        .write_config(std::str::from_utf8(&same).unwrap());
    h.wait_until(DEADLINE, "b's daemon to look at its rewritten file", || {
        b.stderr().contains("content is unchanged") || published(&h).0 != version
    });
    assert_eq!(
        published(&h),
        (version, "a".to_string()),
        "a rewrite of the same bytes on b published its lagging file\n{}",
        h.diagnostics()
    );
}

/// The same lagging host, whose operator makes an edit the daemon refuses (an invalid file) and
/// then puts the file back as it was: the return to the last valid text is no edit either.
#[test]
fn undoing_a_refused_edit_on_a_lagging_host_publishes_nothing() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], body(4)) else {
        return;
    };
    let (_a, b, version) = b_lagging(&h);
    let lagging = std::fs::read_to_string(&h.fleet("b").config).unwrap();
    h.fleet("b")
        .write_config(&format!("{lagging}max_concurrency = \"x\"\n"));
    h.wait_until(DEADLINE, "b to refuse its invalid file", || {
        b.stderr().contains("reload refused")
    });
    h.fleet("b").write_config(&lagging);
    h.wait_until(DEADLINE, "b's daemon to look at its restored file", || {
        b.stderr().contains("content is unchanged") || published(&h).0 != version
    });
    assert_eq!(
        published(&h),
        (version, "a".to_string()),
        "restoring b's lagging file published it\n{}",
        h.diagnostics()
    );
}

#[test]
fn a_reload_replaces_a_published_config_no_host_can_use() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], body(4)) else {
        return;
    };
    let _a = h.start("a");
    let _b = h.start("b");
    h.wait_until(DEADLINE, "a first config published", || {
        h.sql()
            .query_opt("SELECT 1 FROM published_config", &[])
            .unwrap()
            .is_some()
    });
    // A newer build publishes a key this one does not know: no host can use it.
    let bad = h
        .sql()
        .query_one(
            "UPDATE published_config SET version = version + 1, digest = 'newer', \
             text = text || E'\\n[projects.x]\\ncommand = [\"true\"]\\nfuture_key = 1\\n', \
             published_by = 'z' RETURNING version",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0);
    // b says, in `fleet status`, which published version it refuses and who published it.
    let said = format!("refuses published config version {bad} (by host z)");
    h.wait_until(DEADLINE, "b's status to name the refused version", || {
        h.fleet("b").status().to_string().contains(&said)
    });
    // b's file equals its last good config: the operator's reload still publishes it.
    h.fleet("b").cmd_ok(&["reload"]);
    h.wait_until(DEADLINE, "b's file published over the bad version", || {
        let (v, by) = published(&h);
        v > bad && by == "b"
    });
    let (version, _) = published(&h);
    h.wait_until(DEADLINE, "every host on the version b published", || {
        h.hosts_json("a")
            .iter()
            .all(|r| r["config_version"].as_i64() == Some(version))
    });
    let id = h.fleet("a").enqueue("p");
    h.fleet("a").wait_terminal(id);
}
