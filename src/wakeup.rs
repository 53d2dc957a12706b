//! Wakeups for long-polling claims without NOTIFY in the enqueue path.
//!
//! A statement that makes jobs claimable calls [`_wake`] (or [`_wake_slot`] when a running job
//! ends, which matters to capped queues; or [`_wake_on_abort`] from a claim, whose rollback
//! hands its jobs back). That only records the queue's hash in a backend-local list. When the
//! transaction ends (src/xact.rs calls [`at_commit`] once it is visible to new snapshots) the
//! latches of backends waiting on those queues in this database are set, and the queues are
//! marked in the database's ready filter, from which the maintenance worker sends at most one
//! NOTIFY per queue per pass (src/bgworker/notify.rs). A rolled-back transaction wakes nobody
//! (except for handed-back claims). No lock is taken: waiters and committers meet through
//! atomics in this module's shared memory ([`Waiters`]).
//!
//! A waiting claim registers *before* it looks for jobs and resets its latch before each look,
//! so a commit either is visible to the look or sets the latch after it: no lost wakeup
//! (`a_waiting_claim_returns_right_after_the_enqueue_commits_and_not_before` in
//! pg_test/tests/bgworker/long_poll.rs). Two commits at the same instant each wake a waiter of
//! their own: a committer wakes only a waiter that owes no look for an earlier wakeup
//! ([`Waiter::woken`]); waking one whose latch is still set would merge the second wakeup into
//! the first and leave the other waiter asleep for its whole wait
//! (`simultaneous_commits_wake_both_waiters_every_round` in pg_test/tests/bgworker/lost_wakeups.rs).
//! A commit that makes k jobs claimable wakes waiters until their batches (the n each claims
//! per look, [`Waiter::batch`]) cover k: one waiter of `n => 10` for an `enqueue_many` of 10
//! jobs, not ten waiters of which nine find nothing ([`set_latches`]).
//! The watch of a queue's sleeping long-polls (src/claim_hint.rs) is passed on by an offer, a
//! wakeup of its own ([`offer_watch`]): it goes only to a waiter that takes watches, and that
//! waiter takes the watch without looking, so it cannot leave with a job instead
//! (`the_watch_goes_to_a_sleeper_that_takes_it` in pg_test/tests/claim_hint.rs), and the offer
//! is made when the long-poll statement returns, not when its transaction ends
//! (`a_watcher_that_returns_in_an_open_transaction_hands_the_watch_over_at_once`, same file).
//! Wakeups are hints: a woken claim re-runs the claim, and polling
//! (`wait` running out) remains the correctness path. Without `shared_preload_libraries = 'jq'`
//! waiting falls back to sleeping `jq.poll_interval` between looks.

use crate::bgworker::notify;
use crate::queue_hash::QueueHash;
use crate::shmem::{Area, Zeroable};
use crate::{awaiting, backend, claim_hint, gucs};
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Backends (by `pgprocno`) that can wait in `jq.claim(…, wait => …)` with shared-memory
/// wakeups; a backend with a higher number falls back to polling.
pub const MAX_WAITERS: usize = 4096;
/// Queue hashes a waiter records; a claim over more queues is woken by any queue of its database.
pub const WAITER_QUEUES: usize = 16;
/// `Waiter::count` value meaning "every queue of the database".
const ALL_QUEUES: u32 = u32::MAX;
/// The top bit of a waiter's queue entry: a capped queue (woken also when a running job ends).
const CAPPED_BIT: u32 = 1 << 31;

/// One backend's long-poll registration, indexed by `pgprocno`.
#[repr(C)]
pub struct Waiter {
    /// Database oid; 0 = not waiting.
    db: AtomicU32,
    /// Number of valid `hashes`, or [`ALL_QUEUES`].
    count: AtomicU32,
    /// [`QueueHash::low31`] of each queue, `| CAPPED_BIT` for a capped one.
    hashes: [AtomicU32; WAITER_QUEUES],
    /// [`LOOK`] from the moment a committer chose this waiter (and set its latch) until the
    /// waiter wakes and has checked for interrupts ([`_wait`]): it owes a look for a wakeup.
    /// Committers set it only where it is clear ([`claim_waiter`]), so each wakeup goes to a
    /// waiter of its own; a waiter that leaves still owing a look passes the wakeup on
    /// ([`stop_waiting`]). [`WATCH`]: a long-poll that stopped waiting offered this waiter its
    /// queue's watch ([`offer_watch`]); the same rules.
    woken: AtomicU32,
    /// How many ready jobs one look of this waiter claims (its `n`; 0 counts as 1): a committer
    /// counts it against the jobs it wakes for ([`set_latches`]). Only a claim that takes up to
    /// n jobs of its one queue whenever it finds them registers n > 1 (`jq._claim_wait_start`):
    /// a multi-queue claim may fill its n from another queue, a capped or rate-limited one may
    /// take fewer than it finds, and those register 1, so each job still wakes a waiter.
    batch: AtomicU32,
    /// 1: a single-queue long-poll of `jq.claim(text, …)` with claim hints on, which takes its
    /// queue's watch when offered it (src/claim_hint.rs); only such a waiter is offered one.
    watchable: AtomicU32,
}

