//! Starting the shim of a claimed run, and handing it to `follow`.
//!
//! A shim is forked by the fork server when there is one (no exec: fast), and exec'd as
//! `PROGRAM shim ARGS…` otherwise. Either way it runs in its own session, so it outlives a daemon
//! crash, and it reports on a pipe: a `running PID` line once the command started, then the
//! pipe's end-of-file when it is gone. Reading that pipe is [`super::follow`]'s.
//!
//! The claim is committed before anything here runs, so a crash at any point is found by
//! recovery (no started record ⇒ requeue; started ⇒ adopt or lost). This module must never start
//! a second shim for a claim, even when it cannot tell whether the first one was started, and
//! never writes to the database: what it learns goes back to the loop as events, or into
//! [`Supervised::pending`](super::state::Supervised::pending).

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use config::ProjectConfig;
use store::{Run, RunStatus, Transition};
use tokio::time::Instant;

use super::events::Event;
use super::follow::watch_shim;
use super::reload::wake_within;
use super::state::Daemon;
use crate::shim::forkserver::ForkServerError;
use crate::shim::ShimArgs;
use crate::slots::{ShimIdentity, Slot};

/// Starts the shim of a claimed run, records its slot in the pool and follows it. A shim
/// that cannot be started at all leaves the run a `failed` transition to write (and a nudge,
/// so that the next EVAL writes it at once). `failed`: for a failure hook's run, the run it
/// reports, as read after the claim (`None` if it could not be read).
pub(super) fn spawn(d: &mut Daemon, run: Run, failed: Option<&Run>) {
    fail::fail_point!("daemon-after-claim", |_| std::process::abort());
    let mut slot = Slot {
        run_id: run.id,
        project: run.project.clone(),
        namespace: run.namespace.clone(),
        token: run.claim_token,
        attempt: run.attempt,
        shim: None,
        command_pid: None,
        cancel_sent: false,
        shim_moved_on: false,
        adopted: false,
    };
    let Some(project) = d.config.current.projects.get(&run.project) else {
        // Removed between pack and spawn: cannot happen within one EVAL, but never panic.
        d.runs.pending.push(Transition {
            run_id: run.id,
            token: run.claim_token,
            change: store::Change::Requeue {
                reason: "project not in the config at spawn".into(),
            },
        });
        d.runs.slots.insert(slot);
        return;
    };
    let mut args = shim_args(d.setup.state.root(), &run, project);
    args.log = d.setup.shim_log;
    args.env.extend(super::hook_env::failed_run_env(
        d.setup.state.root(),
        &run,
        failed,
    ));
    let (run_id, token) = (run.id, run.claim_token);
    let events = d.setup.events.clone();
    if let Some(e) = injected_spawn_error() {
        shim_not_started(d, &run, slot, &args, e);
        return;
    }
    match fork_shim(d, &args) {
        Forked::Pid(pid, report) => {
            let shim = crate::sys::process::start_time(pid)
                .map(|start_time| ShimIdentity { pid, start_time });
            fail::fail_point!("daemon-after-spawn", |_| std::process::abort());
            d.holds.spawn_hold.reset();
            d.runs.slots.insert(slot);
            // A reused shim: the slot of its earlier run must let go of it.
            if let Some(shim) = shim {
                d.runs.slots.set_shim(run_id, shim);
            }
            tokio::spawn(watch_shim(report, None, run_id, token, events));
            return;
        }
        Forked::Unknown(report) => {
            // A shim may exist: never start a second one for this claim. The pipe's
            // end-of-file comes when it ends (or at once if none was forked), and the run
            // files then say which (no `started` record: tombstone and requeue).
            d.runs.slots.insert(slot);
            tokio::spawn(watch_shim(report, None, run_id, token, events));
            return;
        }
        Forked::No => {}
    }
    let mut cmd = tokio::process::Command::new(&d.setup.shim_program);
    cmd.arg("shim")
        .args(args.to_args())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(false);
    // The exec'd shim gets the command's environment as its own (never on its command line,
    // which anyone can read).
    for (key, value) in &args.env {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    // Its own session keeps the shim alive through a daemon crash and out of reach of
    // signals sent to the daemon's terminal.
    crate::sys::process::spawn_in_new_session(cmd.as_std_mut());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            shim_not_started(d, &run, slot, &args, e);
            return;
        }
    };
    fail::fail_point!("daemon-after-spawn", |_| std::process::abort());
    d.holds.spawn_hold.reset();
    if let Some(pid) = child.id() {
        let pid = pid as i32;
        slot.shim =
            crate::sys::process::start_time(pid).map(|start_time| ShimIdentity { pid, start_time });
    }
    d.runs.slots.insert(slot);
    match child.stdout.take() {
        Some(stdout) => {
            tokio::spawn(watch_shim(stdout, Some(child), run_id, token, events));
        }
        None => {
            tokio::spawn(watch_shim(
                tokio::io::empty(),
                Some(child),
                run_id,
                token,
                events,
            ));
        }
    }
}

