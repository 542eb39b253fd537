//! The slot pool: the runs this daemon process is supervising right now, in memory.
//!
//! The pool is one of the two sources of "what is running"; the other is the DB running set.
//! After a restart the pool starts empty, which is exactly why no packer may ever read it alone:
//! the EVAL hands the packers `packer::merge(pool, db)`, every run either one holds (a packer
//! that counted the pool alone would, on the first EVAL after a restart, see nothing running and
//! start again a run the database still records as in flight; one that counted the database
//! alone would free the seat of a command whose row another program wrote over).
//!
//! This module only keeps records: it never reads the database, and signals a shim only through
//! [`ShimIdentity::signal`], which checks first that the pid is still that shim.

use std::collections::BTreeMap;
use std::sync::Mutex;

use packer::{ActiveRun, RunningSet};
use store::RunId;

use crate::sys::process;
use crate::sys::signals::Signal;

/// How to recognise a run's shim before signalling it: its pid plus the start time the kernel
/// gives that pid (field 22 of /proc/PID/stat), so a recycled pid is never signalled by mistake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShimIdentity {
    /// The shim's pid.
    pub pid: i32,
    /// Its start time in clock ticks since boot.
    pub start_time: u64,
}

impl ShimIdentity {
    /// True while that exact process is alive (same pid, same start time) and has not ended: a
    /// shim that exited and waits to be reaped (a zombie) keeps both, but is dead.
    pub fn is_alive(&self) -> bool {
        process::is_running(self.pid, self.start_time)
    }

    /// Sends `signal` to the shim if, and only if, it is still the same process. Returns
    /// whether it was sent.
    pub fn signal(&self, signal: Signal) -> bool {
        if !self.is_alive() {
            return false;
        }
        // The pid was just checked to be our shim (same start time).
        process::signal_process(self.pid, signal).is_ok()
    }
}

/// One run this daemon supervises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The run.
    pub run_id: RunId,
    /// Its project.
    pub project: String,
    /// The namespace it counts against (where it started).
    pub namespace: String,
    /// The claim this slot belongs to.
    pub token: u64,
    /// The run's attempt (1-based), for the retry decision.
    pub attempt: u32,
    /// The shim, once spawned (or found, for an adopted run).
    pub shim: Option<ShimIdentity>,
    /// The command's pid (its process group's id) once its shim reported it, or as the
    /// database recorded it for an adopted run: what identifies the command's group when the
    /// run's files no longer can ([`crate::settle::leftover_group`]).
    pub command_pid: Option<i32>,
    /// SIGTERM was sent for a cancel request.
    pub cancel_sent: bool,
    /// The run's shim has moved on to another run ([`SlotPool::set_shim`]): this run is over
    /// (its end recorded in its files, its lock released, its command gone), whether or not
    /// the daemon has read that yet. `shim` is then `None` and stays so: the process is
    /// another run's now, and is never signalled for this one.
    pub shim_moved_on: bool,
    /// Found alive at startup rather than spawned by this process.
    pub adopted: bool,
}

/// The slots, keyed by run id.
#[derive(Debug, Default)]
pub struct SlotPool {
    slots: BTreeMap<RunId, Slot>,
}

impl SlotPool {
    /// An empty pool (as after every restart).
    pub fn new() -> SlotPool {
        SlotPool::default()
    }

    /// Adds or replaces a slot.
    pub fn insert(&mut self, slot: Slot) {
        self.slots.insert(slot.run_id, slot);
    }

    /// Removes a run's slot (once its end or requeue is recorded in the database).
    pub fn remove(&mut self, run_id: RunId) -> Option<Slot> {
        self.slots.remove(&run_id)
    }

    /// Records that `shim` supervises `run_id` (spawned for it, or found in its files).
    ///
    /// A forked shim, once its run is over, may be handed another one (the fork server reuses
    /// it: `shim::idle`), and the pid the daemon learns for the new run is then one it already
    /// holds for the old run's slot. Every other slot naming the same process is done with it,
    /// so it forgets the shim and is marked [`Slot::shim_moved_on`]: a cancel of the old run,
    /// or a stop of it after `fleet hosts forget`, must never reach the new run's command.
    pub fn set_shim(&mut self, run_id: RunId, shim: ShimIdentity) {
        for slot in self.slots.values_mut() {
            if slot.run_id != run_id && slot.shim == Some(shim) {
                slot.shim = None;
                slot.shim_moved_on = true;
            }
        }
        if let Some(slot) = self.slots.get_mut(&run_id) {
            slot.shim = Some(shim);
        }
    }

