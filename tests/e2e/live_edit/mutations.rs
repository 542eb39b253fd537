//! The model behind the property test: valid configs as structures, rendered line by line with
//! the key each line sets, and mutations of them (truncations, dropped and duplicated lines,
//! faults at known lines) with what the daemon must make of each: applied, refused naming exactly
//! these lines and keys, or either.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::sample::{select, Index};

/// One project of a [`Model`].
#[derive(Clone, Debug)]
pub struct ModelProject {
    command: &'static str,
    namespace: Option<Index>,
    schedule: Option<&'static str>,
    timeout: Option<&'static str>,
}

/// A valid config, as a structure.
#[derive(Clone, Debug)]
pub struct Model {
    global: i64,
    tick: Option<&'static str>,
    namespaces: Vec<(i64, Option<i64>)>,
    projects: Vec<ModelProject>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Header,
    Cap,
    Weight,
    Duration,
    Command,
    NsRef,
    Cron,
    Junk,
}

#[derive(Clone, Debug)]
struct Line {
    text: String,
    /// Dotted key (for a header: the table).
    key: String,
    kind: Kind,
    /// The key an error on this line must name, when a fault was put here.
    fault: Option<String>,
}

fn line(text: String, key: String, kind: Kind) -> Line {
    Line {
        text,
        key,
        kind,
        fault: None,
    }
}

fn render(m: &Model) -> Vec<Line> {
    let mut out = vec![line(
        format!("max_concurrency = {}", m.global),
        "max_concurrency".into(),
        Kind::Cap,
    )];
    if let Some(t) = m.tick {
        out.push(line(
            format!("tick = \"{t}\""),
            "tick".into(),
            Kind::Duration,
        ));
    }
    for (i, (cap, weight)) in m.namespaces.iter().enumerate() {
        let t = format!("namespaces.ns{i}");
        out.push(line(format!("[{t}]"), t.clone(), Kind::Header));
        out.push(line(
            format!("max_concurrency = {cap}"),
            format!("{t}.max_concurrency"),
            Kind::Cap,
        ));
        if let Some(w) = weight {
            out.push(line(
                format!("weight = {w}"),
                format!("{t}.weight"),
                Kind::Weight,
            ));
        }
    }
    for (i, p) in m.projects.iter().enumerate() {
        let t = format!("projects.p{i}");
        out.push(line(format!("[{t}]"), t.clone(), Kind::Header));
        out.push(line(
            format!("command = {}", p.command),
            format!("{t}.command"),
            Kind::Command,
        ));
        if let (Some(ix), false) = (&p.namespace, m.namespaces.is_empty()) {
            out.push(line(
                format!("namespace = \"ns{}\"", ix.index(m.namespaces.len())),
                format!("{t}.namespace"),
                Kind::NsRef,
            ));
        }
        if let Some(s) = p.schedule {
            out.push(line(
                format!("schedule = \"{s}\""),
                format!("{t}.schedule"),
                Kind::Cron,
            ));
        }
        if let Some(d) = p.timeout {
            out.push(line(
                format!("timeout = \"{d}\""),
                format!("{t}.timeout"),
                Kind::Duration,
            ));
        }
    }
    out
}

fn text_of(lines: &[Line]) -> String {
    lines.iter().map(|l| format!("{}\n", l.text)).collect()
}

/// A fault whose error is known: the line it is on and the key the error names. Every
/// one is a check after parsing (not a TOML syntax error), so several can be combined and
/// each must be reported.
#[derive(Clone, Debug)]
pub enum Fault {
    WrongType(Index),
    UnknownKey(Index),
    BadCron(Index, Index),
    BadCap(Index, i64),
    EmptyCommand(Index, bool),
    UnknownNamespace(Index),
    BadDuration(Index, Index),
}