/// [`Waiter::woken`] bit: a committer chose this waiter for its jobs; it owes a look.
const LOOK: u32 = 1;
/// [`Waiter::woken`] bit: this waiter was offered its queue's watch.
const WATCH: u32 = 2;

/// The shared area of the wakeups.
#[repr(C)]
pub struct Waiters {
    /// Registered waiters; committers skip the scan when 0.
    active: AtomicU32,
    /// Latches set for waiting claims since the server started (observability, tests).
    wakeups: AtomicU64,
    slots: [Waiter; MAX_WAITERS],
}

// SAFETY: atomics only.
unsafe impl Zeroable for Waiter {}
// SAFETY: atomics only.
unsafe impl Zeroable for Waiters {}

static AREA: Area<Waiters> = Area::new(c"jq waiters");

/// Attaches the waiter table. Called from `_PG_init` while preloading only.
pub fn init() {
    pgrx::pg_shmem_init!(AREA);
}

/// What a statement reported about a queue.
#[derive(Clone, Copy)]
enum Event {
    /// A job became claimable.
    Ready,
    /// A running job ended (a capped queue may have a free slot).
    Slot,
    /// A claimed job goes back to the queue if this transaction rolls back.
    Abort,
    /// A job ended in a way that wakes no claim (src/awaiting.rs: only its awaiters care).
    Done,
}

/// One queue this transaction touched: how many jobs became claimable (`ready`), how many
/// running jobs ended (`slot`), how many claimed jobs a rollback hands back (`abort`) and how
/// many jobs ended otherwise (`done`, for awaiters only).
#[derive(Clone, Copy)]
struct Pending {
    hash: QueueHash,
    ready: u32,
    slot: u32,
    abort: u32,
    done: u32,
}

impl Pending {
    fn new(hash: QueueHash) -> Pending {
        Pending { hash, ready: 0, slot: 0, abort: 0, done: 0 }
    }

    /// What a rollback (of the transaction or of a subtransaction) wakes for: the handed-back
    /// claims, as ready jobs.
    fn rolled_back(&self) -> Pending {
        Pending { ready: self.abort, ..Pending::new(self.hash) }
    }

    fn wakes_anyone(&self) -> bool {
        self.ready > 0 || self.slot > 0
    }
}

// Backend-local state. A backend is single-threaded; thread-locals keep that safe in Rust terms.
thread_local! {
    static PENDING: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) };
    /// This backend holds a waiter slot.
    static WAITING: Cell<bool> = const { Cell::new(false) };
    /// Where the next waiter scan starts, so that wakeups rotate over the waiters of a queue.
    static CURSOR: Cell<usize> = const { Cell::new(0) };
    /// The queue whose watch this backend takes when offered it (a watchable registration).
    static WATCH_QUEUE: Cell<Option<QueueHash>> = const { Cell::new(None) };
    /// This backend consumed a watch offer together with a wakeup and is looking: it takes the
    /// watch when it sleeps again, or passes the offer on if it leaves ([`stop_waiting`]).
    static OFFERED: Cell<bool> = const { Cell::new(false) };
    /// This backend consumed a wakeup and its look has not ended: if the transaction aborts
    /// now (a cancel during the look), the wakeup is passed on ([`stop_waiting`]).
    static LOOKING: Cell<bool> = const { Cell::new(false) };
    /// The subtransaction this backend registered in ([`backend::current_subxact`]): its
    /// rollback (or an ancestor's) ends the wait ([`at_subxact_abort`]).
    static WAIT_SUBXACT: Cell<u32> = const { Cell::new(0) };
}

/// Records `n` events of queue `hash` for the end of the transaction (unless `jq.wakeups` is
/// off in this session).
fn note(hash: QueueHash, event: Event, n: u32) {
    if !gucs::WAKEUPS.get() {
        return;
    }
    PENDING.with_borrow_mut(|pending| {
        let i = match pending.iter().position(|p| p.hash == hash) {
            Some(i) => i,
            None => {
                pending.push(Pending::new(hash));
                pending.len() - 1
            }
        };
        let e = &mut pending[i];
        let count = match event {
            Event::Ready => &mut e.ready,
            Event::Slot => &mut e.slot,
            Event::Abort => &mut e.abort,
            Event::Done => &mut e.done,
        };
        *count = count.saturating_add(n);
    });
}

