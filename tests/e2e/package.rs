//! The Debian package (`dist/deb build`), installed for real with `dpkg -i` as an operator would:
//! the `fleet` system user and the state directory it makes, commands run as root before the
//! daemon ever ran (what they create is `fleet`'s), the daemon started as the unit
//! starts it (its `User=` through `runuser`, its `ExecStart=`), runs queued with the CLI as root
//! and as `fleet`, an upgrade over a run in flight that the restarted daemon adopts, then
//! `dpkg -r` (the state stays) and `dpkg -P` (it goes, after saying so), leaving no process.
//!
//! It changes the machine (a package, a system user), so it runs only with
//! FLEET_TEST_DEB_INSTALL=1, as root (CI sets it, and runs as root), and says SKIPPED otherwise.
//! No systemd runs the daemon here: where systemd would act (the upgrade's restart, the removal's
//! stop), the test does what the unit's settings make it do (SIGTERM to the daemon alone, as
//! `KillMode=process`).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

const ENABLE: &str = "FLEET_TEST_DEB_INSTALL";
const CONFIG: &str = "/etc/fleet/fleet.toml";
const STATE: &str = "/var/lib/fleet";
const UNIT: &str = "/lib/systemd/system/fleet.service";
/// What dpkg and the maintainer scripts may take (adduser, on a loaded machine).
const DPKG_DEADLINE: Duration = Duration::from_secs(180);

/// The package `dist/deb build` makes.
fn deb() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "target/debian/fleet_{}-1_amd64.deb",
        env!("CARGO_PKG_VERSION")
    ))
}

/// Runs `argv` to its end as root, asserting exit 0; returns stdout and stderr together.
fn run_ok(argv: &[&str], deadline: Duration) -> String {
    let mut c = Command::new(argv[0]);
    c.args(&argv[1..]).env("DEBIAN_FRONTEND", "noninteractive");
    let out = run_with_deadline(c, deadline);
    assert_eq!(
        out.code(),
        Some(0),
        "{argv:?} failed:\n{}{}",
        out.stdout,
        out.stderr
    );
    format!("{}{}", out.stdout, out.stderr)
}

/// Whether dpkg has the package installed (or its conffiles, after a removal).
fn dpkg_knows_fleet() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Abbrev}", "fleet"])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.starts_with(b"un"))
}

/// Live processes whose real uid is `uid`.
fn processes_of(uid: u32) -> Vec<(i32, String)> {
    all_pids()
        .into_iter()
        .filter(|pid| !process_gone(*pid))
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let real: u32 = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            (real == uid).then(|| (pid, comm.trim().to_string()))
        })
        .collect()
}

/// `argv` as root (`user` None) or through `runuser -u USER`, in `/`, with the environment
/// systemd gives a service (PATH alone).
fn as_user(user: Option<&str>, argv: &[&str]) -> Command {
    let mut c = match user {
        None => Command::new(argv[0]),
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--", argv[0]]);
            c
        }
    };
    c.args(&argv[1..])
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .current_dir("/");
    c
}

/// The installed `fleet ARGS` on the installed config, as `user` (root when None).
fn fleet(user: Option<&str>, args: &[&str]) -> Command {
    let mut c = as_user(user, &["/usr/bin/fleet", "--config", CONFIG]);
    c.args(args);
    c
}

