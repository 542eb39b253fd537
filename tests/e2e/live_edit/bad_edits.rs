//! An edit that fails to parse or validate changes nothing: the last good config stays in force
//! (caps and commands), the error names file, line and key in `fleet status` and the log, the
//! daemon never stops, and a good edit clears the error.

use serde_json::Value;

use super::gates::*;
use super::reload::*;
use crate::common::*;

fn config(p: &Paths, cap: usize, label: &str) -> String {
    format!(
        "max_concurrency = {cap}\n\
         tick = \"100ms\"\n\
         [projects.blocker]\n\
         command = {blocker}\n\
         [projects.later]\n\
         command = {later}\n\
         [projects.other]\n\
         command = {other}\n",
        blocker = gated(p, "blocker"),
        later = quick(p, label),
        other = quick(p, label),
    )
}

/// A bad edit (a misspelt key) keeps the last good config in force — its caps and its commands
/// — shows the error naming file, line and key in `fleet status` (JSON and text) and the log,
/// never stops the daemon, and a good edit clears it.
#[test]
fn a_bad_edit_changes_nothing_and_a_good_edit_clears_the_error() {
    let f = Fleet::with(|dir| config(&Paths::of(dir), 1, "old"));
    let p = Paths::of(f.path());
    let mut d = start(&f);
    let blocker = f.enqueue("blocker");
    wait_started(&f, &p, blocker);
    // Queued behind the global cap of 1, enqueued before the bad edit (`fleet enqueue` refuses
    // to work on an invalid file).
    let later = f.enqueue("later");
    let other = f.enqueue("other");

    // The bad edit: global cap 5, later's command changed, and a misspelt key on line 6.
    let bad =
        config(&p, 5, "new").replacen("[projects.later]\ncommand", "[projects.later]\ncomand", 1);
    assert_eq!(
        bad.lines().nth(5).map(|l| l.starts_with("comand = ")),
        Some(true),
        "the typo is on line 6:\n{bad}"
    );
    edit(&f, &bad);
    let where_ = format!("{}:6: projects.later.comand", f.config.display());
    let s = wait_status(&f, "the daemon to refuse the bad edit", |s| {
        reload_error(s).is_some()
    });
    let err = reload_error(&s).unwrap();
    assert!(
        err.contains(&where_),
        "last_reload_error should name file, line 6 and the key: {err}"
    );
    assert_eq!(
        global_cap(&s),
        Some(1),
        "the old global cap stays in force: {s}"
    );
    assert_eq!(s["daemon"]["running"], true, "{s}");
    let file_errors = s["config_errors"].to_string();
    assert!(
        file_errors.contains(&where_),
        "config_errors: {file_errors}"
    );
    let text = f.cmd(&["status"]);
    assert!(matches!(text.code(), Some(0 | 2)), "{text:?}");
    let text = text.stdout;
    assert!(
        text.contains(&where_),
        "`fleet status` (text) should show the refused edit:\n{text}"
    );
    d.assert_alive();
    f.wait_until(DEADLINE, "the refusal in the daemon's log", || {
        d.stderr().contains("reload refused") && d.stderr().contains(&where_)
    });
    // Read again (SIGHUP), the same file is refused for the same errors: said once, on one
    // line naming them.
    let before = daemon_updated_at(&f);
    d.signal(Signal::HUP);
    f.wait_until(DEADLINE, "the daemon to read the file again", || {
        daemon_updated_at(&f) != before
    });
    let refusals: Vec<String> = d
        .stderr()
        .lines()
        .filter(|l| l.contains("reload refused"))
        .map(str::to_string)
        .collect();
    assert_eq!(refusals.len(), 1, "{refusals:#?}");
    assert!(refusals[0].contains(&where_), "{refusals:#?}");
    let out = f.cmd(&["enqueue", "later"]);
    assert_eq!(out.code(), Some(2), "enqueue on an invalid file: {out:?}");

    // More bad edits, each seen by the daemon (SIGHUP: `fleet reload` cannot read a missing
    // file) and shown through a second config file naming the same state directory: a TOML
    // syntax error, a file that is not UTF-8, no file at all. The daemon stays up; the first
    // config stays in force.
    let bad_edits: [(&str, Option<&[u8]>, &str); 3] = [
        (
            "a syntax error",
            Some(b"max_concurrency = 5\n[projects.later\n"),
            ":2: ",
        ),
        (
            "bytes that are not UTF-8",
            Some(b"max_concurrency = 5\n\xff\xfe\n"),
            ":2: ",
        ),
        ("a removed fleet.toml", None, ": cannot read file"),
    ];
    for (what, bytes, named) in bad_edits {
        match bytes {
            Some(b) => {
                let tmp = f.file(".fleet.toml.bad");
                std::fs::write(&tmp, b).unwrap();
                std::fs::rename(&tmp, &f.config).unwrap();
            }
            None => std::fs::remove_file(&f.config).unwrap(),
        }
        d.signal(Signal::HUP);
        let want = format!("{}{named}", f.config.display());
        let mut s = Value::Null;
        f.wait_until(DEADLINE, &format!("the daemon to refuse {what}"), || {
            s = serde_json::from_str(&probe_ok(&f, &["status", "--json"])).unwrap();
            reload_error(&s).is_some_and(|e| e.contains(&want))
        });
        assert_eq!(global_cap(&s), Some(1), "{what}: {s}");
        d.assert_alive();
    }
    // Back to the misspelt key (a file `fleet reload` can work with).
    edit(&f, &bad);
    wait_status(&f, "the misspelt key to be refused again", |s| {
        reload_error(s).is_some_and(|e| e.contains(&where_))
    });

    // The runs enqueued before start under the old config: its command ("old"), its cap of 1.
    eval_barrier(&f);
    assert_eq!(
        status_of(&run_any(&f, later)),
        "queued",
        "{}",
        f.diagnostics()
    );
    assert_eq!(
        status_of(&run_any(&f, other)),
        "queued",
        "{}",
        f.diagnostics()
    );
    release(&p, blocker);
    assert_all_succeed(&f, &[blocker, later, other]);
    for id in [later, other] {
        let log = logs_any(&f, id);
        assert!(
            log.contains(&format!("old run {id}")),
            "run {id} log: {log:?}"
        );
        assert!(
            !log.contains("new"),
            "run {id} used the refused command: {log:?}"
        );
    }
    let recs = records(&p);
    assert_starts_within_caps(&recs, &[(0, 1, vec![])]);
    d.assert_alive();

    // A good edit clears the error and takes effect.
    edit(&f, &config(&p, 2, "new"));
    let s = wait_applied(&f, 2, "the good edit to be applied");
    assert!(s["config_errors"].is_null(), "{s}");
    let id = f.enqueue("later");
    assert_all_succeed(&f, &[id]);
    assert!(f.logs(id).contains(&format!("new run {id}")));
    d.assert_alive();
    assert_check_ok(&f);
}
