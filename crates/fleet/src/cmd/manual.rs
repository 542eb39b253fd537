//! `fleet completions SHELL` and `fleet man [COMMAND]`: shell completions and man pages, both
//! generated from the clap definitions the parser uses, so neither can drift from the real
//! command line.

use crate::console;
use crate::failure::{Failure, Result};

/// What `fleet completions` was asked.
#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell.
    shell: clap_complete::Shell,
}

/// What `fleet man` was asked.
#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// A command, for its own page.
    command: Option<String>,
}

/// Prints the completion script of the shell asked for, for `cmd` (the whole `fleet` command
/// line).
///
/// Errors: writing to stdout ([`console::stdout_failure`]).
pub fn completions(args: &CompletionsArgs, mut cmd: clap::Command) -> Result<()> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "fleet", &mut out);
    console::print(&String::from_utf8_lossy(&out))
}

/// Prints the man page (section 1, roff) of `cmd`, the whole `fleet` command line — which lists
/// every subcommand — or, with a command asked for, the page `fleet-COMMAND(1)` of that
/// subcommand with its options.
///
/// Errors: an unknown subcommand (exit 2); writing to stdout; rendering (exit 1).
pub fn man(args: &ManArgs, mut cmd: clap::Command) -> Result<()> {
    // Usage lines and bin names are filled in only once the command is built.
    cmd.build();
    let page = match args.command.as_deref() {
        None => cmd,
        Some(name) => {
            let Some(found) = cmd.find_subcommand(name) else {
                return Err(Failure::input(format!(
                    "unknown command {name:?}: `fleet --help` lists them"
                )));
            };
            // A subcommand has no version of its own; the page's footer names fleet's.
            found
                .clone()
                .display_name(format!("fleet-{name}"))
                .version(env!("CARGO_PKG_VERSION"))
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .map_err(|e| Failure::action(format!("cannot render the man page: {e}")))?;
    console::print(&String::from_utf8_lossy(&out))
}
