//! Several hosts on one PostgreSQL database, on this machine: one [`Fleet`] per host (its own
//! temp folder, state directory and daemons), each with a fleet.toml that is the same text but
//! for its first line, `host = "<name>"`; and one shared folder for what the commands write
//! (the markers, gate files). A daemon started here carries [`HOST_VAR`] so its commands can say
//! where they ran.
//!
//! The database is a new one on the process's shared cluster, or (for a test that restarts the
//! server) a cluster of the test's own. Waits poll with deadlines; failure messages carry every
//! host's runs table and daemon logs, and the last marker lines.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

use super::markers::HOST_VAR;
use crate::common::*;

/// One test's hosts and their database.
pub struct Hosts {
    shared: tempfile::TempDir,
    /// The same database as a `key=value` connection string, for the test's own queries.
    pub conninfo: String,
    hosts: Vec<(String, Fleet)>,
    /// The test's own cluster, when it has one (to restart it).
    own: Mutex<Option<pgtest::OwnCluster>>,
}

/// A `key=value` connection string (what pgtest hands out) as the `postgresql://` URL the
/// `database` key takes.
fn url_of(conninfo: &str) -> String {
    let field = |k: &str| {
        conninfo
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {conninfo}"))
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

impl Hosts {
    /// Hosts `names` on a new database of the shared cluster, each with fleet.toml
    /// `host = NAME`, `database = URL`, then `body(shared folder)`. `None` after pgtest's loud
    /// skip line when PostgreSQL is not installed.
    pub fn new(names: &[&str], body: impl Fn(&Path) -> String) -> Option<Hosts> {
        let db = pgtest::database()?;
        Some(Hosts::build(names, &db.url, None, body))
    }

    /// [`Hosts::new`] on a cluster of the test's own, which [`Hosts::restart_database`] can
    /// restart under the daemons.
    pub fn with_own_cluster(names: &[&str], body: impl Fn(&Path) -> String) -> Option<Hosts> {
        let own = pgtest::OwnCluster::start()?;
        let db = own.database();
        Some(Hosts::build(names, &db.url, Some(own), body))
    }

    fn build(
        names: &[&str],
        conninfo: &str,
        own: Option<pgtest::OwnCluster>,
        body: impl Fn(&Path) -> String,
    ) -> Hosts {
        let shared = tempfile::Builder::new()
            .prefix("fleet-hosts-")
            .tempdir()
            .expect("tempdir");
        let url = url_of(conninfo);
        let text = body(shared.path());
        let hosts = names
            .iter()
            .map(|n| {
                let head = format!("host = {}\ndatabase = {}\n", toml_str(n), toml_str(&url));
                (n.to_string(), Fleet::new(&(head + &text)))
            })
            .collect();
        Hosts {
            shared,
            conninfo: conninfo.to_string(),
            hosts,
            own: Mutex::new(own),
        }
    }

    /// The fleet of host `name`. Panics on an unknown name.
    pub fn fleet(&self, name: &str) -> &Fleet {
        self.hosts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f)
            .unwrap_or_else(|| panic!("no host {name} in this test"))
    }

    /// The host names, in the order given.
    pub fn names(&self) -> Vec<&str> {
        self.hosts.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The shared folder (markers, gates).
    pub fn shared(&self) -> &Path {
        self.shared.path()
    }

    /// The shared marker file.
    pub fn markers(&self) -> PathBuf {
        markers_in(self.shared())
    }

    /// Starts host `name`'s daemon and waits until it holds its state directory.
    pub fn start(&self, name: &str) -> Daemon<'_> {
        self.fleet(name).start_daemon_env(&[(HOST_VAR, name)])
    }

    /// `fleet hosts --json`, run on host `from`.
    pub fn hosts_json(&self, from: &str) -> Vec<Value> {
        let out = self.fleet(from).cmd_ok(&["hosts", "--json"]);
        match serde_json::from_str::<Value>(&out) {
            Ok(Value::Array(v)) => v,
            Ok(Value::Object(o)) if o.get("hosts").is_some_and(Value::is_array) => {
                o["hosts"].as_array().unwrap().clone()
            }
            other => panic!("`fleet hosts --json` is not a list of hosts: {other:?}\n{out}"),
        }
    }

    /// Host `name`'s row in `fleet hosts --json` (run on `from`), if listed.
    pub fn host_row(&self, from: &str, name: &str) -> Option<Value> {
        self.hosts_json(from)
            .into_iter()
            .find(|h| h["name"].as_str() == Some(name))
    }

    /// Every run, as `fleet runs --json` on the first host shows it.
    pub fn runs(&self) -> Vec<Value> {
        self.hosts[0].1.runs()
    }

    /// Polls `cond` every 50 ms until it holds; panics after `deadline` naming `what`, with
    /// every host's diagnostics.
    pub fn wait_until(&self, deadline: Duration, what: &str, cond: impl FnMut() -> bool) {
        wait_for(deadline, Duration::from_millis(50), what, cond, || {
            self.diagnostics()
        });
    }

    /// Every host's runs table and daemon logs, and the last marker lines. Never panics.
    pub fn diagnostics(&self) -> String {
        let mut s = String::new();
        for (n, f) in &self.hosts {
            s += &format!("\n===== host {n} =====\n{}", f.diagnostics());
        }
        let text = std::fs::read_to_string(self.markers()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        s += &format!(
            "\n===== markers (last 30 of {}) =====\n{}\n",
            lines.len(),
            lines[lines.len().saturating_sub(30)..].join("\n")
        );
        s
    }

    /// `pg_ctl restart -m immediate` of the test's own cluster: every connection cut, no
    /// checkpoint, crash recovery at the start. Panics when the test has no cluster of its own.
    pub fn restart_database(&self) {
        let mut own = self.own.lock().unwrap();
        own.as_mut()
            .expect("restart_database needs Hosts::with_own_cluster")
            .restart_immediate();
    }

    /// A connection to the hosts' database, for what no command shows (events). Panics if it
    /// cannot connect.
    pub fn sql(&self) -> postgres::Client {
        postgres::Client::connect(&self.conninfo, postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.conninfo))
    }

    /// Asserts `fleet check` exits 0 when run on host `from`.
    pub fn assert_check_ok(&self, from: &str) {
        assert_check_ok(self.fleet(from));
    }
}

/// The marker file of a shared folder.
pub fn markers_in(shared: &Path) -> PathBuf {
    shared.join("markers")
}

/// A run's id in `fleet runs --json`.
pub fn id_of(r: &Value) -> i64 {
    r["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("run without an id: {r}"))
}

/// The host a run ran on, as `fleet runs --json` says (`"?"` when it says nothing).
pub fn host_of(r: &Value) -> &str {
    r["host"].as_str().unwrap_or("?")
}

/// Enqueues `projects[i]` for each i, spreading the `fleet enqueue` calls over the hosts (one
/// thread per host): every command works from any host. Returns the run ids, in no order.
pub fn enqueue_from_all(h: &Hosts, projects: &[String]) -> Vec<i64> {
    let names = h.names();
    std::thread::scope(|s| {
        let workers: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(k, name)| {
                let f = h.fleet(name);
                let mine: Vec<&String> = projects.iter().skip(k).step_by(names.len()).collect();
                s.spawn(move || mine.into_iter().map(|p| f.enqueue(p)).collect::<Vec<_>>())
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("an enqueue thread panicked"))
            .collect()
    })
}

/// Stops (SIGSTOP) every process of host `name`'s fleet: its daemon first (so it spawns nothing
/// more), then its fork server, shims and commands, until every one of them is stopped: the host
/// is frozen, as a VM paused or a machine cut off. Returns the pids to thaw.
pub fn freeze(h: &Hosts, name: &str, daemon: &Daemon) -> Vec<i32> {
    daemon.signal(Signal::STOP);
    let marker = &h.fleet(name).marker;
    let me = std::process::id() as i32;
    let mut stopped: Vec<i32> = vec![daemon.pid()];
    h.wait_until(
        DEADLINE,
        &format!("every process of host {name} stopped"),
        || {
            let mut all_stopped = true;
            for pid in marked_pids(marker).into_iter().filter(|&p| p != me) {
                if !stopped.contains(&pid) && send_signal(pid, Signal::STOP).is_ok() {
                    stopped.push(pid);
                }
                let state =
                    std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let state = state
                    .rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next());
                all_stopped &= matches!(state, Some("T" | "t" | "Z" | "X") | None);
            }
            all_stopped
        },
    );
    stopped
}

/// Resumes (SIGCONT) the processes [`freeze`] stopped.
pub fn thaw(pids: &[i32]) {
    for &pid in pids {
        // One may have been killed meanwhile (a SIGKILL ends a stopped process).
        let _ = send_signal(pid, Signal::CONT);
    }
}

/// The fleet.toml body shared by the scenarios over two namespaces: a global cap, namespace x
/// (cap `x.0`, `x.1` projects `x0`…) and namespace y (cap `y.0`, `y.1` projects `y0`…), every
/// project running `cmd` (a TOML array). More projects than each cap: one active run per project.
pub fn two_namespaces(cmd: &str, global: usize, x: (usize, usize), y: (usize, usize)) -> String {
    let mut t = format!(
        "max_concurrency = {global}\n\
         [namespaces.x]\nmax_concurrency = {}\n\
         [namespaces.y]\nmax_concurrency = {}\n",
        x.0, y.0
    );
    for (ns, n) in [("x", x.1), ("y", y.1)] {
        for i in 0..n {
            t += &format!("[projects.{ns}{i}]\nnamespace = \"{ns}\"\ncommand = {cmd}\n");
        }
    }
    t
}

/// The project of the `k`-th run over [`two_namespaces`]: every third run in x, the others in
/// y, each namespace's runs going round all of its projects in turn (so every project, and so
/// the namespace's whole cap, gets work).
pub fn project_for(k: usize, x_projects: usize, y_projects: usize) -> String {
    let xs_before = k / 3;
    match k % 3 {
        0 => format!("x{}", xs_before % x_projects),
        _ => format!("y{}", (k - xs_before - 1) % y_projects),
    }
}
