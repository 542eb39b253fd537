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
    /// A command, for its own page; a subcommand of one as both words (`fleet man 'hosts
    /// forget'`, or `fleet man hosts forget`).
    command: Vec<String>,
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
/// subcommand with its options (`fleet-hosts-forget(1)` for `hosts forget`). The pages list no
/// `help` command (it has no page: `fleet help X` is `fleet X --help`), and every page another
/// names exists. fleet(1) ends with the files fleet reads beside its command line.
///
/// Errors: an unknown subcommand (exit 2); writing to stdout; rendering (exit 1).
pub fn man(args: &ManArgs, cmd: clap::Command) -> Result<()> {
    let mut cmd = without_help_command(cmd);
    // Usage lines and bin names are filled in only once the command is built.
    cmd.build();
    let path: Vec<&str> = args
        .command
        .iter()
        .flat_map(|word| word.split_whitespace())
        .collect();
    let top = path.is_empty();
    let mut page = cmd;
    for (i, name) in path.iter().enumerate() {
        let Some(found) = page.find_subcommand(name) else {
            return Err(Failure::input(format!(
                "unknown command {:?}: `fleet --help` lists them",
                path[..=i].join(" ")
            )));
        };
        // A subcommand has no version of its own; the page's footer names fleet's.
        page = found
            .clone()
            .display_name(format!("fleet-{}", path[..=i].join("-")))
            .version(env!("CARGO_PKG_VERSION"));
    }
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .map_err(|e| Failure::action(format!("cannot render the man page: {e}")))?;
    let mut text = String::from_utf8_lossy(&out).into_owned();
    if top {
        text.push_str(FILES);
    }
    console::print(&text)
}

/// fleet(1)'s FILES section (roff).
const FILES: &str = r#".SH FILES
.TP
\fI/etc/fleet/fleet.toml\fR
The config the packaged daemon runs on (\fBfleet \-\-config /etc/fleet/fleet.toml daemon\fR); every command finds its config by \fB\-\-config\fR, else \fBFLEET_CONFIG\fR, else \fI./fleet.toml\fR.
.TP
\fI/var/lib/fleet\fR
The packaged config's state directory: the database, every run's files and log, the daemon's lock and socket.
.TP
\fI/usr/bin/fleet\-forksrv\fR
The fork server the daemon starts each run's monitor from; it is looked for beside \fBfleet\fR.
"#;

/// `cmd` and every subcommand under it without the `help` subcommand clap adds, so that no page
/// lists a `fleet-help(1)` or `fleet-hosts-help(1)` that does not exist.
fn without_help_command(cmd: clap::Command) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    let mut cmd = cmd.disable_help_subcommand(true);
    for name in names {
        cmd = cmd.mut_subcommand(name, without_help_command);
    }
    cmd
}
