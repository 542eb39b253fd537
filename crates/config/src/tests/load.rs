//! Reading a file, the defaults, path resolution, how errors display, and the caps.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{path, FULL};
use crate::{Config, NamespaceConfig, Overlap, ProjectConfig, Retention, DEFAULT_NAMESPACE};

/// FULL's top-level retention keys, which its projects without their own inherit.
const FULL_RETENTION: Retention = Retention {
    keep_runs: Some(50),
    keep_for: Some(Duration::from_secs(7 * 86_400)),
    max_log_size: 1 << 20,
};

#[test]
fn full_valid_file_parses_every_key() {
    let c = Config::parse(FULL, path()).unwrap();
    let dir = std::fs::canonicalize(".").unwrap();
    assert_eq!(c.path, PathBuf::from("fleet.toml"));
    assert_eq!(c.dir, dir);
    assert_eq!(c.state_dir, dir.join("var/state"));
    assert_eq!(c.max_concurrency, 8);
    assert_eq!(c.tick, Duration::from_millis(250));
    assert_eq!(
        c.namespaces,
        BTreeMap::from([
            (
                "ops".to_string(),
                NamespaceConfig {
                    max_concurrency: 2,
                    weight: 3
                }
            ),
            (
                "batch".to_string(),
                NamespaceConfig {
                    max_concurrency: 1,
                    weight: 1
                }
            ),
        ])
    );
    assert_eq!(c.projects.len(), 3);
    assert_eq!(
        c.project("hello").unwrap(),
        &ProjectConfig {
            name: "hello".into(),
            command: vec![
                "sh".into(),
                "-c".into(),
                "echo hello from $FLEET_PROJECT".into()
            ],
            namespace: "ops".into(),
            cwd: dir.join("work/dir"),
            env: BTreeMap::from([
                ("GREETING".to_string(), "hi".to_string()),
                ("EMPTY".to_string(), String::new()),
            ]),
            timeout: Some(Duration::from_secs(600)),
            kill_grace: Duration::from_secs(3),
            retries: 2,
            retry_backoff: Duration::from_secs(90),
            schedule: Some("*/5 * * * *".into()),
            timezone: Some("Europe/Paris".into()),
            starting_deadline: Some(Duration::from_secs(300)),
            overlap: Overlap::Replace,
            retention: FULL_RETENTION,
            on_failure: None,
            max_parallel: 1,
            accept_args: true,
            hosts: None,
        }
    );
    let tidy = c.project("tidy.up-2").unwrap();
    assert_eq!(tidy.namespace, DEFAULT_NAMESPACE);
    assert_eq!(tidy.schedule.as_deref(), Some("30 0 6 * * 1-5"));
    assert_eq!(tidy.on_failure.as_deref(), Some("minimal"));
    assert_eq!(tidy.overlap, Overlap::Queue);
    assert_eq!(
        tidy.retention,
        Retention {
            keep_runs: None,
            keep_for: Some(Duration::from_secs(3600)),
            max_log_size: 8192
        }
    );
    assert!(c.project("nope").is_none());
}

#[test]
fn omitted_keys_take_their_defaults() {
    let c = Config::parse(FULL, path()).unwrap();
    let dir = std::fs::canonicalize(".").unwrap();
    assert_eq!(
        c.project("minimal").unwrap(),
        &ProjectConfig {
            name: "minimal".into(),
            command: vec!["true".into()],
            namespace: DEFAULT_NAMESPACE.into(),
            cwd: dir.clone(),
            env: BTreeMap::new(),
            timeout: None,
            kill_grace: Duration::from_secs(10),
            retries: 0,
            retry_backoff: Duration::from_secs(10),
            schedule: None,
            timezone: None,
            starting_deadline: None,
            overlap: Overlap::Forbid,
            retention: FULL_RETENTION,
            on_failure: None,
            max_parallel: 1,
            accept_args: false,
            hosts: None,
        }
    );

    let empty = Config::parse("", path()).unwrap();
    assert_eq!(empty.state_dir, dir.join(".fleet"));
    assert_eq!(empty.max_concurrency, 4);
    assert_eq!(empty.tick, Duration::from_secs(1));
    assert!(empty.namespaces.is_empty());
    assert!(empty.projects.is_empty());
    assert_eq!(empty.retention, Retention::default());
}

#[test]
fn relative_paths_resolve_against_the_files_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let sub = tmp.path().join("conf");
    std::fs::create_dir(&sub).unwrap();
    let file = sub.join("fleet.toml");
    std::fs::write(
        &file,
        "state_dir = \"../state\"\n[projects.a]\ncommand = [\"x\"]\ncwd = \"jobs/a\"\n\
         [projects.b]\ncommand = [\"x\"]\ncwd = \"/abs/where\"\n",
    )
    .unwrap();
    let c = Config::load(&file).unwrap();
    let dir = std::fs::canonicalize(&sub).unwrap();
    assert_eq!(c.path, file);
    assert_eq!(c.dir, dir);
    assert!(c.state_dir.is_absolute());
    assert_eq!(c.state_dir, dir.join("../state"));
    assert_eq!(c.project("a").unwrap().cwd, dir.join("jobs/a"));
    assert_eq!(c.project("b").unwrap().cwd, PathBuf::from("/abs/where"));

    // A relative path to a file that does not exist still gives an absolute dir.
    let c = Config::parse("", Path::new("no/such/dir/fleet.toml")).unwrap();
    assert!(c.dir.is_absolute());
    assert!(c.dir.ends_with("no/such/dir"));
    assert_eq!(c.state_dir, c.dir.join(".fleet"));
}