/// Runs the installed `fleet ARGS` to its end, asserting exit 0; returns stdout.
fn fleet_ok(user: Option<&str>, args: &[&str]) -> String {
    let out = run_with_deadline(fleet(user, args), CMD_DEADLINE);
    assert_eq!(
        out.code(),
        Some(0),
        "fleet {args:?} as {user:?} failed:\n{}{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

fn enqueue(user: Option<&str>, project: &str) -> i64 {
    let out = fleet_ok(user, &["enqueue", project]);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("enqueue {project}: not a run id: {out:?}"))
}

fn run(id: i64) -> Value {
    let out = fleet_ok(Some("fleet"), &["runs", "--json", "--limit", "100"]);
    let runs: Vec<Value> = serde_json::from_str(&out).unwrap();
    runs.into_iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no run {id} in {out}"))
}

fn wait_run_status(id: i64, want: &str, log: &Path) {
    wait_for(
        DEADLINE,
        Duration::from_millis(100),
        &format!("run {id} {want}"),
        || run(id)["status"] == want,
        || format!("run {id}: {}\ndaemon's log:\n{}", run(id), read(log)),
    );
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The daemon as the installed unit starts it: `ExecStart=` as `User=`, its stderr (the
/// journal's) in `log`. Returns the `runuser` process and the daemon's pid once `fleet status`
/// says it evaluates.
fn start_daemon(log: &Path) -> (Child, i32) {
    let unit = std::fs::read_to_string(UNIT).unwrap();
    let exec: Vec<&str> = unit_value(&unit, "ExecStart")
        .expect("ExecStart")
        .split_whitespace()
        .collect();
    assert_eq!(
        exec,
        ["/usr/bin/fleet", "--config", CONFIG, "daemon"],
        "the unit's ExecStart"
    );
    let user = unit_value(&unit, "User").expect("User");
    let mut c = as_user(Some(user), &exec);
    c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap(),
    );
    let child = c.spawn().expect("runuser");
    wait_for(
        DEADLINE,
        Duration::from_millis(100),
        "the installed daemon to evaluate (`fleet status` exit 0)",
        || run_with_deadline(fleet(Some(user), &["status"]), CMD_DEADLINE).code() == Some(0),
        || read(log),
    );
    let status: Value = serde_json::from_str(&fleet_ok(Some(user), &["status", "--json"])).unwrap();
    let pid = status["daemon"]["pid"].as_i64().expect("daemon.pid") as i32;
    (child, pid)
}

/// Stops the daemon as `systemctl stop` does under `KillMode=process`: SIGTERM to it alone;
/// then waits for it (and the `runuser` around it) to exit 0.
fn stop_daemon(mut child: Child, pid: i32, log: &Path) {
    send_signal(pid, Signal::TERM).unwrap();
    wait_for(
        DEADLINE,
        Duration::from_millis(50),
        "the daemon to exit on SIGTERM",
        || child.try_wait().unwrap().is_some(),
        || read(log),
    );
    assert!(child.wait().unwrap().success(), "daemon: {}", read(log));
}

/// Purges the package and ends what runs as `fleet`, however the test ends: a failed test
/// leaves neither behind.
struct PurgeOnDrop;

impl Drop for PurgeOnDrop {
    fn drop(&mut self) {
        if let Some(uid) = Command::new("id")
            .args(["-u", "fleet"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        {
            // Only this test starts processes as `fleet` (it refuses to run where fleet was
            // installed already).
            for (pid, _) in processes_of(uid) {
                let _ = send_signal(pid, Signal::KILL);
            }
        }
        let _ = Command::new("dpkg").args(["-P", "fleet"]).output();
    }
}

#[test]
fn the_package_installs_runs_upgrades_and_removes() {
    if std::env::var(ENABLE).as_deref() != Ok("1") {
        eprintln!("SKIPPED: {ENABLE} is not 1: the Debian package was NOT installed and tested");
        return;
    }
    assert!(
        rustix::process::geteuid().is_root(),
        "{ENABLE}=1: installing a package needs root"
    );
    let deb = deb();
    assert!(
        deb.exists(),
        "{ENABLE}=1 but there is no {}: build it first with `dist/deb build`",
        deb.display()
    );
    assert!(
        !dpkg_knows_fleet(),
        "fleet is installed on this machine already: the test installs and purges it; \
         remove it first (dpkg -P fleet)"
    );
    let _purge = PurgeOnDrop;
    let scratch = tempfile::tempdir().unwrap();
    let log = scratch.path().join("daemon.log");

    // Install: the user, the state directory, the config, the unit, both programs.
    run_ok(&["dpkg", "-i", deb.to_str().unwrap()], DPKG_DEADLINE);
    let passwd = run_ok(&["getent", "passwd", "fleet"], CMD_DEADLINE);
    let fields: Vec<&str> = passwd.trim().split(':').collect();
    let uid: u32 = fields[2].parse().unwrap();
    assert!(uid < 1000, "fleet is a system user: {passwd}");
    assert_eq!(fields[5..], [STATE, "/usr/sbin/nologin"], "{passwd}");
    run_ok(&["getent", "group", "fleet"], CMD_DEADLINE);
    let gid = std::fs::metadata(STATE).unwrap().gid();
    let state = std::fs::metadata(STATE).unwrap();
    assert_eq!(
        (state.uid(), state.permissions().mode() & 0o7777),
        (uid, 0o700),
        "{STATE}: owner and mode"
    );
    let config = std::fs::metadata(CONFIG).unwrap();
    assert_eq!(
        (
            config.uid(),
            config.gid(),
            config.permissions().mode() & 0o777
        ),
        (0, gid, 0o640),
        "{CONFIG}: root, group fleet, 0640"
    );
    for program in ["/usr/bin/fleet", "/usr/bin/fleet-forksrv", UNIT] {
        assert!(Path::new(program).is_file(), "{program} not installed");
    }

    // Root first, before any daemon ran: a run queued (fleet.db is made) and a prune
    // (prune.lock is made). What they create is the `fleet` user's, or the daemon, run as
    // fleet, could open neither.
    let first = enqueue(None, "hello");
    fleet_ok(None, &["prune"]);
    for name in ["fleet.db", "prune.lock"] {
        let meta = std::fs::metadata(Path::new(STATE).join(name)).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (uid, gid),
            "{name}: made by root, fleet's"
        );
    }

    // The daemon as the unit runs it; a run queued as root, one as the `fleet` user.
    let (daemon, pid) = start_daemon(&log);
    wait_run_status(first, "succeeded", &log);
    fleet_ok(Some("fleet"), &["prune"]);
    fleet_ok(None, &["prune"]);
    let by_root = enqueue(None, "hello");
    let by_fleet = enqueue(Some("fleet"), "hello");
    for id in [by_root, by_fleet] {
        wait_run_status(id, "succeeded", &log);
        assert_eq!(
            fleet_ok(None, &["logs", &id.to_string()]).trim(),
            "hello from fleet"
        );
    }
    // Other users are told they may not read the config, which names the file.
    let out = run_with_deadline(fleet(Some("nobody"), &["runs"]), CMD_DEADLINE);
    assert!(
        out.code() != Some(0)
            && out.stderr.contains("ermission denied")
            && out.stderr.contains(CONFIG),
        "fleet runs as nobody: {out:?}"
    );

    // An upgrade over a run in flight: the operator's edit of fleet.toml is kept, and the
    // daemon restarted on the new binaries adopts the run, which ends once, succeeded.
    let gate = scratch.path().join("gate");
    std::fs::create_dir(&gate).unwrap();
    std::os::unix::fs::chown(&gate, Some(uid), None).unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let g = gate.display();
    let edit = format!(
        "\n[projects.gated]\ncommand = {}\n",
        sh(&format!(
            "echo started >> {g}/starts; while [ ! -e {g}/go ]; do sleep 0.05; done; echo done"
        ))
    );
    let mut text = read(Path::new(CONFIG));
    text.push_str(&edit);
    std::fs::write(CONFIG, &text).unwrap();
    let gated = enqueue(None, "gated");
    wait_run_status(gated, "running", &log);

    let newer = scratch.path().join("newer");
    run_ok(
        &[
            "dpkg-deb",
            "-R",
            deb.to_str().unwrap(),
            newer.to_str().unwrap(),
        ],
        CMD_DEADLINE,
    );
    let control = newer.join("DEBIAN/control");
    let version = format!("Version: {}-1\n", env!("CARGO_PKG_VERSION"));
    let bumped = read(&control).replace(&version, &version.replace("-1\n", "-2\n"));
    assert_ne!(bumped, read(&control), "no {version:?} in the control file");
    std::fs::write(&control, bumped).unwrap();
    let newer_deb = scratch.path().join("fleet-newer.deb");
    run_ok(
        &[
            "dpkg-deb",
            "--root-owner-group",
            "-b",
            newer.to_str().unwrap(),
            newer_deb.to_str().unwrap(),
        ],
        DPKG_DEADLINE,
    );
    run_ok(&["dpkg", "-i", newer_deb.to_str().unwrap()], DPKG_DEADLINE);
    assert_eq!(read(Path::new(CONFIG)), text, "the upgrade kept the edit");
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert!(
        exe.to_string_lossy().ends_with(" (deleted)"),
        "the upgrade replaced the running daemon's binary: {}",
        exe.display()
    );
    stop_daemon(daemon, pid, &log);
    assert_eq!(
        run(gated)["status"],
        "running",
        "the stop left the run going"
    );
    // A run queued by root while no daemon runs.
    let while_down = enqueue(None, "hello");
    let (daemon, pid) = start_daemon(&log);
    std::fs::write(gate.join("go"), "").unwrap();
    wait_run_status(gated, "succeeded", &log);
    assert_eq!(read(&gate.join("starts")), "started\n", "started once");
    assert_eq!(run(gated)["attempt"], 1);
    wait_run_status(while_down, "succeeded", &log);

    // The commands run as root, with the daemon up and down, left nothing in the state
    // directory that the daemon's user could not use, and its files are its own alone.
    let mut files = Vec::new();
    walk(Path::new(STATE), &mut files);
    for (path, meta) in &files {
        assert_eq!(meta.uid(), uid, "{} is not fleet's", path.display());
        if meta.is_file() {
            assert_eq!(
                meta.mode() & 0o077,
                0,
                "{} is open to others",
                path.display()
            );
        }
    }

    // Removal (the daemon stopped first, as the unit's prerm does): the state stays. Purge:
    // it goes, said first; no process of the fleet user is left.
    stop_daemon(daemon, pid, &log);
    wait_for(
        DEADLINE,
        Duration::from_millis(50),
        "every process of the fleet user to exit",
        || processes_of(uid).is_empty(),
        || format!("{:?}", processes_of(uid)),
    );
    run_ok(&["dpkg", "-r", "fleet"], DPKG_DEADLINE);
    assert!(!Path::new("/usr/bin/fleet").exists());
    assert!(
        Path::new(STATE).join("fleet.db").exists(),
        "removal kept the state"
    );
    assert_eq!(read(Path::new(CONFIG)), text, "removal kept the conffile");
    // The stat override naming the `fleet` group went with the package: deleting the user now
    // cannot break a later dpkg run.
    assert!(
        !Command::new("dpkg-statoverride")
            .args(["--list", CONFIG])
            .output()
            .unwrap()
            .status
            .success(),
        "removal left the stat override on {CONFIG}"
    );
    let said = run_ok(&["dpkg", "-P", "fleet"], DPKG_DEADLINE);
    assert!(
        said.contains("removing the state directory /var/lib/fleet"),
        "purge says it removes the state: {said}"
    );
    assert!(!Path::new(STATE).exists(), "purge removed {STATE}");
    assert!(
        !Path::new("/etc/fleet").exists(),
        "purge removed /etc/fleet"
    );
    assert!(!dpkg_knows_fleet());
    assert_eq!(processes_of(uid), [], "processes of the fleet user");
}

/// Every file and folder under `dir`, with its metadata (symlinks not followed).
fn walk(dir: &Path, out: &mut Vec<(PathBuf, std::fs::Metadata)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.path().symlink_metadata().unwrap();
        if meta.is_dir() {
            walk(&entry.path(), out);
        }
        out.push((entry.path(), meta));
    }
}
