//! Wakeups for `jq.await` (sql/await.sql): a backend awaiting a job's end sleeps on its latch and
//! is woken by the commit of a transaction that ended (or moved) a job of that job's queue.
//!
//! An awaiter registers the queue of the job it awaits ([`_await_register`]) *before* it looks
//! at the job, and its latch is reset before every look; a committer, once its transaction is
//! visible to new snapshots, sets the latch of every awaiter of this database registered on a
//! queue the transaction touched (src/wakeup.rs calls [`wake`] from its `at_commit` with the
//! queues of the events its statements noted: jobs made claimable, running jobs ended, and
//! [`_wake_awaiters`] for jobs that end without either, such as a cancelled ready job). So a
//! commit is either seen by the awaiter's look or sets its latch after it: no lost wakeup
//! (pg_test/tests/awaiting.rs). Awaiters are woken per queue, not per job: each re-checks its
//! own job with one primary-key read; a queue's finishes wake all of its awaiters.
//!
//! Latches are also set for reasons of PostgreSQL's own (signals, catch-up interrupts; seen
//! about every 10 s during a test run): an awaiter looks again only when a committer marked it
//! ([`Awaiter::woken`]) or its deadline came.
//!
//! Nobody awaiting costs a committer one fence and one atomic load ([`wake`]), and only in a
//! transaction that noted a wakeup event anyway (the completion does): no statement, no lock.
//! Without `shared_preload_libraries = 'jq'` there is no shared area and awaiters poll every
//! `jq.poll_interval`.

use crate::queue_hash::QueueHash;
use crate::shmem::{Area, Zeroable};
use crate::{backend, gucs};
use pgrx::prelude::*;
use std::cell::Cell;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Backends (by `pgprocno`) that can await with shared-memory wakeups; a backend with a higher
/// number polls.
pub const MAX_AWAITERS: usize = crate::wakeup::MAX_WAITERS;

/// One backend's await registration, indexed by `pgprocno`.
#[repr(C)]
pub struct Awaiter {
    /// Database oid; 0 = not awaiting.
    db: AtomicU32,
    /// [`QueueHash::low31`] of the awaited job's queue.
    entry: AtomicU32,
    /// 1 once a committer woke this awaiter, until it takes the wakeup and looks again
    /// ([`_await_sleep`]); a latch set without it is spurious and costs no look.
    woken: AtomicU32,
}

/// The shared area of the await wakeups.
#[repr(C)]
pub struct Awaiters {
    /// Registered awaiters; committers skip the scan when 0.
    active: AtomicU32,
    /// Latches set for awaiters since the server started (tests, observability).
    wakeups: AtomicU64,
    slots: [Awaiter; MAX_AWAITERS],
}

// SAFETY: atomics only.
unsafe impl Zeroable for Awaiter {}
// SAFETY: atomics only.
unsafe impl Zeroable for Awaiters {}

static AREA: Area<Awaiters> = Area::new(c"jq awaiters");

thread_local! {
    /// This backend holds an awaiter slot.
    static AWAITING: Cell<bool> = const { Cell::new(false) };
    /// The subtransaction this backend registered in ([`backend::current_subxact`]).
    static AWAIT_SUBXACT: Cell<u32> = const { Cell::new(0) };
}

/// Attaches the awaiter table. Called from `_PG_init` while preloading only.
pub fn init() {
    pgrx::pg_shmem_init!(AREA);
}

/// At the commit of a transaction that noted events for the queues `entries`
/// ([`QueueHash::low31`]): sets the latch of every awaiter of this database registered on one
/// of them. Called after the commit is visible to new snapshots.
pub fn wake(entries: impl Fn() -> Vec<u32>) {
    let Some(sh) = AREA.get() else { return };
    // Pairs with the awaiter's registration (SeqCst RMW on `active` before it looks).
    fence(Ordering::SeqCst);
    if sh.active.load(Ordering::SeqCst) == 0 {
        return;
    }
    let entries = entries();
    let (me, db) = (backend::my_procno(), backend::my_database());
    for i in 0..backend::proc_count().min(MAX_AWAITERS) {
        let a = &sh.slots[i];
        if i as i32 == me || a.db.load(Ordering::Acquire) != db {
            continue;
        }
        if entries.contains(&a.entry.load(Ordering::Relaxed)) {
            a.woken.store(1, Ordering::SeqCst);
            sh.wakeups.fetch_add(1, Ordering::Relaxed);
            backend::set_latch_of(i as i32);
        }
    }
}