    /// The slot of `run_id`, if this daemon supervises it.
    pub fn get(&self, run_id: RunId) -> Option<&Slot> {
        self.slots.get(&run_id)
    }

    /// The slot of a run, mutably.
    pub fn get_mut(&mut self, run_id: RunId) -> Option<&mut Slot> {
        self.slots.get_mut(&run_id)
    }

    /// The slots, by run id.
    pub fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.slots.values()
    }

    /// The pool as a running set, for `packer::merge`.
    pub fn running_set(&self) -> RunningSet {
        self.slots
            .values()
            .map(|s| ActiveRun {
                run_id: s.run_id,
                project: s.project.clone(),
                namespace: s.namespace.clone(),
                // The pool's runs are this host's by definition.
                host: None,
            })
            .collect()
    }
}

/// A slot of project `p` in namespace `default`, claim `run_id`, attempt 1, for unit tests.
#[cfg(test)]
pub(crate) fn test_slot(run_id: RunId, shim: Option<ShimIdentity>) -> Slot {
    Slot {
        run_id,
        project: "p".into(),
        namespace: "default".into(),
        token: run_id as u64,
        attempt: 1,
        shim,
        command_pid: None,
        cancel_sent: false,
        shim_moved_on: false,
        adopted: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shim that exited but is not reaped yet (a zombie) is dead: it is neither alive nor
    /// signalled.
    #[test]
    fn a_zombie_shim_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let shim = ShimIdentity {
            pid,
            start_time: process::start_time(pid).expect("the child's start time"),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !process::has_exited(pid).unwrap() {
            assert!(std::time::Instant::now() < deadline, "`true` never ended");
            std::thread::yield_now();
        }
        assert!(!shim.is_alive());
        assert!(!shim.signal(Signal::SIGTERM));
        child.wait().unwrap();
    }

    fn slot(run_id: RunId, shim: Option<ShimIdentity>) -> Slot {
        test_slot(run_id, shim)
    }

    /// A reused shim named for a new run is taken from every other slot: nothing signals it
    /// for the run it ended.
    #[test]
    fn a_shim_named_for_a_new_run_leaves_the_slot_of_its_old_one() {
        let p = ShimIdentity {
            pid: 41,
            start_time: 7,
        };
        let other = ShimIdentity {
            pid: 42,
            start_time: 7,
        };
        let mut pool = SlotPool::new();
        pool.insert(slot(1, Some(p)));
        pool.insert(slot(2, Some(other)));
        pool.insert(slot(3, None));
        pool.set_shim(3, p);
        let get = |pool: &mut SlotPool, id| pool.get_mut(id).unwrap().clone();
        assert_eq!(get(&mut pool, 1).shim, None);
        assert!(get(&mut pool, 1).shim_moved_on);
        assert_eq!(get(&mut pool, 2).shim, Some(other));
        assert!(!get(&mut pool, 2).shim_moved_on);
        assert_eq!(get(&mut pool, 3).shim, Some(p));
        assert!(!get(&mut pool, 3).shim_moved_on);
    }
}

/// The runs whose slots the pool held at the loop's last turn, as the loop publishes them for
/// the control socket to answer with (`slots`, which `fleet check` asks): the listener never
/// touches the pool itself.
#[derive(Debug, Default)]
pub struct PublishedSlots {
    ids: Mutex<Vec<RunId>>,
}

impl PublishedSlots {
    /// Replaces what is published with the runs of `pool`.
    pub fn publish(&self, pool: &SlotPool) {
        let ids = pool.slots.keys().copied().collect();
        *self.ids.lock().unwrap_or_else(|e| e.into_inner()) = ids;
    }

    /// The runs published last, by id.
    pub fn ids(&self) -> Vec<RunId> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