/// What is done to a rendered [`Model`] before it is fed to the daemon.
#[derive(Clone, Debug)]
pub enum Mutation {
    Keep,
    /// Cut at a byte.
    Truncate(Index),
    /// Keep the first lines only (often valid: fewer tables).
    TruncateLines(Index),
    DropLine(Index),
    /// A duplicated key (a TOML error, on the copy).
    DuplicateKey(Index),
    /// A duplicated table header (a TOML error, on the copy).
    DuplicateTable(Index),
    One(Fault),
    Two(Fault, Fault),
}

/// What the daemon must make of a mutated text.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    Applied,
    /// Refused with exactly these errors: (1-based line, key named).
    Refused(Vec<(usize, String)>),
    /// Either, but a refusal still names a line in every error.
    Either,
}

const BAD_CRONS: &[&str] = &[
    "61 * * * *",
    "* * *",
    "every day",
    "* * * * * * *",
    "* 25 * * *",
    "* * * 13 *",
];
const BAD_DURATIONS: &[&str] = &["10x", "soon", "", "-5s", "0s"];

fn project_span(lines: &[Line], p: usize) -> (usize, usize) {
    let header = lines
        .iter()
        .position(|l| l.kind == Kind::Header && l.key == format!("projects.p{p}"))
        .unwrap();
    let end = lines[header + 1..]
        .iter()
        .position(|l| l.kind == Kind::Header)
        .map_or(lines.len(), |e| header + 1 + e);
    (header, end)
}

/// Sets `field = value` in project `p` (replacing its line or inserting one after the
/// header) and marks it faulty with `fault_key`.
fn set_in_project(
    lines: &mut Vec<Line>,
    p: usize,
    field: &str,
    value: &str,
    kind: Kind,
    fault_key: String,
) {
    let (header, end) = project_span(lines, p);
    let key = format!("projects.p{p}.{field}");
    let mut l = line(format!("{field} = {value}"), key.clone(), kind);
    l.fault = Some(fault_key);
    match (header..end).find(|&i| lines[i].key == key) {
        Some(i) => lines[i] = l,
        None => lines.insert(header + 1, l),
    }
}

fn projects(lines: &[Line]) -> usize {
    lines
        .iter()
        .filter(|l| l.kind == Kind::Header && l.key.starts_with("projects."))
        .count()
}

fn apply_fault(lines: &mut Vec<Line>, fault: &Fault) {
    let np = projects(lines);
    match fault {
        Fault::WrongType(ix) => {
            let typed: Vec<usize> = (0..lines.len())
                .filter(|&i| !matches!(lines[i].kind, Kind::Header | Kind::Junk))
                .collect();
            let i = typed[ix.index(typed.len())];
            let l = &lines[i];
            let field = l.key.rsplit('.').next().unwrap().to_string();
            let bad = match l.kind {
                Kind::Cap | Kind::Weight => "\"7\"",
                Kind::Duration | Kind::NsRef | Kind::Cron => "7",
                Kind::Command => "\"true\"",
                Kind::Header | Kind::Junk => unreachable!(),
            };
            let mut new = line(format!("{field} = {bad}"), l.key.clone(), l.kind);
            new.fault = Some(l.key.clone());
            lines[i] = new;
        }
        Fault::UnknownKey(ix) => {
            // At the top, or right after one of the headers.
            let mut spots: Vec<Option<usize>> = vec![None];
            spots.extend(
                (0..lines.len())
                    .filter(|&i| lines[i].kind == Kind::Header)
                    .map(Some),
            );
            let (at, key) = match spots[ix.index(spots.len())] {
                None => (0, "colour".to_string()),
                Some(h) => (h + 1, format!("{}.colour", lines[h].key)),
            };
            let mut l = line("colour = \"red\"".into(), key.clone(), Kind::Junk);
            l.fault = Some(key);
            lines.insert(at, l);
        }
        Fault::BadCron(p, e) => {
            let p = p.index(np);
            let expr = BAD_CRONS[e.index(BAD_CRONS.len())];
            let key = format!("projects.p{p}.schedule");
            set_in_project(
                lines,
                p,
                "schedule",
                &format!("\"{expr}\""),
                Kind::Cron,
                key,
            );
        }
        Fault::BadCap(ix, v) => {
            let caps: Vec<usize> = (0..lines.len())
                .filter(|&i| matches!(lines[i].kind, Kind::Cap | Kind::Weight))
                .collect();
            let i = caps[ix.index(caps.len())];
            let key = lines[i].key.clone();
            let field = key.rsplit('.').next().unwrap().to_string();
            let mut l = line(format!("{field} = {v}"), key.clone(), lines[i].kind);
            l.fault = Some(key);
            lines[i] = l;
        }
        Fault::EmptyCommand(p, empty_array) => {
            let p = p.index(np);
            let (value, key) = if *empty_array {
                ("[]", format!("projects.p{p}.command"))
            } else {
                ("[\"\", \"x\"]", format!("projects.p{p}.command[0]"))
            };
            set_in_project(lines, p, "command", value, Kind::Command, key);
        }
        Fault::UnknownNamespace(p) => {
            let p = p.index(np);
            let key = format!("projects.p{p}.namespace");
            set_in_project(lines, p, "namespace", "\"nowhere\"", Kind::NsRef, key);
        }
        Fault::BadDuration(p, v) => {
            let p = p.index(np);
            let d = BAD_DURATIONS[v.index(BAD_DURATIONS.len())];
            let key = format!("projects.p{p}.timeout");
            set_in_project(
                lines,
                p,
                "timeout",
                &format!("\"{d}\""),
                Kind::Duration,
                key,
            );
        }
    }
}

