//! Wakeups for long-polling claims without NOTIFY in the enqueue path.
//!
//! A statement that makes jobs claimable calls [`_wake`] (or [`_wake_slot`] when a running job
//! ends, which matters to capped queues; or [`_wake_on_abort`] from a claim, whose rollback
//! hands its jobs back). That only records the queue's hash in a backend-local list. At
//! commit (after the transaction is visible to new snapshots) one transaction callback sets the
//! latch of every backend waiting on one of those queues in this database, and marks the
//! queues in the database's ready filter, from which the maintenance worker sends at most one
//! NOTIFY per queue per pass. A rolled-back transaction wakes nobody (except for handed-back
//! claims). No lock is taken: waiters and committers meet through atomics in shared memory.
//!
//! A waiting claim registers *before* it looks for jobs and resets its latch before each look,
//! so a commit either is visible to the look or sets the latch after it: no lost wakeup. Wakeups
//! are hints: a woken claim re-runs the claim, and polling (`wait` running out) remains the
//! correctness path (field case Q12). Without `shared_preload_libraries = 'jq'` waiting falls back
//! to sleeping `jq.poll_interval` between looks.

use crate::{gucs, shmem};
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{fence, Ordering};

const READY: u8 = 1;
const SLOT: u8 = 2;
const ABORT: u8 = 4;
const CAPPED_BIT: u32 = 1 << 31;

/// One queue this transaction touched: its hash and how many jobs became claimable (`ready`),
/// how many running jobs ended (`slot`) and how many claimed jobs a rollback hands back
/// (`abort`).
#[derive(Clone, Copy, Default)]
struct Pending {
    hash: u32,
    ready: u32,
    slot: u32,
    abort: u32,
}

// Backend-local state. A backend is single-threaded; thread-locals keep that safe in Rust terms.
thread_local! {
    static PENDING: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) };
    static CALLBACK_REGISTERED: Cell<bool> = const { Cell::new(false) };
    /// This backend holds a waiter slot.
    static WAITING: Cell<bool> = const { Cell::new(false) };
    /// This transaction installed jq here: tell the launcher at commit.
    static EXTENSION_CREATED: Cell<bool> = const { Cell::new(false) };
    /// Where the next waiter scan starts, so that wakeups rotate over the waiters of a queue.
    static CURSOR: Cell<usize> = const { Cell::new(0) };
}

/// Asks for the launcher to be told at commit that jq now exists in this database.
pub fn note_extension_created() {
    ensure_callback();
    EXTENSION_CREATED.set(true);
}

fn announce_extension(db: u32) {
    let Some(sh) = shmem::get() else { return };
    if let Some(slot) = sh.slot_for_in(db, shmem::slot_state::NO_EXTENSION) {
        slot.with(|s| {
            s.ext_gen += 1;
            if s.state != shmem::slot_state::RUNNING && s.state != shmem::slot_state::STARTING {
                s.recheck_at = 0;
            }
        });
    }
    sh.wake_launcher();
}

