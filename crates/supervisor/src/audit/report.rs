//! What the audit finds: the [`Report`], its [`Violation`]s by [`ViolationKind`], and how an
//! operator reads a list of run ids in it ([`plain_list`]). Plain data: the checks are in
//! `audit/mod.rs` and `audit/files.rs`.

use store::RunId;

/// The kinds of violation `fleet check` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ViolationKind {
    /// One run (one attempt) was started more than once (a restart that forgot a run in flight,
    /// or a run handed out again while still queued).
    DoubleStart,
    /// A claim took a namespace or the global count over the cap in force at that moment.
    OverCap,
    /// The database records a run as active but no shim holds its lock, none recorded its end,
    /// and nothing of its command's process group runs (else it is [`Report::orphaned`]).
    ActiveWithoutShim,
    /// A live shim holds the lock of a run the database does not hold as active (for that claim).
    ShimWithoutActiveRun,
    /// The running daemon holds a slot for a run that is not active and whose shim has let go
    /// of it: the slot counts against the run's caps, and nothing frees it.
    SlotWithoutActiveRun,
    /// A project has more active runs at once than its `max_parallel` (two, when it runs one at
    /// a time), or two of its active runs hold one seat.
    TwoActiveRuns,
    /// A run reached a terminal status more than once.
    TwoEnds,
    /// Run files (a record slot in `runs/records-<first id>`, `runs/<id>.*`) whose run has no
    /// database row (e.g. a database restored from an older backup). Never a normal state: a
    /// run's row is committed before its files are made, and a prune removes the files before
    /// the row. Fleet never removes such files itself.
    FolderWithoutRun,
    /// A cap seat (shared database) held by a run that is not active, or an active run without
    /// its seat: a seat freed never, or not by the end of its run.
    SeatMismatch,
    /// A terminal run whose exit record (of its last claim) stands for another status, exit
    /// code or signal than the database holds: the recorded end is not the command's real one.
    ExitRecordMismatch,
    /// A run's lock or record file exists but cannot be read, or holds a line that is not a
    /// record: nothing can be vouched for about what it held.
    UnreadableFile,
    /// A run's row holds a value this version cannot read (another program wrote it: arguments
    /// that are not JSON, a number out of range): nothing can be vouched for about that run,
    /// its files included, until the row is fixed.
    UnreadableRow,
}

impl ViolationKind {
    /// The snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::DoubleStart => "double_start",
            ViolationKind::OverCap => "over_cap",
            ViolationKind::ActiveWithoutShim => "active_without_shim",
            ViolationKind::ShimWithoutActiveRun => "shim_without_active_run",
            ViolationKind::SlotWithoutActiveRun => "slot_without_active_run",
            ViolationKind::TwoActiveRuns => "two_active_runs",
            ViolationKind::TwoEnds => "two_ends",
            ViolationKind::FolderWithoutRun => "folder_without_run",
            ViolationKind::SeatMismatch => "seat_mismatch",
            ViolationKind::ExitRecordMismatch => "exit_record_mismatch",
            ViolationKind::UnreadableFile => "unreadable_file",
            ViolationKind::UnreadableRow => "unreadable_row",
        }
    }
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub kind: ViolationKind,
    /// The run concerned, when there is one.
    pub run_id: Option<RunId>,
    /// What was found, in words, naming run ids, projects and numbers.
    pub message: String,
}

/// The audit's findings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Every violation found; empty means every invariant holds.
    pub violations: Vec<Violation>,
    /// Runs read from the database.
    pub runs: usize,
    /// Events read.
    pub events: usize,
    /// Runs whose files in `runs/` were read (any layout).
    pub run_dirs: usize,
    /// Runs that ended while no daemon was there to record it: their exit record waits for the
    /// next daemon (not a violation).
    pub awaiting_finalize: Vec<RunId>,
    /// Active runs whose shim is gone, or whose files no longer show it (removed by hand),
    /// while their command's process group still has processes (run, process group): the
    /// daemon keeps the run active until the group is empty — killing the group first when
    /// the run's files identify it, [`crate::settle::Fate::Orphaned`] — then ends it `lost`
    /// (not a violation: nothing is lost yet, and nothing runs twice).
    pub orphaned: Vec<(RunId, i32)>,
}

impl Report {
    /// True when no invariant is broken.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// `items` as an operator reads them: `3, 4, 7` (never Rust's `[3, 4, 7]`).
pub fn plain_list<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