/// At commit (src/xact.rs): ends this backend's wait and wakes for the jobs the transaction
/// made claimable and the running jobs it ended; marks the ready filter; wakes the awaiters of
/// the queues in which it ended a job (src/awaiting.rs): a running job's end notes a slot
/// event, any other end a `Done` one ([`_wake_awaiters`]); an enqueue wakes no awaiter.
pub fn at_commit() {
    let pending = PENDING.take();
    stop_waiting(false);
    if !pending.is_empty() {
        awaiting::wake(|| {
            pending.iter().filter(|p| p.slot > 0 || p.done > 0).map(|p| p.hash.low31()).collect()
        });
    }
    let wakes: Vec<Pending> = pending
        .into_iter()
        .map(|p| Pending { abort: 0, ..p })
        .filter(Pending::wakes_anyone)
        .collect();
    if !wakes.is_empty() {
        wake(&wakes, true); // not for a claim's commit (its only entry is `abort`)
    }
}

/// At abort (src/xact.rs): ends this backend's wait (passing on a wakeup it was woken for and
/// did not finish looking for) and wakes for the claimed jobs the rollback hands back
/// (`a_rolled_back_enqueue_wakes_nobody_into_a_claim`).
pub fn at_abort() {
    let pending = PENDING.take();
    stop_waiting(true);
    let wakes: Vec<Pending> = pending.iter().map(Pending::rolled_back).filter(Pending::wakes_anyone).collect();
    if !wakes.is_empty() {
        wake(&wakes, false);
    }
}

/// At `PREPARE TRANSACTION` (src/xact.rs): ends this backend's wait; nobody is woken (the
/// jobs become claimable at `COMMIT PREPARED`, found by the next look).
pub fn at_prepare() {
    PENDING.take();
    stop_waiting(false);
}

/// At the rollback of subtransaction `my` (src/xact.rs): a claim rolled back to a savepoint (or
/// by a plpgsql EXCEPTION block) hands its jobs back now, so it wakes for them at once
/// (`a_claim_rolled_back_to_a_savepoint_wakes_a_waiter`). The entries stay, so a later
/// top-level abort wakes again (spurious, harmless); the commit of the outer transaction
/// ignores them. A long-poll registered in `my` or below it failed there (a statement timeout,
/// a cancel, a dropped queue): its wait ends now, passing on a wakeup it consumed, as at a
/// top-level abort; left registered in the open outer transaction it could be chosen for
/// wakeups it never acts on (`a_long_poll_that_fails_inside_a_savepoint_ends_its_wait` in
/// pg_test/tests/bgworker/lost_wakeups.rs).
pub fn at_subxact_abort(my: u32) {
    if WAITING.get() && WAIT_SUBXACT.get() >= my {
        stop_waiting(true);
    }
    let wakes: Vec<Pending> = PENDING.with_borrow(|pending| {
        pending.iter().filter(|p| p.abort > 0).map(Pending::rolled_back).collect()
    });
    if !wakes.is_empty() {
        wake(&wakes, false);
    }
}

/// Wakes for `wakes` (see [`set_latches`]). With `notify`, also marks the queues that got
/// claimable jobs in the database's ready filter for the maintenance worker's NOTIFY.
fn wake(wakes: &[Pending], notify: bool) {
    // A completion's commit marks nothing (slot wakes only): no slot lookup on its path.
    if notify && wakes.iter().any(|p| p.ready > 0) {
        notify::mark_ready(wakes.iter().filter(|p| p.ready > 0).map(|p| p.hash));
    }
    set_latches(wakes.iter().map(|p| Budget { entry: p.hash.low31(), ready: p.ready, slot: p.slot }).collect());
}

/// Wakeups still owed to the waiters of one queue.
struct Budget {
    /// The queue's waiter entry ([`QueueHash::low31`]).
    entry: u32,
    /// Jobs of the queue to wake waiters for (each woken waiter covers its batch).
    ready: u32,
    /// Waiters of the queue as a capped queue to wake.
    slot: u32,
}

