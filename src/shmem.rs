//! jq's shared memory: the per-database worker table (status, launcher bookkeeping, the
//! ready-queue filter for NOTIFY) and the waiter table of long-polling claims.
//!
//! Allocated only when jq is in `shared_preload_libraries` ([`get`] is `None` otherwise).
//! Everything is fixed-size and made of atomics, so no PostgreSQL lock is needed: the few
//! multi-field records (a database slot's status) are guarded by a tiny spin lock that is never
//! held across a call into PostgreSQL.

use pgrx::pg_sys;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

/// Databases the launcher can track at once.
pub const MAX_DATABASES: usize = 64;
/// Backends (by `pgprocno`) that can wait in `jq.claim(…, wait => …)` with shared-memory
/// wakeups; a backend with a higher number falls back to polling.
pub const MAX_WAITERS: usize = 4096;
/// Queue hashes a waiter records; a claim over more queues is woken by any queue of its database.
pub const WAITER_QUEUES: usize = 16;
/// `Waiter::count` value meaning "every queue of the database".
pub const ALL_QUEUES: u32 = u32::MAX;
/// Bits of the per-database ready-queue filter (by queue hash).
pub const READY_BITS: usize = 1024;
/// Slots of claim-start hints (src/claim_hint.rs), found by a hash of (database, queue).
pub const HINT_SLOTS: usize = 1024;
/// Bytes kept of a worker's last error.
pub const ERROR_BYTES: usize = 480;

/// States of a database slot.
pub mod slot_state {
    /// Unused.
    pub const FREE: u32 = 0;
    /// The launcher registered a worker that has not reported yet.
    pub const STARTING: u32 = 1;
    /// A worker is running passes.
    pub const RUNNING: u32 = 2;
    /// The worker found no jq extension; recheck later.
    pub const NO_EXTENSION: u32 = 3;
    /// `DROP DATABASE` / rename in progress: do not start a worker before `recheck_at`.
    pub const SUSPENDED: u32 = 4;
    /// No background worker slot was free (`max_worker_processes`); retried later.
    pub const NO_SLOT: u32 = 5;
    /// The worker exited (terminated, error); the launcher starts a new one.
    pub const EXITED: u32 = 6;
}

/// Status of the last maintenance pass, copied out under the slot lock.
#[derive(Clone, Copy)]
pub struct SlotStatus {
    pub dboid: u32,
    pub state: u32,
    pub pid: i32,
    pub started_at: i64,
    pub last_pass_at: i64,
    pub passes: u64,
    pub promoted: i64,
    pub reaped: i64,
    pub fired: i64,
    pub pruned: i64,
    pub notified: i64,
    pub pass_ms: f64,
    pub error_at: i64,
    pub recheck_at: i64,
    /// Bumped at the commit of `CREATE EXTENSION jq` in this database.
    pub ext_gen: u64,
    /// The last look found no jq in this database. Kept while a recheck starts a worker (states
    /// STARTING, RUNNING before its check, or NO_SLOT when the worker pool is full), so that
    /// jq.status() goes on saying `no extension` instead of a worker that is starting or down.
    pub without_ext: bool,
    pub error_len: u32,
    pub error: [u8; ERROR_BYTES],
}

impl SlotStatus {
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

impl Default for SlotStatus {
    fn default() -> Self {
        SlotStatus {
            dboid: 0, state: 0, pid: 0, started_at: 0, last_pass_at: 0, passes: 0, promoted: 0,
            reaped: 0, fired: 0, pruned: 0, notified: 0, pass_ms: 0.0, error_at: 0, recheck_at: 0,
            ext_gen: 0, without_ext: false, error_len: 0, error: [0; ERROR_BYTES],
        }
    }
}

/// One database's slot.
#[repr(C)]
pub struct DbSlot {
    status: SpinCell<SlotStatus>,
    /// Queues (by hash bit) that got ready jobs since the worker's last NOTIFY.
    pub ready: [AtomicU64; READY_BITS / 64],
}

impl DbSlot {
    /// Runs `f` on the slot's status under its spin lock. `f` must not call into PostgreSQL.
    pub fn with<R>(&self, f: impl FnOnce(&mut SlotStatus) -> R) -> R {
        self.status.with(f)
    }

