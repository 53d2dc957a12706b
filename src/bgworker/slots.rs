//! The database slots in shared memory: one per database with jq that the launcher serves
//! (`jq.max_databases` of them), with its worker's state and last pass (for `jq.status()`), and
//! the ready filter behind `NOTIFY jq_ready` ([`super::notify`]). Databases without jq take no
//! slot ([`super::presence`]).
//!
//! A slot's status is a record under a spin lock ([`SpinCell`]), never held across a call into
//! PostgreSQL; slots are allocated and freed under the table's own spin lock.

use crate::gucs;
use crate::shmem::{Area, ArrayArea, Zeroable};
use crate::spin::{self, SpinCell};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// How many slots there are: `jq.max_databases`, fixed at server start.
pub fn max_databases() -> usize {
    gucs::MAX_DATABASES.get().clamp(1, gucs::MAX_DATABASES_LIMIT) as usize
}
/// Bits of the per-database ready filter (by [`crate::queue_hash::QueueHash::bit`]).
pub const READY_BITS: usize = 1024;
/// Bytes kept of a worker's last error.
pub const ERROR_BYTES: usize = 480;

/// The state of a database slot.
#[repr(u32)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum SlotState {
    /// Unused (all-zero bytes: a new area's slots are free).
    #[default]
    Free = 0,
    /// The launcher registered a worker that has not reported yet.
    Starting = 1,
    /// A worker is running passes.
    Running = 2,
    /// The worker found no jq extension (`DROP EXTENSION`): the launcher frees the slot.
    NoExtension = 3,
    /// `DROP DATABASE` / rename / copy in progress: do not start a worker before `recheck_at`.
    Suspended = 4,
    /// No background worker slot was free (`max_worker_processes`); retried later.
    NoSlot = 5,
    /// The worker exited (terminated, error); the launcher starts a new one.
    Exited = 6,
}

// SAFETY: 0 is `SlotState::Free`.
unsafe impl Zeroable for SlotState {}

/// Status of a database's worker and of its last maintenance pass, copied out under the slot
/// lock. Instants are µs since 2000-01-01 (0 = never).
#[derive(Clone, Copy)]
pub struct SlotStatus {
    pub dboid: u32,
    pub state: SlotState,
    pub pid: i32,
    pub started_at: i64,
    pub last_pass_at: i64,
    pub passes: u64,
    pub promoted: i64,
    pub reaped: i64,
    pub fired: i64,
    pub pruned: i64,
    pub notified: i64,
    /// Duration of the last pass, ms.
    pub pass_ms: f64,
    pub error_at: i64,
    pub recheck_at: i64,
    /// In state NoExtension: [`super::presence::Presence::generation`] read before the check
    /// that found no jq, so that the launcher can tell a finding made stale by a
    /// `CREATE EXTENSION jq` that committed meanwhile.
    pub checked_gen: u64,
    pub error_len: u32,
    pub error: [u8; ERROR_BYTES],
}

// SAFETY: every field is zeroable (SlotState::Free is 0).
unsafe impl Zeroable for SlotStatus {}

impl SlotStatus {
    /// A fresh status of a slot given to `dboid` in `state`.
    pub fn new(dboid: u32, state: SlotState) -> SlotStatus {
        SlotStatus {
            dboid, state, pid: 0, started_at: 0, last_pass_at: 0, passes: 0, promoted: 0,
            reaped: 0, fired: 0, pruned: 0, notified: 0, pass_ms: 0.0, error_at: 0, recheck_at: 0,
            checked_gen: 0, error_len: 0, error: [0; ERROR_BYTES],
        }
    }

    /// The last error as text (None when there was none).
    pub fn error(&self) -> Option<String> {
        (self.error_len > 0)
            .then(|| String::from_utf8_lossy(&self.error[..self.error_len as usize]).into_owned())
    }

    /// Records `msg` as the last error at `at`, cut at a character boundary.
    pub fn set_error(&mut self, msg: &str, at: i64) {
        let mut end = msg.len().min(ERROR_BYTES);
        while !msg.is_char_boundary(end) {
            end -= 1;
        }
        self.error[..end].copy_from_slice(&msg.as_bytes()[..end]);
        self.error_len = end as u32;
        self.error_at = at;
    }
}

/// One database's slot.
#[repr(C)]
pub struct DbSlot {
    status: SpinCell<SlotStatus>,
    /// Queues (by hash bit) that got ready jobs since the worker's last NOTIFY.
    pub ready: [AtomicU64; READY_BITS / 64],
}

// SAFETY: a spin cell of a zeroable record and atomics.
unsafe impl Zeroable for DbSlot {}

