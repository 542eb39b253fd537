//! A forked shim's name in `ps` and `top`, which says which run it is on, or that it is idle.

use crate::sys::process;

/// Names this forked shim in `ps` and `top`: `shim-<run id>` (at most 15 bytes: longer ids
/// are cut), or `shim-idle` between runs; and its command line, which no longer reads as the
/// daemon's or an earlier run's (see `process::set_process_name`). `own_stat`: the shim's own
/// stat, read once when it was forked (its argument area does not move).
pub(super) fn take_name(run_id: Option<i64>, own_stat: Option<&process::OwnStat>) {
    let id = run_id.map_or_else(|| "idle".to_string(), |id| id.to_string());
    let comm = format!("shim-{id}");
    let words: &[&str] = match run_id {
        Some(_) => &["fleet", "shim", "--run-id", &id],
        None => &["fleet", "shim", "--idle"],
    };
    match own_stat {
        // SAFETY: a forked shim has one thread, for its whole life (the shim's rule, `shim/mod.rs`).
        Some(own) => unsafe { process::set_process_name_single_threaded(&comm, words, own) },
        None => process::set_process_name(&comm, words),
    }
}