#[test]
fn load_reports_an_unreadable_file() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("fleet.toml");
    let errs = Config::load(&missing).unwrap_err();
    assert_eq!(errs.0.len(), 1);
    assert_eq!(errs.0[0].file, missing);
    assert_eq!(errs.0[0].line, None);
    let shown = errs.to_string();
    assert!(shown.starts_with(&format!("{}: cannot read file", missing.display())));

    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, b"tick = \"1s\"\n# caf\xe9\n").unwrap();
    let errs = Config::load(&bad).unwrap_err();
    assert_eq!(errs.0[0].line, Some(2));
    assert!(errs.0[0].message.contains("UTF-8"));
}

#[test]
fn error_display_is_file_line_key_message() {
    let errs = Config::parse(
        "tick = \"1s\"\n[projects.hello]\ncommand = [\"x\"]\ntimeout = \"10x\"\n",
        path(),
    )
    .unwrap_err();
    let shown = errs.to_string();
    assert!(
        shown.starts_with(
            "fleet.toml:4: projects.hello.timeout: invalid duration \"10x\": unknown time unit \"x\""
        ),
        "{shown}"
    );
    assert!(!shown.contains('\n'));
}

#[test]
fn caps_reports_global_and_namespace_caps() {
    let c = Config::parse(FULL, path()).unwrap();
    let caps = c.caps();
    assert_eq!(caps.global, 8);
    assert_eq!(caps.namespaces.len(), 2);
    assert_eq!(caps.namespaces["ops"].max_concurrency, 2);
    assert_eq!(caps.namespaces["ops"].weight, 3);
    assert_eq!(caps.namespaces["batch"].max_concurrency, 1);
    assert_eq!(caps.namespaces["batch"].weight, 1);
}

/// The state directory of an invalid file is read only where it is certain: the file's own
/// `state_dir`, or the default when nothing in the file could be a `state_dir` the errors hide.
#[test]
fn the_state_directory_of_an_invalid_file_is_read_only_where_certain() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let file = dir.join("fleet.toml");
    let of = |text: &str| {
        std::fs::write(&file, text).unwrap();
        Config::state_dir_of(&file)
    };
    let st = Some(dir.join("st"));
    let default = Some(dir.join(".fleet"));
    let project = "[projects.p]\ncommand = [\"true\"]\n";
    // Another key wrong: the file's own, or the default.
    assert_eq!(
        of(&format!("state_dir = \"st\"\ntimout = 1\n{project}")),
        st
    );
    assert_eq!(of(&format!("colour = \"red\"\n{project}")), default);
    assert_eq!(
        of(&format!("{project}comand = 1\n[namespace.x]\nweight = 1\n")),
        default
    );
    // `state_dir` itself mistyped, or not a folder name: unknown.
    for key in [
        "stat_dir",
        "state-dir",
        "STATE_DIR",
        "statedir",
        "data_dir",
        "sate_dir",
        "stat_di",
    ] {
        assert_eq!(of(&format!("{key} = \"st\"\n{project}")), None, "{key}");
    }
    // Not a string: no folder name, whatever its key looks like.
    assert_eq!(of(&format!("stat_dir = 7\n{project}")), default);
    assert_eq!(of(&format!("state_dir = 7\n{project}")), None);
    assert_eq!(of(&format!("state_dir = \"\"\n{project}")), None);
    // A syntax error after the top-level keys: they are certain.
    assert_eq!(
        of(&format!("state_dir = \"st\"\n{project}timeout = \n")),
        st
    );
    assert_eq!(
        of(&format!("tick = \"1s\"\n{project}timeout = \n")),
        default
    );
    // A syntax error among them, after `state_dir`, or with no `state_dir` anywhere after it.
    assert_eq!(of(&format!("state_dir = \"st\"\nti\n{project}")), st);
    assert_eq!(of(&format!("max_concurrency = 3\nti\n{project}")), default);
    // Before `state_dir`, on its line, or a second one: unknown.
    assert_eq!(
        of(&format!("tick = \"1s\nstate_dir = \"st\"\n{project}")),
        None
    );
    assert_eq!(of(&format!("state_dir = \"st\n{project}")), None);
    assert_eq!(
        of(&format!("state_dir = \"st\"\nstate_dir = \"b\"\n{project}")),
        None
    );
    // A file that cannot be read.
    assert_eq!(Config::state_dir_of(&dir.join("missing.toml")), None);
}

/// The TLS files a `database` URL names are this host's to check: a text another host published
/// (whose client certificate and CA may lie elsewhere there) is applied here with this host's
/// own `database`, files unread; this host's own file is checked at load, naming the line.
#[test]
fn tls_files_are_checked_in_this_host_s_file_not_in_a_published_text() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("fleet.toml");
    let text = |ca: &str| {
        format!(
            "database = \"postgresql://fleet@db.internal/fleet?sslmode=verify-full&sslrootcert={ca}\"\n\
             [projects.p]\ncommand = [\"true\"]\n"
        )
    };
    let here_ca = tmp.path().join("ca.crt");
    std::fs::write(&here_ca, "not read when applying a published text\n").unwrap();
    let here = Config::parse(&text(&here_ca.display().to_string()), &file).unwrap();
    let published = text("/elsewhere/on/another/host/ca.crt");
    let applied = Config::published_here(&published, &file, &here).unwrap();
    assert_eq!(applied.database, here.database);

    std::fs::write(&file, format!("# the fleet\n{published}")).unwrap();
    let errors = Config::load(&file).unwrap_err();
    let e = &errors.0[0];
    assert_eq!((e.line, e.key.as_str()), (Some(2), "database"), "{errors}");
    assert!(
        e.message
            .contains("sslrootcert /elsewhere/on/another/host/ca.crt: no such file"),
        "{errors}"
    );
}
