//! The shim's two failpoint macros: a crash, and a failed write of a record. Every name they
//! are given is registered in [`crate::failpoints::SHIM`].

/// A failpoint that simulates a crash: `FAILPOINTS=name=return` aborts the process there,
/// `FAILPOINTS=name=sleep(3000)` delays it. Compiles to nothing without the `failpoints` feature.
/// Every name is registered in [`crate::failpoints::SHIM`].
/// `crash_point!(name, step)` does `step` first (its result ignored), then aborts: a crash in the
/// middle of a write.
macro_rules! crash_point {
    ($name:literal) => {
        fail::fail_point!($name, |_| { std::process::abort() })
    };
    ($name:literal, $step:expr) => {
        fail::fail_point!($name, |_| {
            let _ = $step;
            std::process::abort()
        })
    };
}

/// A failpoint that makes one attempt at writing a record fail as a full disk would:
/// `FAILPOINTS=name=3*return` fails the first three attempts. The shim retries a failed record
/// (see `write::write_retrying`), so this delays the record without losing it. Compiles to
/// nothing without the `failpoints` feature. Every name is registered in
/// [`crate::failpoints::SHIM`].
macro_rules! io_failpoint {
    ($name:literal) => {
        fail::fail_point!($name, |_| {
            Err(io::Error::new(
                io::ErrorKind::StorageFull,
                concat!("failpoint ", $name),
            ))
        })
    };
}

pub(super) use {crash_point, io_failpoint};
