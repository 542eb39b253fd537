//! Tests only: a throwaway PostgreSQL cluster for the test process that asks for one, and a new
//! empty database for each test.
//!
//! [`database`] is the one entry point. The first call in a process starts a cluster: the data
//! folder is copied from a template made once by `initdb` (kept in the system's temp folder, so
//! that each test process pays a copy, not an `initdb`), and the server listens on a unix socket
//! in a temp folder of its own, never on TCP. As root it runs as `nobody` (PostgreSQL refuses to
//! run as root), through `setpriv`. Every later call in the process shares that cluster and
//! gets a database of its own (`CREATE DATABASE t_<random>`).
//!
//! The server goes away with the process, whatever happens: an `atexit` handler stops it (SIGINT,
//! PostgreSQL's "fast" shutdown, what `pg_ctl stop -m fast` sends — `pg_ctl` itself refuses to
//! run as root) and waits for it, then deletes its folder; and the server is started with a
//! parent-death signal, so a test process killed outright takes its server with it (its folder
//! is swept by a later test process, once an hour old).
//!
//! When the server binaries cannot be found, [`database`] returns `None` after printing a loud
//! `SKIPPED: PostgreSQL not found (…)` line, and the test is expected to return early — unless
//! `FLEET_REQUIRE_POSTGRES=1` is set (CI sets it), where it panics instead. A cluster that is
//! found but fails to start is always a failure, never a skip.
//!
//! Where the binaries are looked for: `FLEET_PG_BINDIR`, then Debian's versioned folders
//! `/usr/lib/postgresql/<version>/bin` (highest version first), then `PATH`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub mod tls;

/// The variable that turns a missing PostgreSQL from a skip into a failure.
pub const REQUIRE_VAR: &str = "FLEET_REQUIRE_POSTGRES";

/// The variable naming the folder of `initdb` and `postgres`, ahead of the usual places.
pub const BINDIR_VAR: &str = "FLEET_PG_BINDIR";

/// The role every database belongs to (the cluster's superuser, trusted on the socket).
const ROLE: &str = "fleet";

/// The port number: with no TCP listener it only names the socket file (`.s.PGSQL.5432`).
const PORT: u16 = 5432;

/// A running cluster: where its socket is.
#[derive(Debug)]
pub struct Cluster {
    /// The folder holding the socket, the data folder and the server's log.
    dir: PathBuf,
    /// The port: of the TCP listener when there is one, else only the socket file's name.
    port: u16,
    /// `-c` settings of the server beyond the usual ones (TCP, TLS, `hba_file`).
    settings: Vec<String>,
}

/// One test's database on the shared cluster.
#[derive(Debug, Clone)]
pub struct Database {
    /// Its name (`t_<random>`).
    pub name: String,
    /// A connection string for it, in PostgreSQL's `key=value` form.
    pub url: String,
}

/// Why no cluster: the binaries are missing (a skip) or it failed to start (a failure).
#[derive(Debug)]
enum Unavailable {
    NotFound(String),
    Failed(String),
}

/// The process's cluster, started on first use.
static CLUSTER: OnceLock<Result<Cluster, Unavailable>> = OnceLock::new();

/// The running server's pid and folder, for the exit handler.
static RUNNING: Mutex<Option<(i32, PathBuf)>> = Mutex::new(None);

/// A new empty database on this process's cluster, or `None` (after a loud `SKIPPED` line on
/// stderr) when PostgreSQL is not installed here.
///
/// Panics: when PostgreSQL is missing and `FLEET_REQUIRE_POSTGRES=1`; when the cluster was
/// found but could not be started; when the database cannot be created.
pub fn database() -> Option<Database> {
    let cluster = match CLUSTER.get_or_init(start) {
        Ok(c) => c,
        Err(Unavailable::NotFound(why)) => {
            if std::env::var(REQUIRE_VAR).as_deref() == Ok("1") {
                panic!("PostgreSQL not found ({why}), and {REQUIRE_VAR}=1 requires it");
            }
            eprintln!("\n*** SKIPPED: PostgreSQL not found ({why}) ***\n");
            return None;
        }
        Err(Unavailable::Failed(why)) => panic!("PostgreSQL test cluster: {why}"),
    };
    Some(cluster.create_database())
}