/// Sets the latches of waiters of this database: for each entry, waiters of its queue until
/// their batches ([`Waiter::batch`]) cover the jobs that became claimable (`ready`), plus as
/// many waiting on it as a capped queue as running jobs ended (`slot`). Waking every waiter of a
/// queue for each job would make N waiters run N claims per job, a thundering herd
/// (`one_job_wakes_one_of_many_waiters` in pg_test/tests/bgworker/long_poll.rs); waking one
/// waiter per job when each claims up to n of them made n - 1 of every n woken claims find
/// nothing (`a_batch_wakes_one_waiter_per_n_jobs`, same file). A woken waiter claims n jobs
/// or every job it can find, so no job is left without a waiter on its way
/// (`every_job_of_a_batch_is_claimed_without_waiting_out_the_wait`, same file). A waiter that
/// was woken but leaves without claiming passes the wakeup on ([`stop_waiting`]).
fn set_latches(mut budget: Vec<Budget>) {
    let owes = |budget: &[Budget]| budget.iter().any(|b| b.ready > 0 || b.slot > 0);
    if !owes(&budget) {
        return;
    }
    each_waiter(|i, w, db| {
        let Some((k, ready)) = owed_by(w, &budget) else { return true };
        if !claim_waiter(w, db) {
            return true;
        }
        let b = &mut budget[k];
        if ready {
            b.ready = b.ready.saturating_sub(batch_of(w));
        } else {
            b.slot -= 1;
        }
        wake_waiter(i);
        owes(&budget) // stop the scan once every job and slot has its waiter
    });
}

/// Calls `f(pgprocno, waiter, database)` for the registered waiters of this database other than
/// this backend, starting at a rotating place (so wakeups rotate over the waiters of a queue),
/// until `f` returns false.
fn each_waiter(mut f: impl FnMut(usize, &Waiter, u32) -> bool) {
    let Some(sh) = AREA.get() else { return };
    // Pairs with the waiter's registration (SeqCst RMW on `active` before it looks).
    fence(Ordering::SeqCst);
    if sh.active.load(Ordering::SeqCst) == 0 {
        return;
    }
    let n = backend::proc_count().min(MAX_WAITERS);
    if n == 0 {
        return;
    }
    let start = {
        let c = CURSOR.get().wrapping_add(1);
        CURSOR.set(c);
        c % n
    };
    let (me, db) = (backend::my_procno(), backend::my_database());
    for k in 0..n {
        let i = (start + k) % n;
        let w = &sh.slots[i];
        if i as i32 == me || w.db.load(Ordering::Acquire) != db {
            continue;
        }
        if !f(i, w, db) {
            return;
        }
    }
}

/// Sets the latch of waiter `i`, counted in [`_wakeups`].
fn wake_waiter(i: usize) {
    if let Some(sh) = AREA.get() {
        sh.wakeups.fetch_add(1, Ordering::Relaxed);
    }
    backend::set_latch_of(i as i32);
}

/// Sets `bit` of waiter `w`'s [`Waiter::woken`] if it is clear: true when this caller set it,
/// and `w` still waits in database `db` after that (see [`claim_waiter`]).
fn take_bit(w: &Waiter, db: u32, bit: u32) -> bool {
    if w.woken.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| (v & bit == 0).then_some(v | bit)).is_err() {
        return false;
    }
    // It may have left between the scan's check and the update: then its stop_waiting either
    // saw the bit (and passes it on) or ran before it; either way, find another waiter.
    w.db.load(Ordering::SeqCst) == db
}

/// The jobs one look of waiter `w` claims (at least 1).
fn batch_of(w: &Waiter) -> u32 {
    w.batch.load(Ordering::Relaxed).max(1)
}

/// Makes waiter `w` (of database `db`) this committer's to wake. False when it still owes a
/// look for an earlier wakeup — that look starts after this commit is visible, so it sees this
/// commit's jobs too, and setting its latch again would merge two wakeups into one — or when
/// it stopped waiting meanwhile. Under the negative control feature `break-wake-merge`, any
/// registered waiter is taken (the merging choice; lost_wakeups.rs fails with it).
fn claim_waiter(w: &Waiter, db: u32) -> bool {
    if cfg!(feature = "break-wake-merge") {
        w.woken.fetch_or(LOOK, Ordering::SeqCst);
        return true;
    }
    take_bit(w, db, LOOK)
}

/// Which entry of `budget` owes waiter `w` a wakeup, and whether as a ready job (true) or a
/// capped queue's free slot (false).
fn owed_by(w: &Waiter, budget: &[Budget]) -> Option<(usize, bool)> {
    let count = w.count.load(Ordering::Acquire);
    let all = count == ALL_QUEUES;
    let hashes: Vec<u32> = if all {
        Vec::new()
    } else {
        w.hashes[..(count as usize).min(WAITER_QUEUES)].iter().map(|x| x.load(Ordering::Relaxed)).collect()
    };
    budget.iter().enumerate().find_map(|(k, b)| {
        let mine = hashes.iter().find(|x| (**x & !CAPPED_BIT) == b.entry);
        if b.ready > 0 && (all || mine.is_some()) {
            Some((k, true))
        } else if b.slot > 0 && mine.is_some_and(|x| x & CAPPED_BIT != 0) {
            Some((k, false))
        } else {
            None
        }
    })
}