/// Ends this backend's registration (also at the end of every transaction: src/xact.rs).
pub fn stop() {
    if !AWAITING.replace(false) {
        return;
    }
    let Some(sh) = AREA.get() else { return };
    let me = backend::my_procno();
    if me >= 0 && (me as usize) < MAX_AWAITERS {
        sh.slots[me as usize].db.store(0, Ordering::SeqCst);
        sh.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// At the rollback of subtransaction `my` (src/xact.rs): an await registered in `my` or below it
/// failed there (a statement timeout, a cancel); its registration ends now, not at the end of
/// the outer transaction (`an_await_that_fails_inside_a_savepoint_ends_its_registration` in
/// pg_test/tests/awaiting.rs).
pub fn at_subxact_abort(my: u32) {
    if AWAITING.get() && AWAIT_SUBXACT.get() >= my {
        stop();
    }
}

/// `jq._await_register(queue text) RETURNS boolean`: registers this backend as awaiting a job of
/// `queue` and resets its latch; lasts until [`_await_done`] or the end of the transaction.
/// False when awaiting falls back to polling (jq not preloaded, or this backend's number is past
/// the table).
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _await_register(queue: &str) -> bool {
    // SAFETY: MyLatch is this backend's latch.
    unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) };
    let Some(sh) = AREA.get() else { return false };
    let me = backend::my_procno();
    if me < 0 || me as usize >= MAX_AWAITERS {
        return false;
    }
    stop();
    let a = &sh.slots[me as usize];
    a.woken.store(0, Ordering::SeqCst);
    a.entry.store(QueueHash::of(queue).low31(), Ordering::Relaxed);
    a.db.store(backend::my_database(), Ordering::Release);
    sh.active.fetch_add(1, Ordering::SeqCst);
    AWAITING.set(true);
    AWAIT_SUBXACT.set(backend::current_subxact());
    true
}

/// `jq._await_sleep(deadline timestamptz) RETURNS boolean`: sleeps until a committer wakes this
/// registered awaiter (a job of its queue ended) or `deadline`; a latch set by anything else
/// (PostgreSQL's own signals) only checks for interrupts and sleeps on. Unregistered, it sleeps
/// at most `jq.poll_interval`. The latch is reset before the caller's next look. False if the
/// deadline had already passed.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _await_sleep(deadline: TimestampWithTimeZone) -> bool {
    loop {
        let cap = (!AWAITING.get()).then(|| gucs::POLL_INTERVAL_MS.get() as i64);
        if !backend::sleep_until(i64::from(deadline), cap) {
            return false;
        }
        pg_sys::check_for_interrupts!();
        // After the reset: a committer that wakes us from now on sets the latch again.
        if !AWAITING.get() || took_wakeup() || backend::now_us() >= i64::from(deadline) {
            return true;
        }
    }
}

/// Whether a committer woke this awaiter since it last looked (and takes that wakeup).
fn took_wakeup() -> bool {
    let (Some(sh), me) = (AREA.get(), backend::my_procno()) else { return true };
    if me < 0 || me as usize >= MAX_AWAITERS {
        return true;
    }
    sh.slots[me as usize].woken.swap(0, Ordering::SeqCst) != 0
}

/// `jq._await_done()`: ends this backend's await registration.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _await_done() {
    stop();
}

/// `jq._await_wakeups() RETURNS bigint`: latches set for awaiters since the server started;
/// NULL when jq is not preloaded.
#[pg_extern(create_or_replace, volatile, parallel_safe)]
fn _await_wakeups() -> Option<i64> {
    AREA.get().map(|sh| sh.wakeups.load(Ordering::Relaxed) as i64)
}
