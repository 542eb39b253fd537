//! The end-to-end tests: one test binary that drives the real `fleet` binary and real processes
//! (see `common`, the harness every test uses). One module per capability:
//!
//! - `cli`: the command line's own behaviour, whatever the command does (closed pipes, JSON,
//!   usage lines, exec limits, shell completions and man pages);
//! - `runs`: the daemon's main job: caps (`max_parallel`, a host's own capacity), how runs end,
//!   bad input, a run's environment, event-driven drain, `fleet status`;
//! - `enqueue`: a run's own arguments and environment, priorities, `fleet rerun`;
//! - `wait`: `fleet wait` and `fleet enqueue --wait`;
//! - `cancel`: bulk `fleet cancel`;
//! - `pause`: `fleet pause` and `fleet resume`;
//! - `views`: `fleet runs` and `fleet projects`;
//! - `schedules`: cron timetables, missed occurrences, overlap policies, time zones;
//! - `hooks`: failure hooks (`on_failure`);
//! - `restart`: what a restart must keep (adoption, crashes, the one-daemon rule), and the soak;
//! - `failpoints`: a crash at every failpoint of the register, then a clean restart;
//! - `fork_server`: the fork server and the shims it reuses;
//! - `run_story`: the story a run's record and the daemon's log tell;
//! - `live_edit`: editing fleet.toml while the daemon runs;
//! - `retention`: bounded run logs and the pruning of ended runs;
//! - `state_dir`: the state directory as the one source of truth about an install;
//! - `health`: `fleet status`'s exit status, sd_notify, log formats, the systemd unit;
//! - `http`: the daemon's HTTP listener (metrics, health, API, dashboard);
//! - `postgres`: the daemon and every command on a PostgreSQL database;
//! - `hosts`: several hosts on one PostgreSQL database;
//! - `package`: the Debian package installed, run, upgraded and removed for real (only with
//!   FLEET_TEST_DEB_INSTALL=1);
//! - `upgrade`: an install written by the first stable version, read and taken over;
//! - `house`: the layout's own rules (file lengths, no module found by path).
//!
//! Run them with `cargo nextest run --all-features --test e2e` (a module: add `-E
//! 'test(/^restart::/)'`). `--all-features` compiles in the failpoints that the crash tests
//! inject.

mod common;

mod cancel;
mod cli;
mod enqueue;
mod failpoints;
mod fork_server;
mod health;
mod hooks;
mod hosts;
mod house;
mod http;
mod live_edit;
mod package;
mod pause;
mod postgres;
mod restart;
mod retention;
mod run_story;
mod runs;
mod schedules;
mod state_dir;
mod upgrade;
mod views;
mod wait;