/// The shim of the claimed `run` could not be started (`e`, from the spawn). A lack of a
/// resource on the daemon's side (descriptors, processes, memory: the command never had a
/// chance to start) sends the run back to the queue, same attempt, and holds every claim
/// back for a backoff that doubles up to [`SPAWN_HOLD_MAX`] while spawns keep failing; any
/// other error ends the run `failed` with the reason.
fn shim_not_started(d: &mut Daemon, run: &Run, slot: Slot, args: &ShimArgs, e: std::io::Error) {
    d.report.observed.metrics.spawn_failed();
    let change = if is_resource_shortage(&e) {
        // Runs claimed in the same EVAL fail alike: one failure doubles the wait, not each.
        // So a failure while the hold is still on leaves it as it is, and only one once
        // it is over (or the first) counts.
        let now = Instant::now();
        if d.holds.spawn_hold.is_due(now) {
            d.holds.spawn_hold.fail(now);
        }
        let until = d.holds.spawn_hold.due().unwrap_or(now);
        let wait = d.holds.spawn_hold.wait().unwrap_or_default();
        wake_within(d, until - now);
        tracing::warn!(
            run = run.id,
            project = %run.project,
            error = %e,
            retry_in_ms = wait.as_millis() as u64,
            "could not start the run's shim for lack of a resource: run requeued, same \
             attempt; no run is claimed until the backoff ends"
        );
        store::Change::Requeue {
            reason: format!("the shim could not be started: {e}"),
        }
    } else {
        // The shim's command line carries the command's: an oversized one is the
        // command's fault, and the message names it and the limit, not the shim.
        let reason = if e.kind() == std::io::ErrorKind::ArgumentListTooLong {
            let env = crate::exec_limits::environment_with(args.env.iter().cloned());
            crate::exec_limits::refused_message(&args.argv, &env)
        } else {
            format!(
                "could not start the shim {}: {e}",
                d.setup.shim_program.display()
            )
        };
        tracing::error!(
            run = run.id,
            project = %run.project,
            reason = %reason,
            "spawn failed: the run's shim could not be started"
        );
        store::Change::Finish {
            status: RunStatus::Failed,
            exit_code: None,
            signal: None,
            reason: Some(reason),
            retry: None,
            finished_at: None,
        }
    };
    d.runs.pending.push(Transition {
        run_id: run.id,
        token: run.claim_token,
        change,
    });
    d.runs.slots.insert(slot);
    let _ = d.setup.events.send(Event::Nudge);
}

/// Whether claims may be made: no hold after a resource shortage, or its wait is over.
pub(super) fn spawn_hold_over(d: &Daemon) -> bool {
    d.holds.spawn_hold.is_due(Instant::now())
}

/// While claims are held back, makes sure the loop wakes when the hold ends.
pub(super) fn wake_after_spawn_hold(d: &mut Daemon) {
    let now = Instant::now();
    if let Some(until) = d.holds.spawn_hold.due().filter(|until| *until > now) {
        wake_within(d, until - now);
    }
}

