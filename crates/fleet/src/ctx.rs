//! Where a command finds what it works on: fleet.toml (`--config`), the state directory
//! (`--state-dir`, else the one the config names), the store in it, and the daemon.
//!
//! A command asks [`Ctx`] for what it needs, in the order it needs it, and for nothing more;
//! the file is read once, when first asked for:
//!
//! - [`Ctx::config`]: a valid config, or exit 2 — for the commands that act on the config
//!   (`daemon`, `enqueue`, `rerun`, `pause`, `resume`, `projects`, `prune`, `hosts forget`);
//! - [`Ctx::loaded`] and [`Ctx::config_if_valid`]: the file as read, valid or not — for
//!   `validate`, and for the commands that only check a name against the config;
//! - [`Ctx::state`]: the state directory, for the commands that read it, each saying what a
//!   fleet.toml with errors does to it ([`IfInvalid`]); with `--state-dir` no valid file is
//!   needed at all;
//! - [`Ctx::in_force`]: the config a name is checked against (on a shared database, the
//!   published one);
//! - [`open_existing`] (and [`open_existing_for_status`]) and [`open_or_create`]: the store; [`nudge`]: a hint to the daemon.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use config::{Config, ConfigErrors, DatabaseUrl};
use store::{Store, StoreError};
use supervisor::control::{self, Nudge};
use supervisor::statedir::{StateDir, StateDirError};

use crate::console;
use crate::failure::{Failure, Result};

/// What a command is told by the options every command takes, and what it reads from them.
pub struct Ctx {
    /// `--config` (else `$FLEET_CONFIG`, else `./fleet.toml`) as given: messages name it so.
    path: PathBuf,
    /// `--state-dir`, made absolute: read instead of the state directory the config names.
    state_dir: Option<PathBuf>,
    /// The file as read, once a command asked for it.
    loaded: OnceCell<std::result::Result<Config, ConfigErrors>>,
}

/// What a command that reads the state directory does when fleet.toml has errors (and no
/// `--state-dir` says where the directory is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfInvalid {
    /// Refuse: exit 2, naming the file's first error. For the commands that need something
    /// from the file besides where the state is (`projects`: its projects; `prune`: the
    /// retention keys; `check`: each project's `max_parallel`; `hosts forget`: the retry
    /// policy).
    Refuse,
    /// Go on with the state directory and database the file still names (its `state_dir` and
    /// `database` keys read on their own, when they can be known for certain); the command
    /// has the daemon record the errors (`reload`, which then exits 2). Refused as above when
    /// those keys do not read.
    Read,
    /// As [`IfInvalid::Read`], and say on stderr that the file is invalid (its first error):
    /// for the commands that need nothing from the file but where the state is (`status`,
    /// `runs`, `logs`, `wait`, `cancel`, `hosts`), which a typo in an unrelated key must not
    /// stop — `fleet status` is a health check.
    Warn,
}

/// The config a command checks a project's or a namespace's name against, from
/// [`Ctx::in_force`].
pub struct InForce {
    /// On a shared database, the published config, the one every daemon applies, with this
    /// host's own keys from the file; with SQLite, nothing published yet, or a published text
    /// this build cannot read, the file's.
    pub config: Config,
    /// The words that name it in a message: the file's path, or `the config in force, version
    /// N published by host H`.
    pub source: String,
    /// The store opened to read the published config, for the command to go on with (`None`
    /// with SQLite, where nothing is opened: a name the file does not know is refused before
    /// any state directory is made); see [`store_to_write`].
    pub store: Option<Store>,
}

impl Ctx {
    /// The context of a command given `path` (`--config`) and `state_dir` (`--state-dir`).
    /// Nothing is read yet: `fleet daemon` forks its fork server before the config is read.
    pub fn new(path: PathBuf, state_dir: Option<PathBuf>) -> Ctx {
        Ctx {
            path,
            state_dir: state_dir.map(|dir| std::path::absolute(&dir).unwrap_or(dir)),
            loaded: OnceCell::new(),
        }
    }

    /// fleet.toml's path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// fleet.toml as read: the config, or every error in it.
    pub fn loaded(&self) -> std::result::Result<&Config, &ConfigErrors> {
        self.loaded
            .get_or_init(|| Config::load(&self.path))
            .as_ref()
    }

    /// The config; an invalid one is exit 2.
    pub fn config(&self) -> Result<&Config> {
        self.loaded().map_err(Failure::invalid_config)
    }