/// Ends this backend's waiter registration. If it still owes a look for a wakeup
/// ([`Waiter::woken`]) or its latch is set, a wakeup meant for it may be lost with it (it was
/// woken for a job but is leaving without that job: its wait ran out, it was cancelled, it
/// claimed something else, or a commit chose it after its last look), so the wakeup is passed
/// on to other waiters of its first queue, for as many jobs as its batch (a spurious one at
/// worst). So is one it consumed, when the transaction aborts (`aborting`) before its look
/// ended: the look was cancelled or failed, or its claims are handed back
/// (`a_cancel_that_lands_with_a_wakeup_passes_it_on` in pg_test/tests/bgworker/lost_wakeups.rs).
/// The watch of a queue's sleeping long-polls (src/claim_hint.rs, `_hint_watch`), when this
/// backend held it or was offered it and has not taken it, is offered to another waiter now
/// ([`offer_watch`]): when the long-poll statement returns (`jq._wait_done`), not when its
/// transaction ends.
fn stop_waiting(aborting: bool) {
    let looking = LOOKING.replace(false);
    let offered = OFFERED.replace(false);
    WATCH_QUEUE.set(None);
    if !WAITING.replace(false) {
        return;
    }
    let Some(sh) = AREA.get() else { return };
    let me = backend::my_procno();
    if me < 0 || me as usize >= MAX_WAITERS {
        return;
    }
    let w = &sh.slots[me as usize];
    let count = w.count.load(Ordering::Relaxed);
    let first = (count != ALL_QUEUES && count > 0).then(|| w.hashes[0].load(Ordering::Relaxed) & !CAPPED_BIT);
    let batch = w.batch.load(Ordering::Relaxed).max(1);
    w.db.store(0, Ordering::SeqCst);
    sh.active.fetch_sub(1, Ordering::SeqCst);
    // After the store: a committer that chose this waiter later sees it gone (claim_waiter).
    let woken = w.woken.swap(0, Ordering::SeqCst);
    // SAFETY: MyLatch is this backend's latch; reading its flag is what WaitLatch does.
    let latched = unsafe { std::ptr::read_volatile(&(*pg_sys::MyLatch).is_set) } != 0;
    // A latch set by a watch offer alone owes no jobs.
    let owed = woken & LOOK != 0 || (latched && woken & WATCH == 0) || (aborting && looking);
    let held = claim_hint::end_watch();
    let Some(entry) = first else { return };
    if owed {
        set_latches(vec![Budget { entry, ready: batch, slot: 0 }]);
    }
    if held || offered || woken & WATCH != 0 {
        offer_watch(entry);
    }
}

/// Offers the watch of the queue with waiter entry `entry` (src/claim_hint.rs) to one other
/// waiter of it that takes watches ([`Waiter::watchable`]: not a multi-queue claim, which never
/// watches) and has no offer pending: it takes the watch as soon as it wakes, without looking
/// ([`_wait`]), so it cannot instead find a job and leave the sleepers with no watcher; one
/// that leaves before it took the watch offers it on ([`stop_waiting`]). Called when the
/// watcher stops waiting, i.e. when its long-poll statement returns: the offered waiter does
/// not look, so it races no row the leaving watcher claimed and has not committed yet. Under the
/// negative control feature `break-watch-handover`, nobody is offered the watch.
fn offer_watch(entry: u32) {
    if cfg!(feature = "break-watch-handover") {
        return;
    }
    each_waiter(|i, w, db| {
        let mine = w.watchable.load(Ordering::Relaxed) == 1
            && w.count.load(Ordering::Acquire) == 1
            && w.hashes[0].load(Ordering::Relaxed) & !CAPPED_BIT == entry;
        if mine && take_bit(w, db, WATCH) {
            wake_waiter(i);
            return false;
        }
        true
    });
}

/// Whether this backend is registered as a waiting claim ([`_wait_register`]).
pub fn waiting() -> bool {
    WAITING.get()
}

/// `jq._wake(queue text) RETURNS boolean`: at this transaction's commit, wake one more claim
/// waiting on `queue` (a job became claimable; call it once per job), and clear the queue's
/// claim-start hint (src/claim_hint.rs: the job may sort anywhere). Always returns true, so it
/// can sit in a WHERE clause.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _wake(queue: &str) -> bool {
    let hash = QueueHash::of(queue);
    claim_hint::note_ready(hash);
    note(hash, Event::Ready, 1);
    true
}

