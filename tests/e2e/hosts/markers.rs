//! The commands' own evidence across hosts: each run's command appends `start`, then `end` (or
//! `killed`, from its TERM trap) lines to one shared file, and this module replays them. The
//! replay proves what fleet must never do fleet-wide: start a run twice, or have more commands
//! running at once than a cap allows (globally, per namespace, per host, one per project).
//!
//! It never takes fleet's word for anything: the lines are written by the commands, on the wall
//! clock, inside the commands' lifetimes, so an interval can only under-state how long a run held
//! its seats, never invent an overlap.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::common::shell_quote;

/// The variable each test daemon carries (and passes on to its commands) naming its host, so
/// that a command can say where it ran.
pub const HOST_VAR: &str = "E2E_HOST";

/// A `sh -c` script that marks its start in `markers`, runs `body`, and marks its end. A SIGTERM
/// (the group signal fleet sends to end a command) writes `killed` instead of `end`. Each line
/// is one `echo >>` (an `O_APPEND` write of a short line: lines from many processes never mix).
pub fn marked(markers: &Path, body: &str) -> String {
    let m = shell_quote(markers);
    let who = format!("$FLEET_RUN_ID ${HOST_VAR} $FLEET_NAMESPACE $FLEET_PROJECT");
    format!(
        "trap \"echo killed {who} \\$(date +%s%N) >> {m}; exit 143\" TERM; \
         echo start {who} $(date +%s%N) >> {m}; \
         {body}; \
         echo end {who} $(date +%s%N) >> {m}"
    )
}

/// A command body that waits until `<dir>/go-<run id>` or `<dir>/go-all` exists, polling every
/// 50 ms (so a SIGTERM is acted on within that).
pub fn gated(dir: &Path) -> String {
    let d = dir.display().to_string();
    assert!(!d.contains('\''), "gate folder must not contain a quote");
    format!("while [ ! -e '{d}/go-'$FLEET_RUN_ID ] && [ ! -e '{d}/go-all' ]; do sleep 0.05; done")
}

/// Opens the gate of run `id` (see [`gated`]).
pub fn release(dir: &Path, id: i64) {
    std::fs::write(dir.join(format!("go-{id}")), "").expect("write a gate file");
}

/// Opens every gate (see [`gated`]).
pub fn release_all(dir: &Path) {
    std::fs::write(dir.join("go-all"), "").expect("write the gate file");
}

/// How a marker line ends or begins a command's interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// The command began.
    Start,
    /// The command finished its body.
    End,
    /// The command got SIGTERM and left.
    Killed,
}

/// One marker line.
#[derive(Clone, Debug)]
pub struct Marker {
    pub kind: Kind,
    pub run: i64,
    pub host: String,
    pub namespace: String,
    pub project: String,
    /// Wall-clock nanoseconds since the epoch.
    pub at: u128,
}

/// Reads the marker file (empty when no command wrote yet). Panics on a malformed line: a
/// command that lost its environment (no host) is a harness bug to see, not to skip.
pub fn read_markers(path: &Path) -> Vec<Marker> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("{}: {e}", path.display()),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 6, "malformed marker line {l:?}");
            Marker {
                kind: match f[0] {
                    "start" => Kind::Start,
                    "end" => Kind::End,
                    "killed" => Kind::Killed,
                    other => panic!("malformed marker kind {other:?} in {l:?}"),
                },
                run: f[1]
                    .parse()
                    .unwrap_or_else(|_| panic!("bad run id in {l:?}")),
                host: f[2].to_string(),
                namespace: f[3].to_string(),
                project: f[4].to_string(),
                at: f[5].parse().unwrap_or_else(|_| panic!("bad time in {l:?}")),
            }
        })
        .collect()
}

/// One stretch of time a command was running (and could do work): from its start (or a thaw)
/// to its end (or a freeze); `to == None`: still running when the markers were read.
#[derive(Clone, Debug)]
pub struct Interval {
    pub run: i64,
    pub host: String,
    pub namespace: String,
    pub project: String,
    pub from: u128,
    pub to: Option<u128>,
    /// Whether `from` is the run's own start (not the end of a freeze).
    pub first: bool,
}