impl DbSlot {
    /// Runs `f` on the slot's status under its spin lock. `f` must not call into PostgreSQL.
    pub fn with<R>(&self, f: impl FnOnce(&mut SlotStatus) -> R) -> R {
        self.status.with(f)
    }

    /// Whether the slot is in use for database `dboid`.
    fn holds(&self, dboid: u32) -> bool {
        self.with(|st| st.dboid == dboid && st.state != SlotState::Free)
    }
}

/// The shared area of the background workers (the slots themselves are [`SLOTS`]).
#[repr(C)]
pub struct Databases {
    /// pid of the launcher (0 when none).
    pub launcher_pid: AtomicI32,
    /// pgprocno + 1 of the launcher (0 when none), to set its latch.
    pub launcher_procno: AtomicI32,
    /// Guards allocating and freeing slots.
    slots_lock: AtomicBool,
}

// SAFETY: atomics.
unsafe impl Zeroable for Databases {}

/// The launcher's header; attached by [`super::init`].
pub static AREA: Area<Databases> = Area::new(c"jq databases");

/// The database slots, `jq.max_databases` of them; attached by [`super::init`].
pub static SLOTS: ArrayArea<DbSlot> = ArrayArea::new(c"jq database slots", max_databases);

/// The database slots, or `None` when jq was not preloaded.
pub fn get() -> Option<&'static Databases> {
    SLOTS.get().and(AREA.get())
}

impl Databases {
    /// Every slot, free or used.
    pub fn dbs(&self) -> &'static [DbSlot] {
        SLOTS.get().unwrap_or_default()
    }

    /// The slot of database `dboid`, if it has one.
    pub fn slot_of(&self, dboid: u32) -> Option<&DbSlot> {
        self.dbs().iter().find(|s| s.holds(dboid))
    }

    /// As [`Databases::slot_of`], for hot paths (a committing transaction): tries the slot this
    /// backend found last first, so a lookup usually takes one slot's lock, not one per slot
    /// before it.
    pub fn slot_of_cached(&self, dboid: u32) -> Option<&DbSlot> {
        thread_local! {
            static LAST: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
        }
        let dbs = self.dbs();
        if let Some(s) = dbs.get(LAST.get()).filter(|s| s.holds(dboid)) {
            return Some(s);
        }
        let i = dbs.iter().position(|s| s.holds(dboid))?;
        LAST.set(i);
        Some(&dbs[i])
    }

    /// The slot of `dboid`, allocating a free one (in state Starting). None when the table is full.
    pub fn slot_for(&self, dboid: u32) -> Option<&DbSlot> {
        self.slot_for_in(dboid, SlotState::Starting, 0)
    }

    /// The slot of `dboid`, allocating a free one in `state` with `recheck_at` (set together, so
    /// the launcher never sees the one without the other). None when the table is full.
    pub fn slot_for_in(&self, dboid: u32, state: SlotState, recheck_at: i64) -> Option<&DbSlot> {
        spin::acquire(&self.slots_lock);
        let found = self.slot_of(dboid).or_else(|| {
            self.dbs().iter().find(|s| {
                s.with(|st| {
                    if st.state == SlotState::Free {
                        *st = SlotStatus::new(dboid, state);
                        st.recheck_at = recheck_at;
                        // A freed slot keeps the ready bits its last database set and nobody took;
                        // the new database must not NOTIFY its queues for them (checked by
                        // bgworker::long_poll::a_session_with_wakeups_off_wakes_nobody_and_loses_nothing,
                        // seen failing there without this when its database got a reused slot).
                        for w in &s.ready {
                            w.store(0, Ordering::Relaxed);
                        }
                        true
                    } else {
                        false
                    }
                })
            })
        });
        spin::release(&self.slots_lock);
        found
    }

    /// The used slots by database oid (one scan; for the launcher's pass).
    pub fn held(&self) -> std::collections::HashMap<u32, &'static DbSlot> {
        self.dbs()
            .iter()
            .filter_map(|s| s.with(|st| (st.state != SlotState::Free).then_some(st.dboid)).map(|oid| (oid, s)))
            .collect()
    }

    /// Copies of every used slot.
    pub fn statuses(&self) -> Vec<SlotStatus> {
        self.dbs()
            .iter()
            .map(|s| s.with(|st| *st))
            .filter(|st| st.state != SlotState::Free)
            .collect()
    }

    /// Sets the launcher's latch (wakes it to rescan databases).
    pub fn wake_launcher(&self) {
        let procno = self.launcher_procno.load(Ordering::Acquire);
        if procno > 0 {
            crate::backend::set_latch_of(procno - 1);
        }
    }
}