    /// The config, owned (the daemon keeps it for its whole life); an invalid one is exit 2.
    pub fn into_config(self) -> Result<Config> {
        let loaded = match self.loaded.into_inner() {
            Some(loaded) => loaded,
            None => Config::load(&self.path),
        };
        loaded.map_err(|errors| Failure::invalid_config(&errors))
    }

    /// The config when it is valid: for a command that only checks a name against it, or
    /// reads a key when it can.
    pub fn config_if_valid(&self) -> Option<&Config> {
        self.loaded().ok()
    }

    /// The state directory: `--state-dir` if given, else the config's, its store where the
    /// config's `database` says. A `--state-dir` must exist (exit 2): a mistyped one would
    /// read as an install with no runs, and `fleet check` would vouch for it.
    ///
    /// Errors: an invalid fleet.toml, as `if_invalid` says; a `database` key that cannot be
    /// made out, or a `--state-dir` whose daemon used a shared database given with a file that
    /// cannot be read (exit 2).
    pub fn state(&self, if_invalid: IfInvalid) -> Result<StateDir> {
        if let Some(dir) = &self.state_dir {
            if !dir.exists() {
                return Err(Failure::input(format!(
                    "--state-dir {}: no such directory",
                    dir.display()
                )));
            }
            // The folder is overridden, never the database: the config's `database` still holds.
            let database = self.database()?;
            if database.is_none() {
                self.shared_needs_config(dir)?;
            }
            return Ok(StateDir::new(dir).with_database(database));
        }
        let errors = match self.loaded() {
            Ok(config) => return Ok(StateDir::of(config)),
            Err(errors) => errors,
        };
        if if_invalid == IfInvalid::Refuse {
            return Err(Failure::invalid_config(errors));
        }
        let (Some(dir), Some(database)) = (
            Config::state_dir_of(&self.path),
            Config::database_of(&self.path),
        ) else {
            return Err(Failure::invalid_config(errors));
        };
        let state = StateDir::new(dir).with_database(database);
        // A `database` key that does not read as one (mistyped) would leave SQLite here, and
        // an install with no runs: the state directory's lock says what its daemon used.
        if state.database().is_none() {
            if let Some(target) = state.recorded_database() {
                return Err(Failure::input(format!(
                    "{}: its daemon used the shared database {target}, but {} does not say so any more ({}); fix that file",
                    state.root().display(),
                    self.path.display(),
                    first_error(errors)
                )));
            }
        }
        if if_invalid == IfInvalid::Warn {
            console::eprintln(format_args!(
                "fleet: warning: {}; going on with the state directory it names, {}",
                first_error(errors),
                state.root().display()
            ));
        }
        Ok(state)
    }

    /// The `database` of the file even when the rest of it is invalid; exit 2 when it names
    /// one that cannot be made out (reading SQLite instead would show the wrong install).
    fn database(&self) -> Result<Option<DatabaseUrl>> {
        match Config::database_of(&self.path) {
            Some(db) => Ok(db),
            None => Ok(self.config()?.database.clone()),
        }
    }

    /// A `--state-dir` (`dir`) whose last daemon used a shared database, given with a config
    /// that cannot be read (missing, or invalid with no `database` key that reads): only the
    /// config says how to connect, and reading the folder alone would show an install with no
    /// runs — which `fleet check` would vouch for. Exit 2, naming the database and the file.
    fn shared_needs_config(&self, dir: &Path) -> Result<()> {
        if self.loaded().is_ok() {
            return Ok(());
        }
        match StateDir::new(dir).recorded_database() {
            None => Ok(()),
            Some(target) => Err(Failure::input(format!(
                "--state-dir {}: its daemon used the shared database {target}, and only fleet.toml says how to connect to it, but {} cannot be read; fix that file (or point --config at a copy that names the database)",
                dir.display(),
                self.path.display()
            ))),
        }
    }

    /// The config a command that names projects or namespaces (`enqueue`, `rerun`, `pause`,
    /// `resume`, a bulk `cancel`) checks them against (see [`InForce`]): a host whose file lags
    /// behind, or runs ahead of, the fleet's would otherwise refuse a project every daemon
    /// knows, or queue one no daemon will start.
    ///
    /// Errors: an invalid config (exit 2); the database cannot be opened or read (exit 1).
    pub fn in_force(&self) -> Result<InForce> {
        let config = self.config()?.clone();
        let file = self.path.display().to_string();
        if config.database.is_none() {
            return Ok(InForce {
                config,
                source: file,
                store: None,
            });
        }
        let store = open_or_create(&config)?;
        let Some(published) = store.published_config().map_err(Failure::action)? else {
            return Ok(InForce {
                config,
                source: file,
                store: Some(store),
            });
        };
        Ok(
            match Config::published_here(&published.text, &self.path, &config) {
                Ok(in_force) => InForce {
                    config: in_force,
                    source: format!(
                        "the config in force, version {} published by host {}",
                        published.version, published.published_by
                    ),
                    store: Some(store),
                },
                Err(_) => InForce {
                    config,
                    source: file,
                    store: Some(store),
                },
            },
        )
    }
}