/// The commands' intervals, one per run. `Err` when a run started twice (on one host or two),
/// ended twice, ended without a start, ended on another host than it started, or ended before
/// it started.
pub fn intervals(markers: &[Marker]) -> Result<Vec<Interval>, String> {
    let mut starts: BTreeMap<i64, &Marker> = BTreeMap::new();
    let mut ends: BTreeMap<i64, &Marker> = BTreeMap::new();
    for m in markers {
        let seen = if m.kind == Kind::Start {
            &mut starts
        } else {
            &mut ends
        };
        if let Some(first) = seen.insert(m.run, m) {
            return Err(format!(
                "run {} has two {:?} lines: {first:?} and {m:?}",
                m.run, m.kind
            ));
        }
    }
    let mut out = Vec::new();
    for (run, s) in &starts {
        let to = match ends.remove(run) {
            None => None,
            Some(e) if e.host != s.host => {
                return Err(format!(
                    "run {run} started on {} but ended on {}",
                    s.host, e.host
                ))
            }
            Some(e) if e.at < s.at => return Err(format!("run {run} ended before it started")),
            Some(e) => Some(e.at),
        };
        out.push(Interval {
            run: *run,
            host: s.host.clone(),
            namespace: s.namespace.clone(),
            project: s.project.clone(),
            from: s.at,
            to,
            first: true,
        });
    }
    if let Some((run, e)) = ends.into_iter().next() {
        return Err(format!("run {run} ended without a start: {e:?}"));
    }
    Ok(out)
}

/// The intervals with host `host`'s stretch `[from, to)` cut out: its processes were all stopped
/// (SIGSTOP) then, so its commands could do nothing.
pub fn without_freeze(intervals: &[Interval], host: &str, from: u128, to: u128) -> Vec<Interval> {
    let mut out = Vec::new();
    for i in intervals {
        let covers = i.host == host && i.from < to && i.to.is_none_or(|end| end > from);
        if !covers {
            out.push(i.clone());
            continue;
        }
        if i.from < from {
            out.push(Interval {
                to: Some(from),
                ..i.clone()
            });
        }
        if i.to.is_none_or(|end| end > to) {
            out.push(Interval {
                from: to,
                first: false,
                ..i.clone()
            });
        }
    }
    out
}

/// The most commands running at once, by scope, and where the runs ran.
#[derive(Clone, Debug, Default)]
pub struct Peaks {
    pub global: usize,
    pub namespace: BTreeMap<String, usize>,
    pub host: BTreeMap<String, usize>,
    pub project: BTreeMap<String, usize>,
    /// Runs per host (each run once).
    pub runs_by_host: BTreeMap<String, BTreeSet<i64>>,
}

/// The caps the markers are checked against.
pub struct Limits<'a> {
    pub global: usize,
    pub namespaces: &'a [(&'a str, usize)],
    pub hosts: &'a [(&'a str, usize)],
}

/// Sweeps the intervals in time order (an end at the same instant as a start counts first).
pub fn peaks(intervals: &[Interval]) -> Peaks {
    // (time, 0 = end / 1 = start, index)
    let mut events: Vec<(u128, u8, usize)> = Vec::new();
    for (n, i) in intervals.iter().enumerate() {
        events.push((i.from, 1, n));
        if let Some(to) = i.to {
            events.push((to, 0, n));
        }
    }
    events.sort();
    let mut p = Peaks::default();
    let mut global = 0usize;
    let mut ns: BTreeMap<&str, usize> = BTreeMap::new();
    let mut host: BTreeMap<&str, usize> = BTreeMap::new();
    let mut project: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, kind, n) in events {
        let i = &intervals[n];
        p.runs_by_host
            .entry(i.host.clone())
            .or_default()
            .insert(i.run);
        let counters = [
            (&mut ns, i.namespace.as_str(), &mut p.namespace),
            (&mut host, i.host.as_str(), &mut p.host),
            (&mut project, i.project.as_str(), &mut p.project),
        ];
        for (now, key, peak) in counters {
            let c = now.entry(key).or_default();
            if kind == 1 {
                *c += 1;
            } else {
                *c -= 1;
            }
            let m = peak.entry(key.to_string()).or_default();
            *m = (*m).max(*c);
        }
        if kind == 1 {
            global += 1;
        } else {
            global -= 1;
        }
        p.global = p.global.max(global);
    }
    p
}

