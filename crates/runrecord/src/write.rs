//! Writing a run's files: its records, appended to its slot (or, once the slot is full, to its
//! overflow file), and their removal by prune. Every write needs the run's lock
//! ([`RunLock`]), and makes durable exactly what the crate documentation's table says.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;

use crate::disk::{append_line, naming, open_appending, remove_file, sync_dir};
use crate::files::RunFiles;
use crate::lock::RunLock;
use crate::records::{
    self, now_rfc3339, ExitRecord, Record, RunningRecord, StartedRecord, TombstoneRecord,
};
use crate::slot::{RecordSlot, SLOT_LEN};

impl RunFiles {
    /// Records that claim `token` is dead, durably before it returns, so that recovery may
    /// requeue the run: a tombstone record in the run's slot (or overflow), `fdatasync`ed.
    /// `held` must be this run's lock: a shim checks for tombstones only after taking it, so
    /// writing under it means no shim can be between its check and its start.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_tombstone(&self, held: &RunLock, token: u64) -> io::Result<()> {
        let record = Record::Tombstone(TombstoneRecord {
            token,
            at: now_rfc3339(),
        });
        self.append(held, &record, true)
    }

    /// Appends the `started` record, without waiting for the disk: every reader sees it at once
    /// (the page cache), so its absence proves the command never started for as long as the
    /// machine does not restart (the daemon judges a claim made before a restart without it).
    /// The `exit` record's sync later makes it durable too.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_started(&self, held: &RunLock, record: &StartedRecord) -> io::Result<()> {
        self.append(held, &Record::Started(record.clone()), false)
    }

    /// Appends the `running` record, without any sync: losing it in a machine crash loses
    /// nothing, since the command dies with the machine too.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_running(&self, held: &RunLock, record: &RunningRecord) -> io::Result<()> {
        self.append(held, &Record::Running(record.clone()), false)
    }

    /// Appends the `exit` record and makes it durable (`fdatasync`), before the shim releases
    /// the lock: the real status must survive the shim, and a crash of the machine right after
    /// the command ended.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_exit(&self, held: &RunLock, record: &ExitRecord) -> io::Result<()> {
        self.append(held, &Record::Exit(record.clone()), true)
    }

    /// Appends the first half of `record`'s line and nothing more, as a writer that dies
    /// mid-write leaves it: for the failpoints that crash there. Test builds only.
    ///
    /// Errors: as [`RunFiles::write_exit`].
    #[cfg(feature = "torn-writes")]
    pub fn write_torn(&self, held: &RunLock, record: &Record) -> io::Result<()> {
        held.check(self.id, &self.lock_path())?;
        let line = records::encode(record)?;
        if !self.overflowing(held) {
            return held.slot.append_torn(&held.file, &line);
        }
        let more = open_appending(&self.more_path(), true)?;
        let end = crate::disk::clean_end(&more)?;
        more.write_all_at(&line[..line.len() / 2], end)
    }

    /// Removes every file of the run — its log and a compaction's side file, its overflow —
    /// then empties its record slot, while holding its lock (`held`), so that no shim of the
    /// run can start in between. For prune, which removes only runs that ended. Files already
    /// gone are fine.
    ///
    /// The tombstones stay: a claim recovery gave up may still have a shim on its way, stopped
    /// (frozen, swapped out) before its lock for as long as it took the run to be requeued, end
    /// and be pruned; it must find its tombstone whenever it comes. So a run with any leaves
    /// its record slot holding them alone (made durable), which [`RunFiles::only_tombstones`]
    /// tells from a run's files; one without has its slot emptied (a hole punched).
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn remove(&self, held: RunLock) -> io::Result<()> {
        held.check(self.id, &self.lock_path())?;
        let tombstones = self.records()?.tombstones;
        let log = self.log_path();
        for p in [Self::compacting_path(&log), log, self.more_path()] {
            remove_file(&p)?;
        }
        // Last, still held: a crash before this leaves the slot, and so the run, for the next
        // prune to finish.
        if tombstones.is_empty() {
            held.slot.clear(&held.file)?;
        } else {
            self.keep_only(&held.slot, &held.file, &tombstones)?;
        }
        drop(held);
        Ok(())
    }

    /// Rewrites the record slot to hold tombstones of `tokens` alone, durably (see
    /// [`RunFiles::remove`]). Those that do not fit go on in `<id>.more` (a run given up more
    /// than fifty times). A tombstone is normally the first line of its slot (its claim never
    /// wrote one), so the rewrite puts a line of the same token and length where it was (only
    /// its time is the prune's): a write torn by a crash of the machine cannot lose a token.
    fn keep_only(&self, slot: &RecordSlot, segment: &File, tokens: &[u64]) -> io::Result<()> {
        let mut kept = Vec::new();
        let mut rest = Vec::new();
        for &token in tokens {
            let line = records::encode(&Record::Tombstone(TombstoneRecord {
                token,
                at: now_rfc3339(),
            }))?;
            if rest.is_empty() && kept.len() + line.len() <= SLOT_LEN as usize {
                kept.extend(line);
            } else {
                rest.extend(line);
            }
        }
        kept.resize(SLOT_LEN as usize, 0);
        segment.write_all_at(&kept, slot.range().start)?;
        segment.sync_data()?;
        if !rest.is_empty() {
            let path = self.more_path();
            let more = open_appending(&path, true).map_err(|e| naming(&path, e))?;
            append_line(&more, &rest, true).map_err(|e| naming(&path, e))?;
            sync_dir(&self.runs)?;
        }
        Ok(())
    }

    /// Whether `held`'s records go to `<id>.more` (see [`RunLock::more`]); looks once.
    fn overflowing(&self, held: &RunLock) -> bool {
        if let Some(known) = held.more.get() {
            return known;
        }
        let found = fs::symlink_metadata(self.more_path()).is_ok();
        held.more.set(Some(found));
        found
    }

    /// Appends `record`'s line to the run's slot, or once the slot is full to its overflow
    /// file (made durable in `runs/` when this append creates it); `durable`: then
    /// `fdatasync`s it (which covers a file's new size, so an append is durable without the
    /// `fsync` of its timestamps).
    fn append(&self, held: &RunLock, record: &Record, durable: bool) -> io::Result<()> {
        held.check(self.id, &self.lock_path())?;
        let line = records::encode(record)?;
        if !self.overflowing(held) && held.slot.append(&held.file, &line, durable)? {
            return Ok(());
        }
        let path = self.more_path();
        let created = !path.exists();
        let more = open_appending(&path, true).map_err(|e| naming(&path, e))?;
        held.more.set(Some(true));
        append_line(&more, &line, durable).map_err(|e| naming(&path, e))?;
        if created {
            // A record in a file whose entry could vanish in a crash would prove nothing.
            sync_dir(&self.runs)?;
        }
        Ok(())
    }
}