/// `jq._wake_ready(queue text, priority integer, run_at timestamptz) RETURNS boolean`: as
/// [`_wake`] for a job made claimable with that priority and run_at (enqueue, promotion,
/// release, reaping, snooze, a key slot handing over), whose position in claim order is known:
/// at commit it moves the queue's claim-start hint back only if the job sorts before it
/// (src/claim_hint.rs), instead of clearing it. Always true.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _wake_ready(queue: &str, priority: i32, run_at: TimestampWithTimeZone) -> bool {
    let hash = QueueHash::of(queue);
    claim_hint::note_ready_key(hash, priority, run_at.into_inner());
    note(hash, Event::Ready, 1);
    true
}

/// `jq._wake_n(queue text, n integer) RETURNS boolean`: as [`_wake`] for `n` jobs at once (up to
/// `n` waiters are woken; a large `n` wakes them all, e.g. when a queue is resumed); `n <= 0`
/// does nothing. Does not touch the claim-start hint. Always true.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _wake_n(queue: &str, n: i32) -> bool {
    if n > 0 {
        note(QueueHash::of(queue), Event::Ready, n as u32);
    }
    true
}

/// `jq._wake_slot(queue text) RETURNS boolean`: at commit, wake claims waiting on `queue` if
/// it is capped (a running job ended, so a slot may be free). Always true.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _wake_slot(queue: &str) -> bool {
    note(QueueHash::of(queue), Event::Slot, 1);
    true
}

/// `jq._wake_awaiters(queue text) RETURNS boolean`: at this transaction's commit, wake the
/// backends awaiting a job of `queue` (src/awaiting.rs), for a job that ended without waking
/// any claim (a cancelled job that was not running). Always true.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _wake_awaiters(queue: &str) -> bool {
    note(QueueHash::of(queue), Event::Done, 1);
    true
}

/// `jq._wake_on_abort(queue text) RETURNS boolean`: if this transaction (or the subtransaction
/// it runs in) rolls back, wake claims waiting on `queue` (a rolled-back claim hands its jobs
/// back). Always true.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _wake_on_abort(queue: &str) -> bool {
    note(QueueHash::of(queue), Event::Abort, 1);
    true
}

/// `jq._wait_register(queues text[], capped boolean[])`: registers this backend as waiting for
/// jobs in `queues` (capped[i]: also wake when a running job of queues[i] ends) and resets its
/// latch; each look claims one job's worth of wakeups ([`_wait_register_batch`] with batch 1).
/// Lasts until [`_wait_done`] or the end of the transaction. Returns false when waiting
/// falls back to polling (jq not preloaded, or this backend's number is past the table).
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _wait_register(queues: Vec<String>, capped: Vec<bool>) -> bool {
    register(queues, capped, 1, false)
}

/// `jq._wait_register_batch(queues text[], capped boolean[], batch integer)`: as
/// [`_wait_register`] for a waiter each of whose looks claims up to `batch` jobs (its n) of its
/// queues whenever it finds them: a commit wakes it for that many of its jobs
/// ([`Waiter::batch`]). `batch` below 1 counts as 1. Its own name, not a new argument of
/// `_wait_register`: databases at jq 0.1.0 call that symbol with two arguments. Only
/// `jq.claim(text, …)` calls it, with its one queue, so such a waiter takes its queue's watch
/// when offered it (with claim hints on in its session: [`Waiter::watchable`]).
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _wait_register_batch(queues: Vec<String>, capped: Vec<bool>, batch: i32) -> bool {
    let watchable = queues.len() == 1 && gucs::CLAIM_HINTS.get();
    register(queues, capped, batch.max(1) as u32, watchable)
}

fn register(queues: Vec<String>, capped: Vec<bool>, batch: u32, watchable: bool) -> bool {
    // SAFETY: MyLatch is this backend's latch.
    unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) };
    let Some(sh) = AREA.get() else { return false };
    let me = backend::my_procno();
    if me < 0 || me as usize >= MAX_WAITERS {
        return false;
    }
    if WAITING.get() {
        stop_waiting(false);
    }
    let w = &sh.slots[me as usize];
    w.db.store(0, Ordering::Release);
    w.woken.store(0, Ordering::SeqCst);
    w.batch.store(batch, Ordering::Relaxed);
    w.watchable.store(watchable as u32, Ordering::Relaxed);
    WATCH_QUEUE.set(watchable.then(|| QueueHash::of(&queues[0])));
    LOOKING.set(false);
    OFFERED.set(false);
    if queues.len() > WAITER_QUEUES {
        w.count.store(ALL_QUEUES, Ordering::Release);
    } else {
        for (i, q) in queues.iter().enumerate() {
            let cap = capped.get(i).copied().unwrap_or(false);
            w.hashes[i].store(QueueHash::of(q).low31() | if cap { CAPPED_BIT } else { 0 }, Ordering::Relaxed);
        }
        w.count.store(queues.len() as u32, Ordering::Release);
    }
    w.db.store(backend::my_database(), Ordering::Release);
    sh.active.fetch_add(1, Ordering::SeqCst);
    WAITING.set(true);
    WAIT_SUBXACT.set(backend::current_subxact());
    true
}

