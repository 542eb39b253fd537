//! Three PostgreSQL roles, made with the very statements docs/OPERATIONS.md gives ("Roles:
//! hosts, operators and viewers", the two SQL blocks marked `<!-- sql: … -->`, read from the
//! file and run as written, the role and database names made unique to this test): the host
//! role's daemon creates the schema and runs what the operator queues; the operator enqueues,
//! cancels (queued and active), pauses, resumes, reruns, prunes and forgets a host; the viewer
//! runs every reading command (`runs`, `status`, `logs` and `logs --follow`, `projects`,
//! `hosts`, `check`, `wait`, `prune --dry-run`), each exiting as documented, and its `enqueue`
//! is refused naming the privilege, exit 1.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::assert_no_sqlite;
use crate::common::*;

/// The SQL block of docs/OPERATIONS.md marked `<!-- sql: NAME …-->`: the fenced ```sql block
/// that follows the marker.
fn doc_block(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/OPERATIONS.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let marker = format!("<!-- sql: {name}");
    let at = doc
        .find(&marker)
        .unwrap_or_else(|| panic!("{}: no {marker}", path.display()));
    let rest = &doc[at..];
    let open = rest
        .find("```sql\n")
        .expect("a ```sql block after the marker")
        + 7;
    let close = rest[open..].find("```").expect("the block's end") + open;
    rest[open..close].to_string()
}

/// `sql` with each identifier token found in `names` replaced (string literals and the rest
/// left as written).
fn renamed(sql: &str, names: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let mut quoted = false;
    let flush = |word: &mut String, out: &mut String| {
        let new = names
            .iter()
            .find(|(old, _)| *old == word.as_str())
            .map_or(word.as_str(), |(_, new)| new);
        out.push_str(new);
        word.clear();
    };
    for c in sql.chars() {
        if !quoted && (c.is_ascii_alphanumeric() || c == '_') {
            word.push(c);
            continue;
        }
        flush(&mut word, &mut out);
        if c == '\'' {
            quoted = !quoted;
        }
        out.push(c);
    }
    flush(&mut word, &mut out);
    out
}

/// The statements of `sql`, one by one (`CREATE DATABASE` refuses to run in a batch): split at
/// each `;` that ends a line, comment lines left out.
fn statements(sql: &str) -> Vec<String> {
    let code: String = sql
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .map(|l| format!("{l}\n"))
        .collect();
    code.split(";\n")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Runs each statement of `sql` on `conninfo`, its names replaced as [`renamed`] does; fails
/// the test with the statement that failed.
fn run_sql(conninfo: &str, sql: &str, names: &[(&str, &str)]) {
    let mut c = postgres::Client::connect(conninfo, postgres::NoTls)
        .unwrap_or_else(|e| panic!("connect {conninfo}: {e}"));
    for statement in statements(sql) {
        let statement = renamed(&statement, names);
        c.batch_execute(&statement)
            .unwrap_or_else(|e| panic!("{statement}: {e:?}"));
    }
}

/// The value of `key` in a `key=value` connection string.
fn field(conninfo: &str, key: &str) -> String {
    conninfo
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {conninfo}"))
        .to_string()
}

/// fleet.toml for one role: the shared database as `user`, host name `h1`; `hello` keeps
/// `hello_keep` ended runs.
fn config(base: &str, user: &str, db: &str, go: &Path, hello_keep: u32) -> String {
    let url = format!(
        "postgresql://{user}@/{db}?host={}&port={}",
        field(base, "host"),
        field(base, "port")
    );
    format!(
        "database = {}\nhost = \"h1\"\n\
         [projects.hello]\ncommand = [\"echo\", \"hi there\"]\nkeep_runs = {hello_keep}\n\
         [projects.gate]\ncommand = {}\n\
         [projects.long]\ncommand = [\"sleep\", \"300\"]\nretries = 1\n",
        toml_str(&url),
        sh(&format!(
            "echo waiting; while [ ! -e {} ]; do sleep 0.05; done; echo through",
            shell_quote(go)
        )),
    )
}

/// `cmd` started with stdout and stderr piped (and stdin `/dev/null`).
fn spawn_piped(mut cmd: Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// One role's fleet.toml beside the host's, on the same state directory.
struct Role<'a> {
    f: &'a Fleet,
    config: std::path::PathBuf,
}

impl Role<'_> {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = self.f.command_with_config(&self.config);
        c.args(args);
        c
    }

    fn cmd(&self, args: &[&str]) -> Output {
        run_with_deadline(self.command(args), CMD_DEADLINE)
    }

    /// Runs `args`, asserting exit status `code`; returns stdout.
    fn exits(&self, code: i32, args: &[&str]) -> String {
        let out = self.cmd(args);
        assert_eq!(
            out.code(),
            Some(code),
            "fleet {args:?} as {}: {out:?}\n{}",
            self.config.display(),
            self.f.diagnostics()
        );
        assert!(!out.stderr.contains("panicked"), "{out:?}");
        out.stdout
    }

    fn ok(&self, args: &[&str]) -> String {
        self.exits(0, args)
    }

    fn enqueue(&self, project: &str) -> i64 {
        self.ok(&["enqueue", project]).trim().parse().unwrap()
    }

    fn run(&self, id: i64) -> Value {
        let all: Value = serde_json::from_str(&self.ok(&["runs", "--json"])).unwrap();
        all.as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"].as_i64() == Some(id))
            .cloned()
            .unwrap_or(Value::Null)
    }

    fn wait_status(&self, id: i64, status: &str) {
        self.f
            .wait_until(DEADLINE, &format!("run {id}: {status}"), || {
                status_of(&self.run(id)) == status
            });
    }
}