fn faults(lines: &[Line]) -> Vec<(usize, String)> {
    lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| l.fault.clone().map(|k| (i + 1, k)))
        .collect()
}

/// The text of `m` with `mutation` applied, and what the daemon must make of it.
pub fn mutate(m: &Model, mutation: &Mutation) -> (String, Expect) {
    let mut lines = render(m);
    let expect = match mutation {
        Mutation::Keep => Expect::Applied,
        Mutation::Truncate(ix) => {
            let text = text_of(&lines);
            let mut cut = ix.index(text.len() + 1);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            return (text[..cut].to_string(), Expect::Either);
        }
        Mutation::TruncateLines(ix) => {
            lines.truncate(ix.index(lines.len() + 1));
            Expect::Either
        }
        Mutation::DropLine(ix) => {
            lines.remove(ix.index(lines.len()));
            Expect::Either
        }
        Mutation::DuplicateKey(ix) => {
            let keyed: Vec<usize> = (0..lines.len())
                .filter(|&i| lines[i].kind != Kind::Header)
                .collect();
            let i = keyed[ix.index(keyed.len())];
            // A duplicate is a TOML syntax error: parsing stops there, so it is the one
            // error reported, whatever else the model's lines carry.
            for l in lines.iter_mut() {
                l.fault = None;
            }
            let mut copy = lines[i].clone();
            copy.fault = Some(copy.key.clone());
            lines.insert(i + 1, copy);
            Expect::Refused(faults(&lines))
        }
        Mutation::DuplicateTable(ix) => {
            let headers: Vec<usize> = (0..lines.len())
                .filter(|&i| lines[i].kind == Kind::Header)
                .collect();
            for l in lines.iter_mut() {
                l.fault = None;
            }
            let mut copy = lines[headers[ix.index(headers.len())]].clone();
            copy.fault = Some(copy.key.clone());
            lines.push(copy);
            Expect::Refused(faults(&lines))
        }
        Mutation::One(a) => {
            apply_fault(&mut lines, a);
            Expect::Refused(faults(&lines))
        }
        Mutation::Two(a, b) => {
            apply_fault(&mut lines, a);
            apply_fault(&mut lines, b);
            // Two faults can collide into a duplicate key (the same unknown key inserted
            // twice under one header): that is a TOML syntax error, the one error reported.
            let dup = (1..lines.len()).find(|&i| {
                lines[i].kind != Kind::Header
                    && lines[..i]
                        .iter()
                        .any(|l| l.kind != Kind::Header && l.key == lines[i].key)
            });
            if let Some(i) = dup {
                for l in lines.iter_mut() {
                    l.fault = None;
                }
                lines[i].fault = Some(lines[i].key.clone());
            }
            Expect::Refused(faults(&lines))
        }
    };
    (text_of(&lines), expect)
}

