//! The daemon's decisions that do not depend on how the world around them is reached: what a
//! claim's run files say became of it ([`reap`], [`recovery`]), which shims a cancel must
//! reach ([`cancel`]), and when a slot may go ([`slots`]). The daemon drives them with real
//! processes, and the simulator (`crates/sim`) with simulated ones; the EVAL's database half
//! is [`crate::daemon::eval_blocking`], which both drive too. Nothing here reads a clock
//! (instants come in as arguments), starts a process or talks to a socket; what a process is
//! doing is asked of the caller. Run files are read and written through [`runrecord`], on
//! whatever directory the caller names.

pub mod cancel;
pub mod reap;
pub mod recovery;
pub mod slots;

/// A run row of project `web` in `status`, claim 7, attempt 1, for unit tests.
#[cfg(test)]
pub(crate) fn test_run(id: store::RunId, status: store::RunStatus) -> store::Run {
    store::Run {
        id,
        project: "web".into(),
        namespace: "default".into(),
        status,
        attempt: 1,
        trigger: store::Trigger::Manual,
        occurrence: None,
        priority: 0,
        not_before: 0,
        enqueued_at: 0,
        started_at: None,
        finished_at: None,
        pid: None,
        exit_code: None,
        signal: None,
        reason: None,
        cancel_requested: false,
        claim_token: 7,
        epoch: Some(1),
        retry_of: None,
        args: Vec::new(),
        env: Vec::new(),
        rerun_of: None,
        hook_of: None,
        seat: 0,
        host: None,
    }
}