#[test]
fn a_viewer_reads_an_operator_writes_rows_and_the_hosts_run_them() {
    let Some(db) = pgtest::database() else { return };
    // Roles belong to the cluster, which other tests of this process share.
    let me = format!("r{}", &db.name[2..]);
    let (operator, viewer) = (format!("{me}_operator"), format!("{me}_viewer"));
    let names = [
        ("fleet", me.as_str()),
        ("fleet_operator", operator.as_str()),
        ("fleet_viewer", viewer.as_str()),
    ];
    // As a superuser: the roles and the database, owned by the hosts' role.
    run_sql(&db.url, &doc_block("roles"), &names);

    let f = Fleet::with(|dir| config(&db.url, &me, &me, &dir.join("go"), 100));
    let go = f.file("go");
    for (file, user, keep) in [
        ("operator.toml", &operator, 1),
        ("viewer.toml", &viewer, 100),
    ] {
        std::fs::write(f.file(file), config(&db.url, user, &me, &go, keep)).unwrap();
    }
    let op = Role {
        f: &f,
        config: f.file("operator.toml"),
    };
    let view = Role {
        f: &f,
        config: f.file("viewer.toml"),
    };
    // A reading command creates nothing, even as the role that may: before the first daemon
    // there is no schema, which it says in one line; `status`, the health check, sees no
    // daemon.
    let host = Role {
        f: &f,
        config: f.config.clone(),
    };
    let none = host.cmd(&["runs"]);
    assert_eq!(none.code(), Some(2), "{none:?}");
    assert!(none.stderr.contains("no fleet schema"), "{none:?}");
    assert_eq!(none.stderr.trim().lines().count(), 1, "{none:?}");
    host.exits(3, &["status"]);
    let superuser_here = db
        .url
        .replace(&format!("dbname={}", db.name), &format!("dbname={me}"));
    let tables: i64 = postgres::Client::connect(&superuser_here, postgres::NoTls)
        .unwrap()
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "a reading command created tables");
    // A daemon whose role may not create the tables is told so, and stops: trying again
    // would change nothing until an operator does something, and an unreachable database
    // is not what it is.
    let refused = op.cmd(&["daemon"]);
    assert_eq!(refused.code(), Some(1), "{refused:?}");
    assert!(
        refused.stderr.contains("cannot be brought up to date")
            && refused.stderr.contains("permission denied")
            && !refused.stderr.contains("cannot be reached"),
        "{refused:?}"
    );
    // The hosts' role: its daemon creates the schema.
    let mut d = f.start_daemon();
    // As the tables' owner, once they exist.
    let owner = superuser_here.replace("user=fleet", &format!("user={me}"));
    run_sql(&owner, &doc_block("grants"), &names);

    // The operator queues; the host's daemon runs it.
    let a = op.enqueue("hello");
    let b = op.enqueue("hello");
    for id in [a, b] {
        view.wait_status(id, "succeeded");
    }
    // A queued run held by a pause, cancelled; the pause let go.
    assert!(op.ok(&["pause", "hello", "--project"]).contains("paused"));
    let c = op.enqueue("hello");
    assert!(op.ok(&["cancel", &c.to_string()]).contains("cancelled"));
    op.ok(&["resume", "hello", "--project"]);
    let r: i64 = op.ok(&["rerun", &a.to_string()]).trim().parse().unwrap();
    view.wait_status(r, "succeeded");

    // The viewer: every reading command, exiting as documented.
    assert!(view.ok(&["runs"]).contains("hello"));
    let status: Value = serde_json::from_str(&view.ok(&["status", "--json"])).unwrap();
    assert_eq!(
        status["daemon"]["pid"].as_i64(),
        Some(d.pid() as i64),
        "{status}"
    );
    view.ok(&["status"]);
    assert!(view.ok(&["projects"]).contains("gate"));
    assert!(view.ok(&["hosts"]).contains("h1"));
    view.ok(&["check"]);
    assert!(view.ok(&["logs", &a.to_string()]).contains("hi there"));
    assert!(view.ok(&["wait", &a.to_string()]).contains("succeeded"));
    assert!(view.ok(&["prune", "--dry-run"]).contains("would prune"));
    // `wait` and `logs --follow` on a run still going: the change probe, and polling.
    let g = op.enqueue("gate");
    view.f.wait_until(DEADLINE, "the gate run to print", || {
        view.ok(&["logs", &g.to_string()]).contains("waiting")
    });
    let id = g.to_string();
    let mut waiter = spawn_piped(view.command(&["wait", &id]));
    let mut follower = spawn_piped(view.command(&["logs", "--follow", &id]));
    let (lines, printed) = std::sync::mpsc::channel();
    let out = follower.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    // Both are under way before the run can end: the follow has printed what the run printed.
    let first = printed.recv_timeout(DEADLINE);
    assert_eq!(first.as_deref(), Ok("waiting"), "{}", f.diagnostics());
    assert!(waiter.try_wait().unwrap().is_none(), "wait returned early");
    std::fs::write(&go, "").unwrap();
    for (what, child) in [("wait", &mut waiter), ("logs --follow", &mut follower)] {
        f.wait_until(DEADLINE, &format!("{what} to return"), || {
            child.try_wait().unwrap().is_some()
        });
        let st = child.wait().unwrap();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(st.code(), Some(0), "{what}: {st}: {err}");
    }
    reader.join().unwrap();
    let rest: Vec<String> = printed.try_iter().collect();
    assert_eq!(rest, ["through"], "the rest of the follow");
    let mut waited = String::new();
    waiter
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut waited)
        .unwrap();
    assert!(waited.contains("succeeded"), "{waited}");
    // A write is refused, naming the privilege: one line, exit 1.
    let refused = view.cmd(&["enqueue", "hello"]);
    assert_eq!(refused.code(), Some(1), "{refused:?}");
    assert_eq!(
        refused.stderr,
        "fleet: database: ERROR: permission denied for table runs (SQLSTATE 42501)\n",
        "{refused:?}"
    );
    assert!(refused.stdout.is_empty(), "{refused:?}");

    // The operator cancels an active run: the host's daemon stops it.
    std::fs::remove_file(&go).unwrap();
    let g2 = op.enqueue("gate");
    view.wait_status(g2, "running");
    assert!(op
        .ok(&["cancel", &g2.to_string()])
        .contains("cancel requested"));
    view.wait_status(g2, "cancelled");
    // The operator prunes (its file keeps one `hello` run); a run ended in the last 5 s is
    // kept, so it tries until one is old enough.
    f.wait_until(DEADLINE, "the operator's prune to forget a run", || {
        !op.ok(&["prune"]).contains("pruned 0 runs")
    });
    assert_eq!(view.run(a), Value::Null, "run {a} was pruned");
    // The operator forgets the host while a run of it is active: the run is lost, retried.
    let long = op.enqueue("long");
    view.wait_status(long, "running");
    d.signal(Signal::TERM);
    f.wait_until(DEADLINE, "the daemon to stop", || d.try_exit().is_some());
    let forgot = op.ok(&["hosts", "forget", "h1", "--force"]);
    assert!(forgot.contains(&long.to_string()), "{forgot}");
    assert_eq!(status_of(&view.run(long)), "lost");
    let retried = view.ok(&["runs", "--json", "--project", "long"]);
    let retried: Value = serde_json::from_str(&retried).unwrap();
    assert_eq!(retried.as_array().unwrap().len(), 2, "{retried}");
    assert_no_sqlite(&f);
}
