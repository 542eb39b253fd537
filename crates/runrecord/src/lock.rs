//! A run's lock: the OFD lock on its record slot, held by its shim for its whole life, and by
//! recovery and prune for the instant they write the run's files. Who may write a run's files
//! is decided here: every write takes a [`RunLock`] and checks that it is that run's.

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::path::Path;

use crate::slot::RecordSlot;

/// A run's lock, released when dropped (or when the holding process dies: the kernel drops it,
/// which is why a free lock proves the shim is gone): the OFD lock on the run's slot.
///
/// Methods that write a run's files take a `&RunLock` to prove the caller holds that run's lock.
#[derive(Debug)]
pub struct RunLock {
    /// Whose lock this is.
    pub(crate) id: i64,
    /// The run's segment, open for writing: the slot's lock is held through it.
    pub(crate) file: File,
    /// The slot locked through `file`.
    pub(crate) slot: RecordSlot,
    /// Whether this run's records go to `<id>.more` (once one did, all later ones must, so
    /// that reading the slot, then the overflow, keeps their order); `None` until looked at.
    pub(crate) more: Cell<Option<bool>>,
}

impl RunLock {
    /// Takes the lock of run `id`, whose slot is `slot` (`wait`: as long as another holder
    /// keeps it), creating `runs/` and the segment when missing. `Ok(None)` when another open
    /// file description holds it (never with `wait`).
    ///
    /// Errors: I/O errors creating or opening the segment, or from the lock.
    pub(crate) fn take(slot: RecordSlot, id: i64, wait: bool) -> io::Result<Option<RunLock>> {
        let file = slot.open(true)?;
        if !slot.lock(&file, wait)? {
            return Ok(None);
        }
        Ok(Some(RunLock {
            id,
            file,
            slot,
            more: Cell::new(None),
        }))
    }

    /// The file this lock's records go to: the run's segment (shared with other runs).
    pub fn path(&self) -> &Path {
        self.slot.segment()
    }

    /// `Ok(())` when this is the lock of run `id` whose segment is `segment`.
    ///
    /// Errors: `InvalidInput`, saying whose lock this is, for any other run's.
    pub(crate) fn check(&self, id: i64, segment: &Path) -> io::Result<()> {
        if self.id == id && self.path() == segment {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "writing run {id}'s files requires its lock, but the lock given is run {}'s ({})",
                self.id,
                self.path().display()
            ),
        ))
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Closing the file would release the lock anyway; unlocking explicitly first keeps
        // the release at this exact point even if a descriptor were ever shared.
        let _ = self.slot.unlock(&self.file);
    }
}