/// `jq._wait(deadline timestamptz) RETURNS boolean`: sleeps until this backend's latch is set
/// (a wakeup for a registered queue, or an interrupt) or `deadline`; with jq not preloaded,
/// at most `jq.poll_interval` ms. Resets the latch and checks for interrupts (query cancel
/// works). Returns false if the deadline had already passed, true otherwise. A wakeup that only
/// offers the queue's watch ([`offer_watch`]) does not end the sleep: the backend takes the
/// watch (src/claim_hint.rs) and sleeps on, until the watch's time at the latest.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _wait(deadline: TimestampWithTimeZone) -> bool {
    let cap = (!WAITING.get()).then(|| gucs::POLL_INTERVAL_MS.get() as i64);
    LOOKING.set(false); // the look before this sleep ended, empty
    let mut until = i64::from(deadline);
    loop {
        // A wakeup may be owed with the latch already reset: PostgreSQL resets this backend's
        // latch in its own waits (a lock wait, pg_sleep in a trigger) during the look that
        // ended. Asleep with `woken` set, it would stay asleep until its deadline, and every
        // later committer skips a waiter that owes a look
        // (`a_wakeup_whose_latch_a_wait_in_the_look_reset_is_not_lost` in
        // pg_test/tests/bgworker/lost_wakeups.rs). The committer sets `woken` before the latch,
        // so a wakeup after this check sets the latch and the sleep returns at once. When one
        // is owed, the latch it set may still be set: it is reset here as the sleep would have,
        // or it would end the next sleep for nothing (a look too many, and at stop_waiting a
        // wakeup passed on for jobs that do not exist). No committer takes `LOOK` again before
        // the swap below, and an offer landing meanwhile is consumed by that swap.
        if owes_wakeup() {
            // SAFETY: MyLatch is this backend's latch.
            unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) };
        } else if !backend::sleep_until(until, cap) {
            return false;
        }
        // Interrupts first: a cancel that lands together with a wakeup leaves `woken` set, and
        // stop_waiting (at abort) passes the wakeup on. Consumed before this check, the wakeup
        // was lost with the cancelled claim (`a_cancel_that_lands_with_a_wakeup_passes_it_on`).
        pg_sys::check_for_interrupts!();
        // Awake, about to look again: that look sees every commit whose committer chose this
        // waiter before now (the swap reads the committer's update, which follows its commit),
        // so the wakeup is consumed. A committer that chooses it after this finds `woken` clear
        // and sets the latch again (the next wait returns at once, or stop_waiting passes it on).
        let woken = consume_wakeup();
        if woken & WATCH != 0 {
            OFFERED.set(true); // settled when the watch is taken or found taken
        }
        if woken != WATCH {
            LOOKING.set(woken & LOOK != 0);
            return true;
        }
        if let Some(at) = take_offered_watch() {
            until = until.min(at);
        }
    }
}

/// Whether this backend's [`Waiter::woken`] holds anything (a look owed, or a watch offered).
fn owes_wakeup() -> bool {
    my_waiter().is_some_and(|w| w.woken.load(Ordering::SeqCst) != 0)
}

/// Clears this backend's [`Waiter::woken`] (it is awake); returns what it held.
fn consume_wakeup() -> u32 {
    my_waiter().map_or(0, |w| w.woken.swap(0, Ordering::SeqCst))
}

/// This backend's registration, while it is registered as a waiting claim.
fn my_waiter() -> Option<&'static Waiter> {
    let (sh, me) = (AREA.get().filter(|_| WAITING.get())?, backend::my_procno());
    (me >= 0 && (me as usize) < MAX_WAITERS).then(|| &sh.slots[me as usize])
}

/// Takes the watch this backend was offered, if its queue still needs one and nobody else took
/// it: when to look at the latest (PostgreSQL µs), or None. Until the offer is settled here (or
/// by `_hint_watch`), a backend that stops waiting offers the watch on.
fn take_offered_watch() -> Option<i64> {
    let queue = WATCH_QUEUE.get()?;
    claim_hint::take_watch(queue)
}

