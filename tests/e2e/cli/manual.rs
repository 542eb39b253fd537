//! `fleet completions` and `fleet man`: generated from the parser's own definitions, they name
//! every command `fleet --help` lists.

use crate::common::*;

/// The commands `fleet --help` lists (its "Commands:" section), `help` aside.
fn commands(f: &Fleet) -> Vec<String> {
    let help = f.cmd_ok(&["--help"]);
    let names: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    for expected in ["enqueue", "wait", "rerun", "cancel", "completions", "man"] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
    names
}

#[test]
fn completions_name_every_command() {
    let f = Fleet::new("");
    let names = commands(&f);
    for shell in ["bash", "zsh", "fish"] {
        let out = f.cmd_ok(&["completions", shell]);
        for name in &names {
            // Where each shell's script declares a subcommand (a bare name would also match
            // an option or a description).
            let declared = match shell {
                "bash" => format!("fleet,{name})"),
                "zsh" => format!("'{name}:"),
                _ => format!("-a \"{name}\""),
            };
            assert!(out.contains(&declared), "{shell}: {name} missing");
        }
        // fish names long options without their dashes (`-l wait`).
        let flag = |f: &str| match shell {
            "fish" => format!("-l {f}"),
            _ => format!("--{f}"),
        };
        for f in ["wait", "queued", "env"] {
            assert!(out.contains(&flag(f)), "{shell}: {f} missing");
        }
    }
    assert_eq!(f.cmd(&["completions", "tcsh"]).code(), Some(2));
}

#[test]
fn the_man_pages_render_every_command() {
    let f = Fleet::new("");
    let page = f.cmd_ok(&["man"]);
    assert!(page.contains(".TH fleet 1"), "{page}");
    assert!(page.contains(".SH SUBCOMMANDS"), "{page}");
    for name in commands(&f) {
        assert!(
            page.contains(&format!("fleet\\-{name}(1)")),
            "{name} missing:\n{page}"
        );
        let sub = f.cmd_ok(&["man", &name]);
        assert!(
            sub.contains(&format!(".TH fleet-{name} 1")),
            "{name}:\n{sub}"
        );
    }
    let enqueue = f.cmd_ok(&["man", "enqueue"]);
    for flag in ["wait", "timeout", "env", "priority"] {
        assert!(
            enqueue.contains(&format!("\\-\\-{flag}")),
            "--{flag}:\n{enqueue}"
        );
    }
    assert_eq!(f.cmd(&["man", "nope"]).code(), Some(2));
    assert_eq!(f.cmd(&["man", "hosts nope"]).code(), Some(2));

    // Every page a page names exists, nested commands' included (`hosts forget`, with its
    // --force), and none names a `help` page, which there is not.
    let mut pages = vec![String::new()];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(path) = pages.pop() {
        let text = f.cmd_ok(&["man", &path]);
        let own = if path.is_empty() {
            "fleet".to_string()
        } else {
            format!("fleet-{}", path.replace(' ', "-"))
        };
        assert!(text.contains(&format!(".TH {own} 1")), "{path:?}:\n{text}");
        for named in text.split("fleet\\-").skip(1) {
            // A page's name, not a pattern like fleet-COMMAND(1) in the prose.
            let Some((name, _)) = named.split_once("(1)") else {
                continue;
            };
            if !name
                .replace("\\-", "")
                .bytes()
                .all(|b| b.is_ascii_lowercase())
            {
                continue;
            }
            assert!(!name.ends_with("help"), "{own} names a help page: {name}");
            let sub = name.replace("\\-", " ");
            if seen.insert(sub.clone()) {
                pages.push(sub);
            }
        }
    }
    assert!(seen.contains("hosts forget"), "{seen:?}");
    assert!(f
        .cmd_ok(&["man", "hosts", "forget"])
        .contains("\\-\\-force"));
    assert!(
        page.contains(".SH FILES") && page.contains("/etc/fleet/fleet.toml"),
        "{page}"
    );

    // The NAME line says "fleet" once, and --config names the whole rule, not a bare default
    // that would hide $FLEET_CONFIG.
    let name = page
        .lines()
        .skip_while(|l| *l != ".SH NAME")
        .nth(1)
        .unwrap_or_default();
    assert!(name.starts_with("fleet \\- "), "{name}");
    assert_eq!(name.matches("fleet").count(), 1, "{name}");
    let help = f.cmd_ok(&["--help"]);
    for text in [&page, &help] {
        assert!(!text.contains("[default: fleet.toml]"), "{text}");
        assert!(text.contains("$FLEET_CONFIG, else ./fleet.toml"), "{text}");
    }
}

/// docs/REFERENCE.md's command table has a row for every command `fleet --help` lists, and the README shows the
/// operator's verbs and how to install completions and man pages.
#[test]
fn every_command_is_documented() {
    let f = Fleet::new("");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let (reference, readme) = (read("docs/REFERENCE.md"), read("README.md"));
    for name in commands(&f) {
        assert!(
            // A row of the command table.
            reference.contains(&format!("| `fleet {name}")),
            "docs/REFERENCE.md has no row for `fleet {name}`"
        );
    }
    for shown in [
        "fleet enqueue --wait",
        "fleet wait",
        "fleet rerun",
        "fleet cancel --all",
        "--queued",
        "-- 2",
        "--env",
        "accept_args = true",
        "--priority",
        "fleet completions bash",
        "fleet completions zsh",
        "fleet completions fish",
        "fleet man",
    ] {
        assert!(readme.contains(shown), "README.md does not show {shown:?}");
    }
}
