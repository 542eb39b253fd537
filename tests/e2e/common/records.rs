//! Commands that record their own start and end, and the sweep that reads the most runs active
//! at once out of those records. What the commands saw is the evidence: the tests never take
//! fleet's word for how many runs overlapped.

use std::collections::BTreeMap;
use std::path::Path;

/// A shell script for a recording command: appends `start <ns> <project> <run_id> <ns-time>` to
/// `rec`, prints `hello run <run_id>`, sleeps `sleep` seconds, appends `end ...`. Appends of such
/// short lines are atomic. The timestamps are taken inside the command's lifetime, so the
/// recorded intervals can only under-state overlap, never invent it.
pub fn recorder_script(rec: &Path, sleep: &str) -> String {
    let rec = rec.display().to_string();
    assert!(!rec.contains('\''), "record path must not contain a quote");
    format!(
        "echo start $FLEET_NAMESPACE $FLEET_PROJECT $FLEET_RUN_ID $(date +%s%N) >> '{rec}'; \
         echo hello run $FLEET_RUN_ID; \
         sleep {sleep}; \
         echo end $FLEET_NAMESPACE $FLEET_PROJECT $FLEET_RUN_ID $(date +%s%N) >> '{rec}'"
    )
}

/// A recording command (see [`recorder_script`]) that records into `<dir>/<rec>` and exits at
/// once, as fleet.toml's `command`.
pub fn quick_recorder(dir: &Path, rec: &str) -> String {
    super::sh(&recorder_script(&dir.join(rec), "0"))
}

/// One line of a record file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// `start` (true) or `end` (false).
    pub start: bool,
    /// `$FLEET_NAMESPACE`: the namespace the run was claimed in.
    pub namespace: String,
    /// `$FLEET_PROJECT`.
    pub project: String,
    /// `$FLEET_RUN_ID`: one run id per attempt.
    pub run_id: i64,
    /// Nanoseconds since the epoch.
    pub at: u128,
}

/// Parses a record file (panics on a malformed line, or if it cannot be read).
pub fn read_records(path: &Path) -> Vec<Record> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read records {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "malformed record line {l:?}");
            Record {
                start: match f[0] {
                    "start" => true,
                    "end" => false,
                    other => panic!("malformed record kind {other:?} in {l:?}"),
                },
                namespace: f[1].to_string(),
                project: f[2].to_string(),
                run_id: f[3]
                    .parse()
                    .unwrap_or_else(|_| panic!("bad run id in {l:?}")),
                at: f[4]
                    .parse()
                    .unwrap_or_else(|_| panic!("bad timestamp in {l:?}")),
            }
        })
        .collect()
}

/// The most runs simultaneously active, from start/end records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overlap {
    /// The most runs active at once, all namespaces together.
    pub global: usize,
    /// Per namespace, the most of its runs active at once.
    pub per_namespace: BTreeMap<String, usize>,
    /// Per project, the most of its runs active at once (one is the rule).
    pub per_project: BTreeMap<String, usize>,
}

/// Sweeps the records in time order (an end at the same instant as a start counts first). A
/// start without an end counts as active until the end of time. Panics if a run id has more than
/// one start or end, or an end without a start.
pub fn max_overlap(records: &[Record]) -> Overlap {
    try_max_overlap(records).unwrap_or_else(|e| panic!("{e}"))
}

/// [`max_overlap`], with `Err` for a run started or ended twice, or ended without a start.
pub fn try_max_overlap(records: &[Record]) -> Result<Overlap, String> {
    let mut starts: BTreeMap<i64, usize> = BTreeMap::new();
    let mut ends: BTreeMap<i64, usize> = BTreeMap::new();
    for r in records {
        *if r.start { &mut starts } else { &mut ends }
            .entry(r.run_id)
            .or_default() += 1;
    }
    for (id, n) in &starts {
        if *n != 1 {
            return Err(format!("run {id} started {n} times: {records:#?}"));
        }
    }
    for (id, n) in &ends {
        if *n != 1 {
            return Err(format!("run {id} ended {n} times: {records:#?}"));
        }
        if !starts.contains_key(id) {
            return Err(format!("run {id} ended without starting: {records:#?}"));
        }
    }
    let mut events: Vec<&Record> = records.iter().collect();
    // Ends (start == false) sort before starts at the same instant.
    events.sort_by_key(|r| (r.at, r.start));
    let mut out = Overlap::default();
    let mut global = 0usize;
    let mut ns: BTreeMap<String, usize> = BTreeMap::new();
    let mut pr: BTreeMap<String, usize> = BTreeMap::new();
    for r in events {
        let n = ns.entry(r.namespace.clone()).or_default();
        let p = pr.entry(r.project.clone()).or_default();
        if r.start {
            global += 1;
            *n += 1;
            *p += 1;
        } else {
            global -= 1;
            *n -= 1;
            *p -= 1;
        }
        out.global = out.global.max(global);
        let m = out.per_namespace.entry(r.namespace.clone()).or_default();
        *m = (*m).max(*n);
        let m = out.per_project.entry(r.project.clone()).or_default();
        *m = (*m).max(*p);
    }
    Ok(out)
}

impl Overlap {
    /// `Err` naming the first cap exceeded: the global cap, a namespace's (`caps`), or one
    /// active run per project.
    pub fn check(&self, global: usize, caps: &[(&str, usize)]) -> Result<(), String> {
        if self.global > global {
            return Err(format!("global cap {global} exceeded: {self:?}"));
        }
        for (ns, cap) in caps {
            let seen = self.per_namespace.get(*ns).copied().unwrap_or(0);
            if seen > *cap {
                return Err(format!(
                    "namespace {ns} cap {cap} exceeded ({seen}): {self:?}"
                ));
            }
        }
        for (p, n) in &self.per_project {
            if *n > 1 {
                return Err(format!("project {p} had {n} runs at once: {self:?}"));
            }
        }
        Ok(())
    }
}