/// FNV-1a of the queue name, top bit cleared (the bit marks capped queues in waiter slots).
pub fn queue_hash(name: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.as_bytes() {
        h ^= *b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h & !CAPPED_BIT
}

fn note(queue: &str, what: u8) {
    if !crate::gucs::WAKEUPS.get() {
        return;  // jq.wakeups = off in this session
    }
    let h = queue_hash(queue);
    ensure_callback();
    PENDING.with_borrow_mut(|pending| {
        let i = match pending.iter().position(|p| p.hash == h) {
            Some(i) => i,
            None => {
                pending.push(Pending { hash: h, ..Default::default() });
                pending.len() - 1
            }
        };
        let e = &mut pending[i];
        match what {
            READY => e.ready = e.ready.saturating_add(1),
            SLOT => e.slot = e.slot.saturating_add(1),
            _ => e.abort = e.abort.saturating_add(1),
        }
    });
}

fn ensure_callback() {
    if !CALLBACK_REGISTERED.get() {
        // SAFETY: registers this library's callbacks once per backend; they stay registered
        // for the backend's life (the library is never unloaded).
        unsafe {
            pg_sys::RegisterXactCallback(Some(xact_callback), std::ptr::null_mut());
            pg_sys::RegisterSubXactCallback(Some(subxact_callback), std::ptr::null_mut());
        }
        CALLBACK_REGISTERED.set(true);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn xact_callback(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    let commit = event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT;
    let abort = event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT;
    if !commit && !abort && event != XACT_EVENT_PREPARE {
        return;
    }
    let pending = PENDING.take();
    stop_waiting();
    if EXTENSION_CREATED.replace(false) && commit {
        // SAFETY: MyDatabaseId is set in a connected backend.
        announce_extension(unsafe { pg_sys::MyDatabaseId }.to_u32());
    }
    if pending.is_empty() || event == XACT_EVENT_PREPARE {
        return;
    }
    let wakes: Vec<Pending> = pending
        .into_iter()
        .map(|p| if commit { Pending { abort: 0, ..p } } else { Pending { hash: p.hash, ready: p.abort, slot: 0, abort: 0 } })
        .filter(|p| p.ready > 0 || p.slot > 0)
        .collect();
    if !wakes.is_empty() {
        wake(&wakes, commit);  // not for a claim's commit (its only entry is `abort`)
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn subxact_callback(
    event: pg_sys::SubXactEvent::Type,
    _my: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event != pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        return;
    }
    // A claim rolled back to a savepoint (or by a plpgsql EXCEPTION block) hands its jobs back
    // now: wake for them at once. The entries stay, so a later top-level abort wakes again
    // (spurious, harmless); the commit of the outer transaction ignores them.
    let wakes: Vec<Pending> = PENDING.with_borrow(|pending| {
        pending
            .iter()
            .filter(|p| p.abort > 0)
            .map(|p| Pending { hash: p.hash, ready: p.abort, slot: 0, abort: 0 })
            .collect()
    });
    if !wakes.is_empty() {
        wake(&wakes, false);
    }
}


/// Sets the latches of waiters of this database: for each entry, as many waiters of its queue
/// as jobs became claimable (`ready`), plus as many waiting on it as a capped queue as running
/// jobs ended (`slot`). Waking every waiter of a queue for each job would make N waiters run N
/// claims per job (a thundering herd that cost producers 100x at 150 waiters). A waiter that
/// was woken but leaves without claiming passes the wakeup on ([`stop_waiting`]). With `notify`,
/// also marks the queues in the database's ready filter for the maintenance worker's NOTIFY.
fn wake(wakes: &[Pending], notify: bool) {
    let Some(sh) = shmem::get() else { return };
    // SAFETY: MyDatabaseId is set in every backend connected to a database.
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    // A completion's commit marks nothing (slot wakes only): no slot lookup on its path.
    if notify && wakes.iter().any(|p| p.ready > 0) {
        if let Some(slot) = sh.slot_of_cached(db) {
            for p in wakes.iter().filter(|p| p.ready > 0) {
                let bit = (p.hash as usize) % shmem::READY_BITS;
                slot.ready[bit / 64].fetch_or(1 << (bit % 64), Ordering::Relaxed);
            }
        }
    }
    // Pairs with the waiter's registration (SeqCst RMW on waiters_active before it looks).
    fence(Ordering::SeqCst);
    if sh.waiters_active.load(Ordering::SeqCst) == 0 {
        return;
    }
    let me = shmem::my_procno();
    let n = shmem::proc_count().min(shmem::MAX_WAITERS);
    if n == 0 {
        return;
    }
    // Budget per entry: (ready wakes left, slot wakes left).
    let mut budget: Vec<(u32, u32, u32)> = wakes.iter().map(|p| (p.hash, p.ready, p.slot)).collect();
    let start = {
        let c = CURSOR.get().wrapping_add(1);
        CURSOR.set(c);
        c % n
    };
    for k in 0..n {
        if budget.iter().all(|b| b.1 == 0 && b.2 == 0) {
            break;
        }
        let i = (start + k) % n;
        let w = &sh.waiters[i];
        if i as i32 == me || w.db.load(Ordering::Acquire) != db {
            continue;
        }
        let count = w.count.load(Ordering::Acquire);
        let all = count == shmem::ALL_QUEUES;
        let hashes: Vec<u32> = if all {
            Vec::new()
        } else {
            w.hashes[..(count as usize).min(shmem::WAITER_QUEUES)].iter().map(|x| x.load(Ordering::Relaxed)).collect()
        };
        let hit = budget.iter_mut().find_map(|b| {
            let (h, ready, slot) = (b.0, &mut b.1, &mut b.2);
            let mine = hashes.iter().find(|x| (**x & !CAPPED_BIT) == h);
            if *ready > 0 && (all || mine.is_some()) {
                *ready -= 1;
                Some(())
            } else if *slot > 0 && mine.is_some_and(|x| x & CAPPED_BIT != 0) {
                *slot -= 1;
                Some(())
            } else {
                None
            }
        });
        if hit.is_some() {
            sh.wakeups.fetch_add(1, Ordering::Relaxed);
            shmem::set_latch_of(i as i32);
        }
    }
}

/// Ends this backend's waiter registration. If its latch is set, a wakeup meant for it may be
/// lost with it (it was woken for a job but is leaving without that job: its wait ran out, it
/// was cancelled, or it claimed something else), so the wakeup is passed on to one other waiter
/// of its first queue (a spurious one at worst).
fn stop_waiting() {
    if !WAITING.replace(false) {
        return;
    }
    let Some(sh) = shmem::get() else { return };
    let me = shmem::my_procno();
    if me < 0 || me as usize >= shmem::MAX_WAITERS {
        return;
    }
    let w = &sh.waiters[me as usize];
    let count = w.count.load(Ordering::Relaxed);
    let first = (count != shmem::ALL_QUEUES && count > 0)
        .then(|| w.hashes[0].load(Ordering::Relaxed) & !CAPPED_BIT);
    w.db.store(0, Ordering::Release);
    sh.waiters_active.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: MyLatch is this backend's latch; reading its flag is what WaitLatch does.
    let latched = unsafe { std::ptr::read_volatile(&(*pg_sys::MyLatch).is_set) } != 0;
    if let (true, Some(h)) = (latched, first) {
        wake(&[Pending { hash: h, ready: 1, slot: 0, abort: 0 }], false);
    }
}

/// `jq._wake(queue text) RETURNS boolean`: at this transaction's commit, wake one more claim
/// waiting on `queue` (a job became claimable; call it once per job). Always returns true, so
/// it can sit in a WHERE clause.
#[pg_extern(volatile, parallel_unsafe)]
fn _wake(queue: &str) -> bool {
    crate::claim_hint::note_ready(queue);
    note(queue, READY);
    true
}

/// `jq._wake_ready(queue text, priority integer, run_at timestamptz) RETURNS boolean`: as
/// [`_wake`] for a job made claimable with that priority and run_at (enqueue, promotion,
/// release, reaping, snooze, a key slot handing over), whose position in claim order is known:
/// at commit it moves the queue's claim-start hint back only if the job sorts before it
/// (src/claim_hint.rs), instead of clearing it. Always true.
#[pg_extern(volatile, parallel_unsafe)]
fn _wake_ready(queue: &str, priority: i32, run_at: pgrx::datum::TimestampWithTimeZone) -> bool {
    crate::claim_hint::note_ready_key(queue, priority, run_at.into_inner());
    note(queue, READY);
    true
}

/// `jq._wake_n(queue text, n integer) RETURNS boolean`: as [`_wake`] for `n` jobs at once (up to
/// `n` waiters are woken; a large `n` wakes them all, e.g. when a queue is resumed).
#[pg_extern(volatile, parallel_unsafe)]
fn _wake_n(queue: &str, n: i32) -> bool {
    if n > 0 {
        note(queue, READY);
        let h = queue_hash(queue);
        // `note` just created or found the entry.
        PENDING.with_borrow_mut(|pending| {
            if let Some(e) = pending.iter_mut().find(|p| p.hash == h) {
                e.ready = e.ready.saturating_add((n - 1) as u32);
            }
        });
    }
    true
}

/// `jq._wake_slot(queue text) RETURNS boolean`: at commit, wake claims waiting on `queue` if
/// it is capped (a running job ended, so a slot may be free). Always true.
#[pg_extern(volatile, parallel_unsafe)]
fn _wake_slot(queue: &str) -> bool {
    note(queue, SLOT);
    true
}

/// `jq._wake_on_abort(queue text) RETURNS boolean`: if this transaction rolls back, wake claims
/// waiting on `queue` (a rolled-back claim hands its jobs back). Always true.
#[pg_extern(volatile, parallel_unsafe)]
fn _wake_on_abort(queue: &str) -> bool {
    note(queue, ABORT);
    true
}

/// `jq._wait_register(queues text[], capped boolean[])`: registers this backend as waiting for
/// jobs in `queues` (capped[i]: also wake when a running job of queues[i] ends) and resets its
/// latch. Lasts until [`_wait_done`] or the end of the transaction. Returns false when waiting
/// falls back to polling (jq not preloaded, or this backend's number is past the table).
#[pg_extern(volatile, parallel_unsafe)]
fn _wait_register(queues: Vec<String>, capped: Vec<bool>) -> bool {
    // SAFETY: MyLatch is this backend's latch.
    unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) };
    let Some(sh) = shmem::get() else { return false };
    let me = shmem::my_procno();
    if me < 0 || me as usize >= shmem::MAX_WAITERS {
        return false;
    }
    ensure_callback();
    if WAITING.get() {
        stop_waiting();
    }
    let w = &sh.waiters[me as usize];
    w.db.store(0, Ordering::Release);
    if queues.len() > shmem::WAITER_QUEUES {
        w.count.store(shmem::ALL_QUEUES, Ordering::Release);
    } else {
        for (i, q) in queues.iter().enumerate() {
            let cap = capped.get(i).copied().unwrap_or(false);
            w.hashes[i].store(queue_hash(q) | if cap { CAPPED_BIT } else { 0 }, Ordering::Relaxed);
        }
        w.count.store(queues.len() as u32, Ordering::Release);
    }
    // SAFETY: MyDatabaseId is set in a connected backend.
    w.db.store(unsafe { pg_sys::MyDatabaseId }.to_u32(), Ordering::Release);
    sh.waiters_active.fetch_add(1, Ordering::SeqCst);
    WAITING.set(true);
    true
}

/// `jq._wait(deadline timestamptz) RETURNS boolean`: sleeps until this backend's latch is set
/// (a wakeup for a registered queue, or an interrupt) or `deadline`; with jq not preloaded,
/// at most `jq.poll_interval`. Resets the latch and checks for interrupts (query cancel works).
/// Returns false if the deadline had already passed, true otherwise.
#[pg_extern(volatile, parallel_unsafe)]
fn _wait(deadline: TimestampWithTimeZone) -> bool {
    // SAFETY: a plain PostgreSQL call.
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    let left_us = i64::from(deadline) - now;
    if left_us <= 0 {
        return false;
    }
    let mut timeout_ms = (left_us + 999) / 1000;
    if !WAITING.get() {
        timeout_ms = timeout_ms.min(gucs::POLL_INTERVAL_MS.get() as i64);
    }
    // SAFETY: plain PostgreSQL calls on this backend's own latch.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            timeout_ms.max(1),
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
        pg_sys::check_for_interrupts!();
    }
    true
}

/// `jq._wait_done()`: ends this backend's waiter registration (also done at transaction end).
#[pg_extern(volatile, parallel_unsafe)]
fn _wait_done() {
    stop_waiting();
}

/// `jq._wakeups()`: how many waiting claims were woken (latches set) since the server started;
/// NULL when jq is not preloaded.
#[pg_extern(volatile, parallel_safe)]
fn _wakeups() -> Option<i64> {
    shmem::get().map(|sh| sh.wakeups.load(Ordering::Relaxed) as i64)
}

/// Takes (and clears) the ready-queue filter of this database: the bit numbers of queues that
/// got claimable jobs since the last call. Used by the maintenance worker for its NOTIFYs.
pub fn take_ready_bits() -> Vec<i32> {
    let Some(sh) = shmem::get() else { return Vec::new() };
    // SAFETY: MyDatabaseId is set in a connected backend.
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let Some(slot) = sh.slot_of(db) else { return Vec::new() };
    let mut bits = Vec::new();
    for (i, word) in slot.ready.iter().enumerate() {
        let mut v = word.swap(0, Ordering::Relaxed);
        while v != 0 {
            let b = v.trailing_zeros() as usize;
            bits.push((i * 64 + b) as i32);
            v &= v - 1;
        }
    }
    bits
}

/// `jq._queue_bit(queue text) RETURNS integer`: the queue's bit in the ready filter.
#[pg_extern(immutable, parallel_safe)]
fn _queue_bit(queue: &str) -> i32 {
    (queue_hash(queue) as usize % shmem::READY_BITS) as i32
}
