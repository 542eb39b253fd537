//! A testing knob: a wall clock shifted by an offset, so that the end-to-end tests can run a
//! daemon whose clock is a year ahead and then step it back, as an NTP correction would.
//!
//! Honoured only in a build with the `failpoints` feature (the test build): a production
//! binary never reads the variable, and `offset_ms` is a constant 0 there.
//!
//! `FLEET_TEST_CLOCK_OFFSET_FILE=<path>`: the file holds a signed number of milliseconds added
//! to every reading of [`crate::now_ms`]. It is read again at every reading, so a test steps the
//! clock of a running process by rewriting it. A missing, empty or unreadable file, or one that
//! does not hold an integer, means no offset (a test knob must never stop the clock).

/// The environment variable that names the offset file.
pub const OFFSET_FILE_VAR: &str = "FLEET_TEST_CLOCK_OFFSET_FILE";

/// The offset to add to the real clock, in milliseconds (plain `i64`, as
/// [`Millis`](crate::Millis) is: `model`, which reads the clock, builds on this module, never the
/// other way round).
#[cfg(feature = "failpoints")]
pub(crate) fn offset_ms() -> i64 {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    // The variable is looked up once; the file at every reading.
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    let Some(path) = PATH.get_or_init(|| std::env::var_os(OFFSET_FILE_VAR).map(PathBuf::from))
    else {
        return 0;
    };
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or(0)
}

/// The offset to add to the real clock: always 0 without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
pub(crate) const fn offset_ms() -> i64 {
    0
}