/// Starts the shim through the fork server, if there is one and it still works.
fn fork_shim(d: &mut Daemon, args: &ShimArgs) -> Forked {
    let Some(server) = d.setup.fork_server.clone() else {
        return Forked::No;
    };
    let (read, write) = match crate::sys::files::pipe() {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "could not create a shim's report pipe; exec'ing it");
            return Forked::No;
        }
    };
    let reader = match tokio::net::unix::pipe::Receiver::from_owned_fd(read) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "could not watch a shim's report pipe; exec'ing it");
            return Forked::No;
        }
    };
    match server.spawn(args, write) {
        Ok(pid) => Forked::Pid(pid, reader),
        // Only this request is refused; the server stays in use.
        Err(e @ (ForkServerError::ForkFailed(_) | ForkServerError::TooLarge(_))) => {
            tracing::warn!(run = args.run_id, error = %e, "exec'ing this run's shim instead");
            Forked::No
        }
        Err(e) => {
            tracing::error!(
                run = args.run_id,
                error = %e,
                fork_server = server.pid(),
                "the fork server is gone; every shim from now on is exec'd"
            );
            d.setup.fork_server = None;
            server.kill();
            match e {
                ForkServerError::Unknown(_) => Forked::Unknown(reader),
                _ => Forked::No,
            }
        }
    }
}

/// What the shim of `run` is told: the project's command with the run's arguments after it, cwd,
/// limits, the project's environment with the run's variables on top, plus fleet's variables
/// (`FLEET_RUN_ID`, `FLEET_PROJECT`, `FLEET_NAMESPACE`, `FLEET_ATTEMPT`, `FLEET_OCCURRENCE`).
fn shim_args(state_dir: &Path, run: &Run, project: &ProjectConfig) -> ShimArgs {
    // The service manager's variables are the daemon's, not its runs' (removed first, so that
    // a project's `env` may still set them on purpose).
    let mut env: Vec<(OsString, Option<OsString>)> = super::notify::SERVICE_VARS
        .iter()
        .map(|var| (OsString::from(var), None))
        .collect();
    env.extend(
        project
            .env
            .iter()
            .map(|(k, v)| (OsString::from(k), Some(OsString::from(v)))),
    );
    // The run's own variables (`fleet enqueue --env`) go over the project's, and fleet's own
    // below go over both (names are checked at enqueue; the order keeps them reserved anyway).
    env.extend(
        run.env
            .iter()
            .map(|(k, v)| (OsString::from(k), Some(OsString::from(v)))),
    );
    for (k, v) in [
        ("FLEET_RUN_ID", run.id.to_string()),
        ("FLEET_PROJECT", run.project.clone()),
        ("FLEET_NAMESPACE", run.namespace.clone()),
        ("FLEET_ATTEMPT", run.attempt.to_string()),
    ] {
        env.push((k.into(), Some(v.into())));
    }
    // Removed when absent: the daemon may itself run under a scheduled fleet run.
    env.push((
        "FLEET_OCCURRENCE".into(),
        run.occurrence.map(|o| store::rfc3339(o).into()),
    ));
    ShimArgs {
        state_dir: state_dir.to_path_buf(),
        run_id: run.id,
        token: run.claim_token,
        timeout: project.timeout,
        kill_grace: project.kill_grace,
        cwd: project.cwd.clone(),
        max_log_size: Some(project.retention.max_log_size),
        log: Default::default(),
        // The run's own arguments follow the project's command as argv items: no shell ever
        // reads them.
        argv: project
            .command
            .iter()
            .chain(&run.args)
            .map(OsString::from)
            .collect(),
        env,
    }
}

/// The first hold on claims after a shim could not be started for lack of a resource.
pub(super) const SPAWN_HOLD_MIN: Duration = Duration::from_millis(200);
/// The longest such hold: doubling stops here while spawns keep failing.
pub(super) const SPAWN_HOLD_MAX: Duration = Duration::from_secs(10);

