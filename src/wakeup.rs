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
use std::sync::atomic::{fence, Ordering};

const READY: u8 = 1;
const SLOT: u8 = 2;
const ABORT: u8 = 4;
const CAPPED_BIT: u32 = 1 << 31;

/// Queue hashes this transaction touched, with what it did to them.
static mut PENDING: Vec<(u32, u8)> = Vec::new();
static mut CALLBACK_REGISTERED: bool = false;
/// This backend holds a waiter slot.
static mut WAITING: bool = false;
/// This transaction installed jq here: tell the launcher at commit.
static mut EXTENSION_CREATED: bool = false;

/// Asks for the launcher to be told at commit that jq now exists in this database.
pub fn note_extension_created() {
    // SAFETY: single-threaded backend.
    unsafe {
        ensure_callback();
        EXTENSION_CREATED = true;
    }
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
    let h = queue_hash(queue);
    // SAFETY: backends are single-threaded; PENDING is only touched from SQL calls and the
    // transaction callback of this backend.
    unsafe {
        ensure_callback();
        let pending = &mut *(&raw mut PENDING);
        match pending.iter_mut().find(|(ph, _)| *ph == h) {
            Some(entry) => entry.1 |= what,
            None => pending.push((h, what)),
        }
    }
}

unsafe fn ensure_callback() {
    // SAFETY: single-threaded backend; the callback stays registered for the backend's life.
    unsafe {
        if !CALLBACK_REGISTERED {
            pg_sys::RegisterXactCallback(Some(xact_callback), std::ptr::null_mut());
            CALLBACK_REGISTERED = true;
        }
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
    // SAFETY: single-threaded backend (see `note`).
    let pending = unsafe { std::mem::take(&mut *(&raw mut PENDING)) };
    stop_waiting();
    // SAFETY: single-threaded backend; MyDatabaseId is set in a connected backend.
    unsafe {
        if EXTENSION_CREATED {
            EXTENSION_CREATED = false;
            if commit {
                announce_extension(pg_sys::MyDatabaseId.to_u32());
            }
        }
    }
    if pending.is_empty() || event == XACT_EVENT_PREPARE {
        return;
    }
    let Some(sh) = shmem::get() else { return };
    // SAFETY: MyDatabaseId is set in every backend connected to a database.
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let wakes: Vec<(u32, u8)> = pending
        .into_iter()
        .filter_map(|(h, w)| {
            let w = if commit { w & (READY | SLOT) } else { if w & ABORT != 0 { READY } else { 0 } };
            (w != 0).then_some((h, w))
        })
        .collect();
    if wakes.is_empty() {
        return;
    }
    if let Some(slot) = sh.slot_of(db) {
        for (h, w) in &wakes {
            if w & READY != 0 {
                let bit = (*h as usize) % shmem::READY_BITS;
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
    for (i, w) in sh.waiters[..n].iter().enumerate() {
        if w.db.load(Ordering::Acquire) != db || i as i32 == me {
            continue;
        }
        let count = w.count.load(Ordering::Acquire);
        let hit = count == shmem::ALL_QUEUES
            || w.hashes[..(count as usize).min(shmem::WAITER_QUEUES)].iter().any(|x| {
                let x = x.load(Ordering::Relaxed);
                wakes.iter().any(|(h, what)| {
                    (x & !CAPPED_BIT) == *h && (what & READY != 0 || x & CAPPED_BIT != 0)
                })
            });
        if hit {
            shmem::set_latch_of(i as i32);
        }
    }
}

fn stop_waiting() {
    // SAFETY: single-threaded backend.
    unsafe {
        if !WAITING {
            return;
        }
        WAITING = false;
    }
    if let Some(sh) = shmem::get() {
        let me = shmem::my_procno();
        if me >= 0 && (me as usize) < shmem::MAX_WAITERS {
            sh.waiters[me as usize].db.store(0, Ordering::Release);
            sh.waiters_active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// `jq._wake(queue text) RETURNS boolean`: at this transaction's commit, wake claims waiting on
/// `queue` (jobs became claimable). Always returns true, so it can sit in a WHERE clause.
#[pg_extern(volatile, parallel_unsafe)]
fn _wake(queue: &str) -> bool {
    note(queue, READY);
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
    // SAFETY: single-threaded backend.
    unsafe {
        ensure_callback();
        if WAITING {
            stop_waiting();
        }
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
    // SAFETY: single-threaded backend.
    unsafe { WAITING = true };
    true
}

/// `jq._wait(deadline timestamptz) RETURNS boolean`: sleeps until this backend's latch is set
/// (a wakeup for a registered queue, or an interrupt) or `deadline`; with jq not preloaded,
/// at most `jq.poll_interval`. Resets the latch and checks for interrupts (query cancel works).
/// Returns false if the deadline had already passed, true otherwise.
#[pg_extern(volatile, parallel_unsafe)]
fn _wait(deadline: TimestampWithTimeZone) -> bool {
    // SAFETY: plain PostgreSQL calls on this backend's own latch.
    unsafe {
        let now = pg_sys::GetCurrentTimestamp();
        let left_us = i64::from(deadline) - now;
        if left_us <= 0 {
            return false;
        }
        let mut timeout_ms = (left_us + 999) / 1000;
        if !WAITING {
            timeout_ms = timeout_ms.min(gucs::POLL_INTERVAL_MS.get() as i64);
        }
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