/// Valid configs: 1-20 global cap, up to 2 namespaces, 1-3 projects.
pub fn model() -> impl Strategy<Value = Model> {
    let project = (
        select(vec![
            "[\"true\"]",
            "[\"sh\", \"-c\", \"exit 0\"]",
            "[\"echo\", \"hello\"]",
        ]),
        proptest::option::of(any::<Index>()),
        proptest::option::of(select(vec!["0 0 1 1 *", "0 30 6 * * 1-5", "15 4 29 2 *"])),
        proptest::option::of(select(vec!["10s", "1h 30m", "500ms"])),
    )
        .prop_map(|(command, namespace, schedule, timeout)| ModelProject {
            command,
            namespace,
            schedule,
            timeout,
        });
    (
        1i64..=20,
        proptest::option::of(select(vec!["1s", "250ms", "2s"])),
        proptest::collection::vec((1i64..=5, proptest::option::of(1i64..=3)), 0..=2),
        proptest::collection::vec(project, 1..=3),
    )
        .prop_map(|(global, tick, namespaces, projects)| Model {
            global,
            tick,
            namespaces,
            projects,
        })
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        2 => any::<Index>().prop_map(Fault::WrongType),
        1 => any::<Index>().prop_map(Fault::UnknownKey),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Fault::BadCron(a, b)),
        2 => (any::<Index>(), -3i64..=0).prop_map(|(a, v)| Fault::BadCap(a, v)),
        1 => (any::<Index>(), any::<bool>()).prop_map(|(a, b)| Fault::EmptyCommand(a, b)),
        1 => any::<Index>().prop_map(Fault::UnknownNamespace),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Fault::BadDuration(a, b)),
    ]
}

/// Mutations, weighted towards single faults.
pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => Just(Mutation::Keep),
        2 => any::<Index>().prop_map(Mutation::Truncate),
        2 => any::<Index>().prop_map(Mutation::TruncateLines),
        2 => any::<Index>().prop_map(Mutation::DropLine),
        1 => any::<Index>().prop_map(Mutation::DuplicateKey),
        1 => any::<Index>().prop_map(Mutation::DuplicateTable),
        6 => fault().prop_map(Mutation::One),
        2 => (fault(), fault()).prop_map(|(a, b)| Mutation::Two(a, b)),
    ]
}

/// A short name for counting: the mutation and its faults' kinds.
pub fn name(m: &Mutation) -> String {
    let kind = |f: &Fault| format!("{f:?}").split('(').next().unwrap().to_string();
    match m {
        Mutation::One(a) => kind(a),
        Mutation::Two(a, b) => format!("{}+{}", kind(a), kind(b)),
        other => format!("{other:?}").split('(').next().unwrap().to_string(),
    }
}

/// An independent reading of the caps a (valid) text declares: (global, name → (cap, weight)).
pub fn caps_of(text: &str) -> (i64, BTreeMap<String, (i64, i64)>) {
    let t: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("the daemon applied a text TOML cannot parse ({e}):\n{text}"));
    let global = t
        .get("max_concurrency")
        .and_then(|v| v.as_integer())
        .unwrap_or(4);
    let mut ns = BTreeMap::new();
    if let Some(table) = t.get("namespaces").and_then(|v| v.as_table()) {
        for (name, v) in table {
            let cap = v
                .get("max_concurrency")
                .and_then(|c| c.as_integer())
                .unwrap_or(-1);
            let weight = v.get("weight").and_then(|c| c.as_integer()).unwrap_or(1);
            ns.insert(name.clone(), (cap, weight));
        }
    }
    (global, ns)
}