impl Cluster {
    /// A connection string for database `name` on this cluster.
    pub fn url(&self, name: &str) -> String {
        format!(
            "host={} port={} user={ROLE} dbname={name} connect_timeout=10",
            self.dir.display(),
            self.port
        )
    }

    /// Creates a new database with a random name. Panics if the server refuses.
    fn create_database(&self) -> Database {
        let name = format!("t_{:016x}", random());
        let mut admin = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to the test cluster: {e}"));
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        Database {
            url: self.url(&name),
            name,
        }
    }
}

/// 64 bits from the kernel's random source (database names must not repeat across processes).
fn random() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("read /dev/urandom");
    u64::from_le_bytes(b)
}

/// The folder holding `initdb` and `postgres`.
fn find_bindir() -> Result<PathBuf, String> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if let Some(d) = std::env::var_os(BINDIR_VAR) {
        let d = PathBuf::from(d);
        return if has(&d) {
            Ok(d)
        } else {
            Err(format!(
                "{BINDIR_VAR}={} holds no initdb and postgres",
                d.display()
            ))
        };
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, d)| has(d))
        .collect();
    versions.sort();
    if let Some((_, d)) = versions.pop() {
        return Ok(d);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .find(|d| has(d))
        .ok_or_else(|| {
            "no initdb and postgres in /usr/lib/postgresql/*/bin nor on PATH; install the \
             `postgresql` package or set FLEET_PG_BINDIR"
                .to_string()
        })
}

/// The account the server runs as when this process is root: PostgreSQL refuses root.
const UNPRIVILEGED: (&str, &str) = ("nobody", "nogroup");

/// True when this process runs as root.
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A command for a server binary: run through `setpriv` as the unprivileged account when this
/// process is root, with `pdeathsig` (a signal the kernel sends the program when the thread that
/// started it ends) when given.
fn server_command(bin: &Path, pdeathsig: Option<&str>) -> Command {
    let setpriv = Path::new("/usr/bin/setpriv");
    if !is_root() && (pdeathsig.is_none() || !setpriv.exists()) {
        return Command::new(bin);
    }
    let mut c = Command::new(setpriv);
    if is_root() {
        c.arg(format!("--reuid={}", UNPRIVILEGED.0))
            .arg(format!("--regid={}", UNPRIVILEGED.1))
            .arg("--clear-groups");
    }
    if let Some(sig) = pdeathsig {
        c.arg(format!("--pdeathsig={sig}"));
    }
    c.arg("--").arg(bin);
    c
}