/// Called by src/claim_hint.rs when this backend's queue has a watcher (this backend or
/// another) or needs none: an offer of the watch is settled.
pub fn watch_settled() {
    OFFERED.set(false);
}

/// `jq._wait_done()`: ends this backend's waiter registration (also done at transaction end).
/// The claim's look ended: a wakeup it consumed is not passed on.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _wait_done() {
    LOOKING.set(false);
    stop_waiting(false);
}

/// `jq._wait_rebatch(capped boolean, batch integer) RETURNS boolean`: called by a long-polling
/// `jq.claim(text, …)` about to sleep, with what its queue hands out now (its look just read the
/// queue row): capped (also wake it when a running job ends) and the batch a commit counts for
/// it (its n, or 1 on a capped or rate-limited queue, as `jq._claim_wait_start` registers).
/// Updates this backend's registration when the queue changed since (`jq.alter_queue` wakes every
/// waiter, so each looks and gets here): a waiter still counted for n jobs on a queue capped or
/// rate-limited since took one and left the rest of a commit's jobs with no waiter woken, and one
/// not marked capped was never woken by a free slot
/// (`a_queue_rate_limited_mid_wait_wakes_a_waiter_per_job` in pg_test/tests/bgworker/long_poll.rs).
/// True when it changed something: the claim then looks again before sleeping (a commit after
/// its look counted it as it was). False otherwise, and for a multi-queue registration.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _wait_rebatch(capped: bool, batch: i32) -> bool {
    let (Some(sh), me) = (AREA.get().filter(|_| WAITING.get()), backend::my_procno()) else { return false };
    if me < 0 || me as usize >= MAX_WAITERS {
        return false;
    }
    let w = &sh.slots[me as usize];
    if w.count.load(Ordering::Relaxed) != 1 {
        return false;
    }
    let (hash, batch) = (w.hashes[0].load(Ordering::Relaxed), batch.max(1) as u32);
    let want = (hash & !CAPPED_BIT) | if capped { CAPPED_BIT } else { 0 };
    if hash == want && w.batch.load(Ordering::Relaxed) == batch {
        return false;
    }
    w.hashes[0].store(want, Ordering::Relaxed);
    w.batch.store(batch, Ordering::Relaxed);
    fence(Ordering::SeqCst); // before the look that follows
    true
}

/// `jq._waiters()`: the long-poll registrations of this database's backends, for tests and
/// diagnosis: pid, number of queues (-1: every queue of the database), batch (n counted per
/// wakeup), capped (of the first queue), watchable, and woken (1: owes a look for a wakeup; 2:
/// offered the watch; 3: both). Read without locks; empty when jq is not preloaded.
#[pg_extern(create_or_replace, volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn _waiters() -> TableIterator<
    'static,
    (
        name!(pid, i32),
        name!(queues, i32),
        name!(batch, i32),
        name!(capped, bool),
        name!(watchable, bool),
        name!(woken, i32),
    ),
> {
    let mut rows = Vec::new();
    if let Some(sh) = AREA.get() {
        let db = backend::my_database();
        for i in 0..backend::proc_count().min(MAX_WAITERS) {
            let w = &sh.slots[i];
            if w.db.load(Ordering::Acquire) != db {
                continue;
            }
            let count = w.count.load(Ordering::Acquire);
            rows.push((
                backend::pid_of(i as i32),
                if count == ALL_QUEUES { -1 } else { count as i32 },
                batch_of(w) as i32,
                count >= 1 && w.hashes[0].load(Ordering::Relaxed) & CAPPED_BIT != 0,
                w.watchable.load(Ordering::Relaxed) == 1,
                w.woken.load(Ordering::SeqCst) as i32,
            ));
        }
    }
    TableIterator::new(rows)
}

/// `jq._wakeups()`: how many waiting claims were woken (latches set) since the server started;
/// NULL when jq is not preloaded.
#[pg_extern(create_or_replace, volatile, parallel_safe)]
fn _wakeups() -> Option<i64> {
    AREA.get().map(|sh| sh.wakeups.load(Ordering::Relaxed) as i64)
}

/// `jq._queue_bit(queue text) RETURNS integer`: the queue's bit in the ready filter behind
/// `NOTIFY jq_ready` (0 to 1023; `hashtextextended(queue, 0) & 1023`).
#[pg_extern(create_or_replace, immutable, parallel_safe)]
fn _queue_bit(queue: &str) -> i32 {
    notify::queue_bit(QueueHash::of(queue))
}