/// Whether a failed shim spawn is the daemon's lack of a resource (file descriptors, processes,
/// memory), which passes, rather than something wrong with what was to be started.
fn is_resource_shortage(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOMEM)
    )
}

/// Under the failpoint `spawn-shim-emfile`, the error a shim spawn fails with (EMFILE, as when
/// the daemon is out of file descriptors) instead of being tried; `None` otherwise.
fn injected_spawn_error() -> Option<std::io::Error> {
    fail::fail_point!("spawn-shim-emfile", |_| Some(
        std::io::Error::from_raw_os_error(libc::EMFILE)
    ));
    None
}

/// How [`fork_shim`](super::spawn::fork_shim) went.
enum Forked {
    /// The fork server forked the shim: its pid, and the pipe it reports on.
    Pid(i32, tokio::net::unix::pipe::Receiver),
    /// The request may or may not have forked a shim: only the pipe is known.
    Unknown(tokio::net::unix::pipe::Receiver),
    /// No shim was forked: exec one.
    No,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::*;

    /// The value the shim's environment gives `key` in the end (the last entry wins, as the
    /// shim applies them in order); `None` when it is removed or never set.
    fn last(args: &ShimArgs, key: &str) -> Option<String> {
        args.env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_ref().map(|v| v.to_string_lossy().into_owned()))
    }

    fn project() -> ProjectConfig {
        let config = config::Config::parse(
            "[projects.web]\ncommand = [\"serve\", \"--port\", \"80\"]\nenv = { MODE = \"prod\", NOTIFY_SOCKET = \"/run/mine\" }\n",
            &PathBuf::from("/etc/fleet/fleet.toml"),
        )
        .expect("valid");
        config.projects["web"].clone()
    }

    /// A run's command is the project's argv with the run's arguments after it, never through a
    /// shell; its environment is the service manager's variables removed, the project's, the
    /// run's over them, and fleet's own over all.
    #[test]
    fn a_runs_argv_and_environment_are_layered() {
        let mut run = crate::core::test_run(9, RunStatus::Starting);
        run.args = vec!["--verbose".into(), "a b; rm -rf /".into()];
        run.env = vec![
            ("MODE".into(), "debug".into()),
            ("FLEET_RUN_ID".into(), "1".into()),
        ];
        let args = shim_args(Path::new("/var/lib/fleet"), &run, &project());
        let argv: Vec<String> = args
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            argv,
            ["serve", "--port", "80", "--verbose", "a b; rm -rf /"]
        );
        assert_eq!(last(&args, "MODE").as_deref(), Some("debug"));
        assert_eq!(last(&args, "FLEET_RUN_ID").as_deref(), Some("9"));
        assert_eq!(last(&args, "FLEET_PROJECT").as_deref(), Some("web"));
        assert_eq!(last(&args, "FLEET_OCCURRENCE"), None);
        // Removed for every run, unless the project sets it on purpose.
        assert_eq!(last(&args, "WATCHDOG_USEC"), None);
        assert_eq!(last(&args, "NOTIFY_SOCKET").as_deref(), Some("/run/mine"));
        let keys: BTreeMap<_, _> = args.env.iter().map(|(k, _)| (k.clone(), ())).collect();
        assert!(keys.contains_key(&OsString::from("JOURNAL_STREAM")));
        assert_eq!((args.run_id, args.token), (9, 7));
    }

    /// Only a lack of the daemon's own resources holds claims back; anything else fails the
    /// run.
    #[test]
    fn only_a_lack_of_resources_holds_claims_back() {
        for errno in [libc::EMFILE, libc::ENFILE, libc::EAGAIN, libc::ENOMEM] {
            assert!(is_resource_shortage(&std::io::Error::from_raw_os_error(
                errno
            )));
        }
        for errno in [libc::ENOENT, libc::EACCES, libc::E2BIG] {
            assert!(!is_resource_shortage(&std::io::Error::from_raw_os_error(
                errno
            )));
        }
    }
}
