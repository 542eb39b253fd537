//! Gated recording commands: a run records its start, waits for its gate, records its end. The
//! test opens the gates, so a run lasts exactly as long as the test wants; the records are what
//! the commands saw, and the caps are checked against them.

use std::path::{Path, PathBuf};

use crate::common::*;

/// The folders and files a gated fleet uses.
pub struct Paths {
    /// The record file (see `common::read_records`).
    pub rec: PathBuf,
    /// The folder of gates: `<run id>` or `all`.
    pub gates: PathBuf,
}

impl Paths {
    /// The paths of a gated fleet in folder `dir`.
    pub fn of(dir: &Path) -> Paths {
        Paths {
            rec: dir.join("records"),
            gates: dir.join("gates"),
        }
    }
}

/// A gated recording command (TOML argv): appends `start <ns> <project> <run> <ns-time>` to the
/// record file, prints `<label> run <run>`, waits for `gates/<run>` or `gates/all`, prints
/// `<label> done <run>`, appends the `end` line and exits 0.
pub fn gated(p: &Paths, label: &str) -> String {
    sh(&format!(
        "echo start $FLEET_NAMESPACE $FLEET_PROJECT $FLEET_RUN_ID $(date +%s%N) >> {rec}; \
         echo {label} run $FLEET_RUN_ID; \
         while [ ! -e {gates}/$FLEET_RUN_ID ] && [ ! -e {gates}/all ]; do sleep 0.05; done; \
         echo {label} done $FLEET_RUN_ID; \
         echo end $FLEET_NAMESPACE $FLEET_PROJECT $FLEET_RUN_ID $(date +%s%N) >> {rec}",
        rec = shell_quote(&p.rec),
        gates = shell_quote(&p.gates),
    ))
}

/// An ungated recording command: records its start and end around printing `<label> run <id>`.
pub fn quick(p: &Paths, label: &str) -> String {
    sh(&format!(
        "echo start $FLEET_NAMESPACE $FLEET_PROJECT $FLEET_RUN_ID $(date +%s%N) >> {rec}; \
         echo {label} run $FLEET_RUN_ID; \
         echo end $FLEET_NAMESPACE $FLEET_PROJECT $FLEET_RUN_ID $(date +%s%N) >> {rec}",
        rec = shell_quote(&p.rec),
    ))
}

/// Lets gated run `id` finish.
pub fn release(p: &Paths, id: i64) {
    std::fs::create_dir_all(&p.gates).unwrap();
    std::fs::write(p.gates.join(id.to_string()), b"").unwrap();
}

/// Lets every gated run finish, now and later.
pub fn release_all(p: &Paths) {
    std::fs::create_dir_all(&p.gates).unwrap();
    std::fs::write(p.gates.join("all"), b"").unwrap();
}

/// The records so far (none when the file does not exist yet).
pub fn records(p: &Paths) -> Vec<Record> {
    if p.rec.exists() {
        read_records(&p.rec)
    } else {
        Vec::new()
    }
}

/// Run `id`'s start record.
pub fn start_of(recs: &[Record], id: i64) -> Option<&Record> {
    recs.iter().find(|r| r.start && r.run_id == id)
}

/// Run `id`'s end record.
pub fn end_of(recs: &[Record], id: i64) -> Option<&Record> {
    recs.iter().find(|r| !r.start && r.run_id == id)
}

/// The start records.
pub fn starts(recs: &[Record]) -> Vec<&Record> {
    recs.iter().filter(|r| r.start).collect()
}

/// Waits until run `id`'s command has recorded its start; returns that record.
pub fn wait_started(f: &Fleet, p: &Paths, id: i64) -> Record {
    let mut rec = None;
    f.wait_until(DEADLINE, &format!("run {id} to record its start"), || {
        rec = start_of(&records(p), id).cloned();
        rec.is_some()
    });
    rec.unwrap()
}

/// Waits until the record file holds `n` start lines; returns the records.
pub fn wait_n_starts(f: &Fleet, p: &Paths, n: usize) -> Vec<Record> {
    let mut recs = Vec::new();
    f.wait_until(DEADLINE, &format!("{n} recorded starts"), || {
        recs = records(p);
        starts(&recs).len() >= n
    });
    recs
}

/// From this instant (nanoseconds): the global cap and the namespace caps in force.
pub type Phase<'a> = (u128, usize, Vec<(&'a str, usize)>);

/// Checks every recorded start against the caps in force at its instant. `phases` are
/// (from, global cap, namespace caps), sorted by `from` (nanoseconds); a start is held to the
/// last phase that began at or before it. Active runs are counted where they were recorded
/// (`$FLEET_NAMESPACE`, the namespace of the claim), including the run starting.
pub fn assert_starts_within_caps(recs: &[Record], phases: &[Phase<'_>]) {
    try_max_overlap(recs).unwrap_or_else(|e| panic!("{e}"));
    for s in starts(recs) {
        let t = s.at;
        let Some((_, global, caps)) = phases.iter().rev().find(|(from, _, _)| *from <= t) else {
            panic!("start before the first phase: {s:?}");
        };
        let active: Vec<&Record> = starts(recs)
            .into_iter()
            .filter(|o| o.at <= t && end_of(recs, o.run_id).is_none_or(|e| e.at > t))
            .collect();
        assert!(
            active.len() <= *global,
            "run {} started with {} runs active, over the global cap {global} then in force: \
             {active:#?}\nall records: {recs:#?}",
            s.run_id,
            active.len()
        );
        for (ns, cap) in caps {
            let n = active.iter().filter(|r| r.namespace == *ns).count();
            assert!(
                n <= *cap,
                "run {} started with {n} runs active in namespace {ns}, over its cap {cap}: \
                 {active:#?}\nall records: {recs:#?}",
                s.run_id
            );
        }
    }
}