impl Peaks {
    /// `Err` naming the first cap the commands exceeded: global, a namespace's, a host's, or one
    /// active run per project.
    pub fn check(&self, limits: &Limits) -> Result<(), String> {
        if self.global > limits.global {
            return Err(format!("global cap {} exceeded: {self:?}", limits.global));
        }
        for (scope, caps, peaks) in [
            ("namespace", limits.namespaces, &self.namespace),
            ("host", limits.hosts, &self.host),
        ] {
            for (name, cap) in caps {
                let seen = peaks.get(*name).copied().unwrap_or(0);
                if seen > *cap {
                    return Err(format!(
                        "{scope} {name} cap {cap} exceeded ({seen} at once): {self:?}"
                    ));
                }
            }
        }
        if let Some((p, n)) = self.project.iter().find(|(_, n)| **n > 1) {
            return Err(format!("project {p} had {n} runs at once: {self:?}"));
        }
        Ok(())
    }
}

/// The runs of namespace `ns` whose command started after `after` (ns since the epoch) while
/// `cap` or more other commands of the namespace were running: each a start the cap in force
/// since `after` forbade. Commands' intervals lie inside their runs' seat tenure (started
/// after the claim, ended before the release), so a legal claim never shows up here.
pub fn starts_over_cap(intervals: &[Interval], ns: &str, cap: usize, after: u128) -> Vec<String> {
    let of_ns: Vec<&Interval> = intervals.iter().filter(|i| i.namespace == ns).collect();
    let mut out = Vec::new();
    for s in of_ns.iter().filter(|i| i.first && i.from > after) {
        let others: Vec<i64> = of_ns
            .iter()
            .filter(|o| o.run != s.run && o.from < s.from && o.to.is_none_or(|t| t > s.from))
            .map(|o| o.run)
            .collect();
        if others.len() >= cap {
            out.push(format!(
                "run {} started on {} while runs {others:?} of namespace {ns} ran (cap {cap})",
                s.run, s.host
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(kind: Kind, run: i64, host: &str, at: u128) -> Marker {
        Marker {
            kind,
            run,
            host: host.into(),
            namespace: "n".into(),
            project: format!("p{run}"),
            at,
        }
    }

    #[test]
    fn a_second_start_on_another_host_is_a_double_start() {
        let e = intervals(&[m(Kind::Start, 1, "a", 1), m(Kind::Start, 1, "b", 2)]).unwrap_err();
        assert!(e.contains("two Start"), "{e}");
    }

    #[test]
    fn overlaps_are_counted_per_scope_and_a_freeze_is_cut_out() {
        let ms = [
            m(Kind::Start, 1, "b", 10),
            m(Kind::Start, 2, "a", 20),
            m(Kind::End, 2, "a", 30),
            m(Kind::Killed, 1, "b", 50),
        ];
        let all = intervals(&ms).unwrap();
        assert_eq!(peaks(&all).global, 2);
        let cut = without_freeze(&all, "b", 15, 40);
        let p = peaks(&cut);
        assert_eq!(p.global, 1, "{cut:?}");
        assert!(p
            .check(&Limits {
                global: 1,
                namespaces: &[("n", 1)],
                hosts: &[],
            })
            .is_ok());
        assert_eq!(starts_over_cap(&all, "n", 1, 0).len(), 1);
        assert!(starts_over_cap(&cut, "n", 1, 0).is_empty());
    }
}