    /// Whether the slot is in use for database `dboid`.
    fn holds(&self, dboid: u32) -> bool {
        self.with(|st| st.dboid == dboid && st.state != slot_state::FREE)
    }
}

/// A value behind a tiny spin lock, for records of several fields in shared memory.
#[repr(C)]
pub struct SpinCell<T> {
    lock: AtomicBool,
    value: UnsafeCell<T>,
}

/// Busy-wait rounds before a waiting [`acquire`] yields its CPU.
const SPINS_BEFORE_YIELD: u32 = 100;

/// Takes a spin lock (`flag` false -> true; release by storing false). A waiter spins briefly,
/// then yields its CPU between tries, as PostgreSQL's own s_lock sleeps after its spins
/// (src/backend/storage/lmgr/s_lock.c): with more backends than CPUs the holder may have been
/// preempted inside its few instructions, and a waiter that only spins burns its whole time
/// slice before the holder runs again.
fn acquire(flag: &AtomicBool) {
    let mut spins = 0u32;
    while flag.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        spins = spins.saturating_add(1);
        if spins < SPINS_BEFORE_YIELD {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

impl<T> SpinCell<T> {
    /// Runs `f` on the value under the spin lock ([`acquire`]). `f` must not call into
    /// PostgreSQL.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        acquire(&self.lock);
        // SAFETY: the spin lock gives exclusive access to the cell.
        let r = f(unsafe { &mut *self.value.get() });
        self.lock.store(false, Ordering::Release);
        r
    }
}

/// One backend's long-poll registration, indexed by `pgprocno`.
#[repr(C)]
pub struct Waiter {
    /// Database oid; 0 = not waiting.
    pub db: AtomicU32,
    /// Number of valid `hashes`, or [`ALL_QUEUES`].
    pub count: AtomicU32,
    /// Queue hashes; the top bit marks a capped queue (woken also when a running job ends).
    pub hashes: [AtomicU32; WAITER_QUEUES],
}

/// The whole shared area.
#[repr(C)]
pub struct Shared {
    /// pid of the launcher (0 when none).
    pub launcher_pid: AtomicI32,
    /// pgprocno + 1 of the launcher (0 when none), to set its latch.
    pub launcher_procno: AtomicI32,
    /// Registered waiters; committers skip the scan when 0.
    pub waiters_active: AtomicU32,
    /// Latches set for waiting claims since the server started (observability, tests).
    pub wakeups: AtomicU64,
    /// Slot table guard for allocating/freeing database slots.
    slots_lock: AtomicBool,
    pub dbs: [DbSlot; MAX_DATABASES],
    pub waiters: [Waiter; MAX_WAITERS],
    /// Claim-start hints (all-zero bytes: unused slots).
    pub hints: [SpinCell<crate::claim_hint::Hint>; HINT_SLOTS],
}

// SAFETY: the struct lives in shared memory and is only accessed through atomics or the
// per-slot spin lock.
unsafe impl Sync for Shared {}

static mut SHARED: *const Shared = std::ptr::null();
static mut PREV_REQUEST: pg_sys::shmem_request_hook_type = None;
static mut PREV_STARTUP: pg_sys::shmem_startup_hook_type = None;

/// The shared area, or `None` when jq was not preloaded.
pub fn get() -> Option<&'static Shared> {
    // SAFETY: set once by the startup hook in the postmaster before any backend forks.
    unsafe { SHARED.as_ref() }
}

/// Installs the shared-memory hooks. Call from `_PG_init` while preloading only.
pub fn init() {
    // SAFETY: _PG_init runs single-threaded in the postmaster; we chain the previous hooks.
    unsafe {
        PREV_REQUEST = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request);
        PREV_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn request() {
    // SAFETY: called by the postmaster in the shmem request phase.
    unsafe {
        if let Some(prev) = PREV_REQUEST {
            prev();
        }
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Shared>());
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup() {
    // SAFETY: called by the postmaster (and after a crash-restart) with shared memory being
    // set up; AddinShmemInitLock serialises ShmemInitStruct as PostgreSQL requires. All-zero
    // bytes are a valid initial `Shared` (atomics and plain integers).
    unsafe {
        if let Some(prev) = PREV_STARTUP {
            prev();
        }
        let lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let p = pg_sys::ShmemInitStruct(c"jq".as_ptr(), std::mem::size_of::<Shared>(), &mut found);
        if !found {
            std::ptr::write_bytes(p.cast::<u8>(), 0, std::mem::size_of::<Shared>());
        }
        SHARED = p.cast::<Shared>();
        pg_sys::LWLockRelease(lock);
    }
}

impl Shared {
    /// The hint slot of a (database, queue) tag.
    pub fn hint_slot(&self, tag: u64) -> &SpinCell<crate::claim_hint::Hint> {
        &self.hints[(tag % HINT_SLOTS as u64) as usize]
    }

    /// The slot of database `dboid`, if it has one.
    pub fn slot_of(&self, dboid: u32) -> Option<&DbSlot> {
        self.dbs.iter().find(|s| s.holds(dboid))
    }

    /// As [`Shared::slot_of`], for hot paths (a committing transaction): tries the slot this
    /// backend found last first, so a lookup usually takes one slot's lock, not one per slot
    /// before it.
    pub fn slot_of_cached(&self, dboid: u32) -> Option<&DbSlot> {
        thread_local! {
            static LAST: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
        }
        if let Some(s) = self.dbs.get(LAST.get()).filter(|s| s.holds(dboid)) {
            return Some(s);
        }
        let i = self.dbs.iter().position(|s| s.holds(dboid))?;
        LAST.set(i);
        Some(&self.dbs[i])
    }

    /// The slot of `dboid`, allocating a free one (in state STARTING). None when the table is full.
    pub fn slot_for(&self, dboid: u32) -> Option<&DbSlot> {
        self.slot_for_in(dboid, slot_state::STARTING)
    }

    /// The slot of `dboid`, allocating a free one in `state`. None when the table is full.
    pub fn slot_for_in(&self, dboid: u32, state: u32) -> Option<&DbSlot> {
        acquire(&self.slots_lock);
        let found = self.slot_of(dboid).or_else(|| {
            self.dbs.iter().find(|s| {
                s.with(|st| {
                    if st.state == slot_state::FREE {
                        *st = SlotStatus { dboid, state, ..Default::default() };
                        true
                    } else {
                        false
                    }
                })
            })
        });
        self.slots_lock.store(false, Ordering::Release);
        found
    }

    /// Copies of every used slot.
    pub fn statuses(&self) -> Vec<SlotStatus> {
        self.dbs
            .iter()
            .map(|s| s.with(|st| *st))
            .filter(|st| st.state != slot_state::FREE)
            .collect()
    }

    /// Sets the launcher's latch (wakes it to rescan databases).
    pub fn wake_launcher(&self) {
        let procno = self.launcher_procno.load(Ordering::Acquire);
        if procno > 0 {
            set_latch_of(procno - 1);
        }
    }
}

/// Sets the latch of the process with this `pgprocno`.
pub fn set_latch_of(procno: i32) {
    // SAFETY: ProcGlobal->allProcs has allProcCount entries for the life of the cluster;
    // setting the latch of an exited or reused process only causes a spurious wakeup.
    unsafe {
        let glob = pg_sys::ProcGlobal;
        if glob.is_null() || procno < 0 || procno as u32 >= (*glob).allProcCount {
            return;
        }
        let proc_ = (*glob).allProcs.add(procno as usize);
        pg_sys::SetLatch(&raw mut (*proc_).procLatch);
    }
}

/// This backend's `pgprocno`, or -1.
pub fn my_procno() -> i32 {
    // SAFETY: MyProc is set for every backend and background worker with shared memory access.
    unsafe { if pg_sys::MyProc.is_null() { -1 } else { (*pg_sys::MyProc).pgprocno } }
}

/// Number of PGPROC entries (bounds the waiter scan).
pub fn proc_count() -> usize {
    // SAFETY: see set_latch_of.
    unsafe {
        let glob = pg_sys::ProcGlobal;
        if glob.is_null() { 0 } else { (*glob).allProcCount as usize }
    }
}