/// The first error of an invalid file, and how many more (as [`Failure::invalid_config`] says
/// it).
fn first_error(errors: &ConfigErrors) -> String {
    Failure::invalid_config(errors).message
}

/// `config` as the commands acting on this host's state directory (`state`) see it: named after
/// the host its daemon last ran as ([`StateDir::recorded_host`]), which a `fleet daemon --host
/// NAME` makes differ from the file's `host` (or the hostname).
pub fn as_this_host(config: &Config, state: &StateDir) -> Config {
    match state.recorded_host() {
        Some(host) => config.clone().for_host(host),
        None => config.clone(),
    }
}

/// Opens the existing store of a state directory for reading only (nothing is created or
/// written there); `None` when nothing was ever queued (and only then: one this user may not
/// read is an error).
///
/// A state directory group or others may write into is read all the same, with a warning on
/// stderr: reading it hands nothing to them, and the operator gets to see what is there (the
/// commands that write, and the daemon, refuse it).
///
/// On PostgreSQL the store is opened read-only too ([`StateDir::open_existing_store`]): a role
/// with only `SELECT` on fleet's tables may read, and a schema that is not this build's (older,
/// newer, or not created yet) is an error (exit 2) saying what brings it up to date.
pub fn open_existing(state: &StateDir) -> Result<Option<Store>> {
    warn_if_exposed(state);
    let store = state.open_existing_store().map_err(Failure::state_dir)?;
    Ok(store.map(follow_clock))
}

/// `store`, once this process follows its database's clock (see [`store::db_clock`]): on a
/// shared database every time a command writes or judges by (a heartbeat's age, a delay, a
/// forget's refusal) is the database's, as the daemons' are, whatever this machine's clock
/// says. One query; a clock that cannot be read leaves the local one (the command's own reads
/// then say what is wrong with the database).
fn follow_clock(store: Store) -> Store {
    if let Ok(Some(reading)) = store.database_clock() {
        store::db_clock::follow(reading);
    }
    store
}

/// [`open_existing`] for `fleet status`, the health check: a shared database in which no
/// daemon has created fleet's schema yet reads as one where nothing was ever queued (`None`),
/// as a missing fleet.db does, so that a daemon on its way up is reported as such (it creates
/// the schema once it holds the state directory) rather than as an unusable database.
pub fn open_existing_for_status(state: &StateDir) -> Result<Option<Store>> {
    warn_if_exposed(state);
    match state.open_existing_store() {
        Err(StateDirError::Store(StoreError::SchemaBehind { found: 0, .. })) => Ok(None),
        other => Ok(other.map_err(Failure::state_dir)?.map(follow_clock)),
    }
}

/// Says on stderr that group or others may write into `state` (read all the same).
fn warn_if_exposed(state: &StateDir) {
    if let Some(exposed) = state.exposed() {
        console::eprintln(format_args!(
            "fleet: warning: state directory {exposed} (read all the same; the daemon and the commands that write refuse it)"
        ));
    }
}

/// Opens the existing store of a state directory for a command that changes what is in it
/// (`cancel`, `rerun`, `prune`, `hosts forget`); `None` when nothing was ever queued (nothing
/// is created then).
pub fn open_existing_to_write(state: &StateDir) -> Result<Option<Store>> {
    let store = state
        .open_existing_store_to_write()
        .map_err(Failure::state_dir)?;
    Ok(store.map(follow_clock))
}

/// Opens the store of `config` for a command that writes (creating the state directory if
/// needed).
pub fn open_or_create(config: &Config) -> Result<Store> {
    StateDir::of(config)
        .open_store()
        .map(follow_clock)
        .map_err(Failure::state_dir)
}

/// The store a command that writes goes on with: `opened` ([`InForce::store`]) when there is
/// one, else [`open_or_create`].
pub fn store_to_write(opened: Option<Store>, config: &Config) -> Result<Store> {
    match opened {
        Some(store) => Ok(store),
        None => open_or_create(config),
    }
}

/// Tells the daemon of `state` to evaluate now; whether one took the hint. Only a hint: a
/// write in the database stands whether or not a daemon runs, and the next one to start reads
/// it.
pub fn nudge(state: &StateDir) -> bool {
    control::send(&state.socket_path(), Nudge::Eval).is_ok()
}
