//! `fleet pause NAME` and `fleet resume NAME`: hold and release a project or a namespace.
//!
//! A pause is a row in the database, so it outlives daemon restarts and config reloads. While
//! it holds, none of the project's (or namespace's) queued runs is claimed, and its schedule's
//! occurrences are recorded as skipped; active runs go on. Resume deletes the row and nudges the
//! daemon, so the held runs start at once.

use config::{Config, DEFAULT_NAMESPACE};
use store::HoldKind;
use supervisor::statedir::StateDir;

use crate::console;
use crate::ctx::{self, Ctx, InForce};
use crate::failure::{Failure, Result};

/// What `fleet pause` was asked.
#[derive(clap::Args, Debug)]
pub struct PauseArgs {
    /// A project or namespace, as named in fleet.toml.
    pub name: String,
    #[command(flatten)]
    pub kind: KindFlag,
}

/// What `fleet resume` was asked.
#[derive(clap::Args, Debug)]
pub struct ResumeArgs {
    /// A project or namespace, as named in fleet.toml (or paused before it was removed).
    pub name: String,
    #[command(flatten)]
    pub kind: KindFlag,
}

/// Which kind the operator named: `--project`, `--namespace`, or neither (then the config
/// decides, and a name that is both is refused).
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct KindFlag {
    /// NAME is a project (needed when a namespace has the same name).
    #[arg(long, conflicts_with = "namespace")]
    pub project: bool,
    /// NAME is a namespace (needed when a project has the same name).
    #[arg(long)]
    pub namespace: bool,
}

/// `fleet pause NAME`: records the pause and says what it holds.
///
/// Errors: exit 2 for a name the config does not know (as the kind asked for), or one that is
/// both a project and a namespace without `--project`/`--namespace`; 1 when the database cannot
/// be written.
pub fn pause(ctx: &Ctx, args: &PauseArgs) -> Result<()> {
    let PauseArgs { name, kind: flag } = args;
    let InForce {
        config,
        source,
        store,
    } = ctx.in_force()?;
    let kind = resolve(&config, &source, name, *flag, None)?;
    let store = ctx::store_to_write(store, &config)?;
    let by = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok();
    let now = store::now_ms();
    let new = store
        .pause(kind, name, by.as_deref(), now)
        .map_err(Failure::action)?;
    if new {
        console::println(format_args!(
            "paused {kind} {name}: its queued runs wait and its scheduled occurrences are skipped until `fleet resume {name}`"
        ))
    } else {
        let since = store
            .paused()
            .map_err(Failure::action)?
            .find(kind, name)
            .map(|p| store::rfc3339(p.since))
            .unwrap_or_default();
        console::println(format_args!(
            "{kind} {name} was already paused (since {since})"
        ))
    }
}

/// `fleet resume NAME`: ends the pause and nudges the daemon so held runs start now.
///
/// A name that is paused but no longer in the config (removed since) can still be resumed.
/// Errors: exit 2 for a name neither in the config nor paused, or ambiguous without a flag; 1
/// when the database cannot be written.
pub fn resume(ctx: &Ctx, args: &ResumeArgs) -> Result<()> {
    let ResumeArgs { name, kind: flag } = args;
    let InForce {
        config,
        source,
        store,
    } = ctx.in_force()?;
    let store = ctx::store_to_write(store, &config)?;
    let pauses = store.paused().map_err(Failure::action)?;
    let paused_as = |k: HoldKind| pauses.find(k, name).is_some();
    let kind = resolve(&config, &source, name, *flag, Some(&paused_as))?;
    let was = store.resume(kind, name).map_err(Failure::action)?;
    // A hint only: without a daemon the runs start when one does.
    ctx::nudge(&StateDir::of(&config));
    if was {
        console::println(format_args!("resumed {kind} {name}"))
    } else {
        console::println(format_args!("{kind} {name} was not paused"))
    }
}

/// Which kind `name` is: the flag's, if given (and the name must then be one of that kind in
/// the config, or, for resume, paused as that kind); else whichever the config (or, for
/// resume, the pauses) knows it as.
fn resolve(
    config: &Config,
    source: &str,
    name: &str,
    flag: KindFlag,
    paused_as: Option<&dyn Fn(HoldKind) -> bool>,
) -> Result<HoldKind> {
    let known = |k: HoldKind| {
        let in_config = match k {
            HoldKind::Project => config.projects.contains_key(name),
            HoldKind::Namespace => {
                name == DEFAULT_NAMESPACE || config.namespaces.contains_key(name)
            }
        };
        in_config || paused_as.is_some_and(|p| p(k))
    };
    let asked = match (flag.project, flag.namespace) {
        (true, true) => {
            return Err(Failure::input(
                "--project and --namespace exclude each other",
            ))
        }
        (true, false) => Some(HoldKind::Project),
        (false, true) => Some(HoldKind::Namespace),
        (false, false) => None,
    };
    let where_ = source;
    match asked {
        Some(k) if known(k) => Ok(k),
        Some(k) => Err(Failure::input(format!(
            "unknown {k} {name:?} (not in {where_})"
        ))),
        None => match (known(HoldKind::Project), known(HoldKind::Namespace)) {
            (true, true) => Err(Failure::input(format!(
                "{name:?} is both a project and a namespace: say --project or --namespace"
            ))),
            (true, false) => Ok(HoldKind::Project),
            (false, true) => Ok(HoldKind::Namespace),
            (false, false) => Err(Failure::input(format!(
                "unknown project or namespace {name:?} (not in {where_})"
            ))),
        },
    }
}