/// Gives `path` to the unprivileged account (root only), so the server may write there.
fn hand_over(path: &Path) -> Result<(), String> {
    if !is_root() {
        return Ok(());
    }
    let out = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", UNPRIVILEGED.0, UNPRIVILEGED.1))
        .arg(path)
        .output()
        .map_err(|e| format!("chown: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "chown {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Runs `cmd`; its output becomes the error when it fails.
fn run(mut cmd: Command, what: &str) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A data folder made by `initdb` once per machine (per server version and account), copied for
/// each cluster: `initdb` takes seconds, a copy a fraction of one. Made in a folder of its own
/// and renamed into place, so that processes starting at once never see half a template.
fn template(bindir: &Path) -> Result<PathBuf, String> {
    let version = bindir
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("pg")
        .to_string();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let path = std::env::temp_dir().join(format!("fleet-pgtest-template-{version}-{uid}"));
    if path.join("PG_VERSION").is_file() {
        return Ok(path);
    }
    let scratch = tempfile::Builder::new()
        .prefix("fleet-pgtest-initdb.")
        .tempdir()
        .map_err(|e| format!("temp folder: {e}"))?;
    hand_over(scratch.path())?;
    let data = scratch.path().join("data");
    let mut cmd = server_command(&bindir.join("initdb"), None);
    cmd.arg("-D")
        .arg(&data)
        .args(["-U", ROLE, "--auth=trust", "--no-sync", "-E", "UTF8"])
        .args(["--locale=C", "--no-instructions"]);
    run(cmd, "initdb")?;
    match std::fs::rename(&data, &path) {
        Ok(()) => Ok(path),
        // Another process made it first: theirs is as good.
        Err(_) if path.join("PG_VERSION").is_file() => Ok(path),
        Err(e) => Err(format!(
            "rename {} to {}: {e}",
            data.display(),
            path.display()
        )),
    }
}

/// Starts this process's cluster.
fn start() -> Result<Cluster, Unavailable> {
    let bindir = find_bindir().map_err(Unavailable::NotFound)?;
    start_with(&bindir).map_err(Unavailable::Failed)
}

/// Deletes the folders of clusters whose test process was killed outright (its exit handler
/// never ran; the parent-death signal stopped the server): a `fleet-pgtest.*` folder with no
/// `postmaster.pid` that has not changed for an hour. A folder being set up right now is
/// younger; one whose server runs has the pid file.
fn sweep_leftovers() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("fleet-pgtest.") {
            continue;
        }
        let path = e.path();
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(3600));
        if old && !path.join("data/postmaster.pid").exists() {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Copies the template, starts the server on a socket in a new temp folder, and waits until it
/// accepts connections.
fn start_with(bindir: &Path) -> Result<Cluster, String> {
    let dir = prepare(bindir)?;
    let cluster = Cluster {
        dir,
        port: PORT,
        settings: Vec::new(),
    };
    let pid = launch(bindir, &cluster, false)?;
    *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) = Some((pid, cluster.dir.clone()));
    // SAFETY: `stop_at_exit` is an `extern "C" fn()` that neither unwinds nor returns early;
    // registering it has no other precondition.
    if unsafe { libc::atexit(stop_at_exit) } != 0 {
        stop_at_exit();
        return Err("atexit refused the stop handler".into());
    }
    wait_ready(&cluster, pid)?;
    Ok(cluster)
}

/// A new cluster folder: the template's data folder copied into a new temp folder, given to the
/// server's account.
fn prepare(bindir: &Path) -> Result<PathBuf, String> {
    sweep_leftovers();
    let template = template(bindir)?;
    let dir = tempfile::Builder::new()
        .prefix("fleet-pgtest.")
        .tempdir()
        .map_err(|e| format!("temp folder: {e}"))?
        .keep();
    let data = dir.join("data");
    run(
        {
            let mut c = Command::new("cp");
            c.arg("-a").arg(&template).arg(&data);
            c
        },
        "copy the template data folder",
    )?;
    hand_over(&dir)?;
    Ok(dir)
}

/// Starts the server of `cluster` (its data folder, its socket, its log, appended to, its
/// settings), and returns its pid without waiting for it to accept connections. `durable`: a commit
/// is acknowledged only once its WAL is written out (`synchronous_commit=on`), so that it
/// survives a crash of the server (an immediate shutdown); otherwise the last commits
/// acknowledged may be lost with it, which only a test that never stops its server can allow.
fn launch(bindir: &Path, cluster: &Cluster, durable: bool) -> Result<i32, String> {
    let dir = &cluster.dir;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("server.log"))
        .map_err(|e| format!("log: {e}"))?;
    let log2 = log.try_clone().map_err(|e| format!("log: {e}"))?;
    let mut cmd = server_command(&bindir.join("postgres"), Some("INT"));
    cmd.arg("-D")
        .arg(dir.join("data"))
        .arg("-k")
        .arg(dir)
        .args(["-c", "listen_addresses=", "-p", &cluster.port.to_string()])
        // The machine does not crash under a test: nothing need reach the disk (fsync). Only a
        // server that crashes (an immediate shutdown) loses the commits not yet written out.
        .args(["-c", "fsync=off", "-c"])
        .arg(format!(
            "synchronous_commit={}",
            if durable { "on" } else { "off" }
        ))
        .args(["-c", "full_page_writes=off", "-c", "max_connections=200"])
        .args(cluster.settings.iter().flat_map(|s| ["-c", s]))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    // The server is started by a thread that lives as long as the server and waits for it:
    // the parent-death signal fires when the starting thread ends, which must not be the end of
    // the test that happened to start the cluster.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("pgtest-server".into())
        .spawn(move || match cmd.spawn() {
            Ok(mut child) => {
                let _ = tx.send(Ok(child.id() as i32));
                let _ = child.wait();
            }
            Err(e) => {
                let _ = tx.send(Err(format!("start postgres: {e}")));
            }
        })
        .map_err(|e| format!("thread: {e}"))?;
    rx.recv()
        .map_err(|_| "the server thread died".to_string())?
}

/// Waits (60 s at most) until the server `pid` of `cluster` accepts connections.
fn wait_ready(cluster: &Cluster, pid: i32) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match postgres::Client::connect(&cluster.url("postgres"), postgres::NoTls) {
            Ok(_) => return Ok(()),
            Err(e) => {
                if !alive(pid) || Instant::now() > deadline {
                    let log =
                        std::fs::read_to_string(cluster.dir.join("server.log")).unwrap_or_default();
                    return Err(format!("the server did not come up ({e}); its log:\n{log}"));
                }
                // Polling a condition (the socket accepts) with a deadline, not a fixed wait.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Waits (60 s at most) until process `pid` is gone. Panics past the deadline.
fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while alive(pid) {
        assert!(Instant::now() < deadline, "the server {pid} did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A cluster of one test's own, which the test may stop and start (a database outage). Never
/// shared with another test, so stopping it disturbs nobody else; stopped and deleted when
/// dropped. Its commits survive an immediate shutdown (`synchronous_commit=on`): a commit the
/// server acknowledged before it crashed is there after the restart, as on a real server.
#[derive(Debug)]
pub struct OwnCluster {
    cluster: Cluster,
    bindir: PathBuf,
    /// The server's pid while it runs.
    pid: Option<i32>,
}

impl OwnCluster {
    /// Starts a new cluster, or `None` (after the loud `SKIPPED` line) when PostgreSQL is not
    /// installed here.
    ///
    /// Panics: as [`database`].
    pub fn start() -> Option<OwnCluster> {
        OwnCluster::start_configured(|_| Ok((PORT, Vec::new())))
    }

    /// [`OwnCluster::start`], with the port and the extra `-c` settings `configure` returns,
    /// given the cluster's folder (where it may write files the server reads before it is
    /// handed to the server's account).
    fn start_configured(
        configure: impl FnOnce(&Path) -> Result<(u16, Vec<String>), String>,
    ) -> Option<OwnCluster> {
        let bindir = match find_bindir() {
            Ok(d) => d,
            Err(why) => {
                if std::env::var(REQUIRE_VAR).as_deref() == Ok("1") {
                    panic!("PostgreSQL not found ({why}), and {REQUIRE_VAR}=1 requires it");
                }
                eprintln!("\n*** SKIPPED: PostgreSQL not found ({why}) ***\n");
                return None;
            }
        };
        let set_up = || {
            let dir = prepare(&bindir)?;
            let (port, settings) = configure(&dir)?;
            hand_over(&dir)?;
            Ok::<_, String>(Cluster {
                dir,
                port,
                settings,
            })
        };
        let cluster = set_up().unwrap_or_else(|e| panic!("PostgreSQL test cluster: {e}"));
        let mut own = OwnCluster {
            cluster,
            bindir,
            pid: None,
        };
        own.start_again();
        Some(own)
    }

    /// A new empty database on this cluster. Panics if the server refuses (or is stopped).
    pub fn database(&self) -> Database {
        self.cluster.create_database()
    }

    /// The folder of the cluster's files (its `server.crt` and `server.key` for
    /// [`OwnCluster::start_tcp`]'s with TLS: replaced there, they are served after a restart).
    pub fn dir(&self) -> &Path {
        &self.cluster.dir
    }

    /// Stops the server at once, as `pg_ctl stop -m immediate` does (SIGQUIT: no checkpoint,
    /// every connection cut; the next start runs crash recovery), and waits until it is gone.
    pub fn stop_immediate(&mut self) {
        if let Some(pid) = self.pid.take() {
            // SAFETY: a plain signal to the server this value started.
            unsafe {
                libc::kill(pid, libc::SIGQUIT);
            }
            wait_gone(pid);
        }
    }

    /// Starts the server again on the same data folder and socket, and waits until it accepts
    /// connections. Panics if it does not come up.
    pub fn start_again(&mut self) {
        assert!(self.pid.is_none(), "the server is running");
        let pid = launch(&self.bindir, &self.cluster, true)
            .unwrap_or_else(|e| panic!("PostgreSQL test cluster: {e}"));
        self.pid = Some(pid);
        wait_ready(&self.cluster, pid).unwrap_or_else(|e| panic!("PostgreSQL test cluster: {e}"));
    }

    /// Sends `signal` to the server and every process it started (its backends and helpers):
    /// `SIGSTOP` makes a server that is there but answers nothing, as a frozen machine or a
    /// network black hole does; `SIGCONT` lets it go on. Panics if the server is stopped.
    pub fn signal_all(&self, signal: i32) {
        let pid = self.pid.expect("the server is running");
        for p in std::iter::once(pid).chain(children(pid)) {
            // SAFETY: a plain signal to the server this value started, or to its children.
            unsafe {
                libc::kill(p, signal);
            }
        }
    }

    /// `pg_ctl restart -m immediate`: [`OwnCluster::stop_immediate`], then
    /// [`OwnCluster::start_again`].
    pub fn restart_immediate(&mut self) {
        self.stop_immediate();
        self.start_again();
    }
}

/// The pids whose parent is `parent`, from `/proc/<pid>/stat` (field 4).
fn children(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // The command name (field 2) may hold spaces: fields after its ')'.
                    let rest = &stat[stat.rfind(')')? + 2..];
                    rest.split(' ').nth(1)?.parse::<i32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

impl Drop for OwnCluster {
    /// Stops the server (fast shutdown) and deletes its folder.
    fn drop(&mut self) {
        if self.pid.is_some() {
            // A test that failed while the server was frozen: it must run to shut down.
            self.signal_all(libc::SIGCONT);
        }
        if let Some(pid) = self.pid.take() {
            // SAFETY: a plain signal to the server this value started.
            unsafe {
                libc::kill(pid, libc::SIGINT);
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            while alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = std::fs::remove_dir_all(&self.cluster.dir);
    }
}

/// True while process `pid` exists (a zombie counts: the server thread reaps it).
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; kill only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// The exit handler: stops the server (fast shutdown), waits up to 30 s for it to be gone, and
/// deletes its folder. Never panics (it runs during `exit`).
extern "C" fn stop_at_exit() {
    let Some((pid, dir)) = RUNNING.lock().ok().and_then(|mut r| r.take()) else {
        return;
    };
    // SAFETY: a plain signal to the server's own pid, which this process started.
    unsafe {
        libc::kill(pid, libc::SIGINT);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The running server of this process's cluster, if one was started: its pid and its folder
/// (for tests of this crate, which check that both go away with the process).
pub fn server() -> Option<(i32, PathBuf)> {
    RUNNING.lock().ok().and_then(|r| r.clone())
}

/// Whether PostgreSQL's server binaries can be found here (for tests that only want to know).
pub fn available() -> bool {
    find_bindir().is_ok()
}
