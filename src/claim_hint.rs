//! Claim-start hints: where a queue's claims may start in `jobs_claim_idx`, past its dead head.
//!
//! Every claim turns a `ready` row into a `running` one and leaves a dead entry at the head of
//! the claim index. Normally the scans that pass such entries mark them dead and later inserts
//! or vacuum remove them, but while any snapshot older than them is open (a long REPEATABLE
//! READ report, a stuck transaction, a lagging replica with `hot_standby_feedback`) nothing can
//! be removed and every claim walks all of them from the head of the index: hundreds of
//! thousands of entries, each claim then taking far longer than its work (docs/BENCHMARKS.md,
//! "Held REPEATABLE READ snapshot"; `a_claim_during_a_held_snapshot_starts_past_the_dead_head`
//! in pg_test/tests/claim_hint.rs).
//!
//! A hint is the key (priority, run_at, id) of the last job claimed from a queue, kept in shared
//! memory per queue. A claim that finds one (`jq._claim_hint`) first looks only at the jobs of
//! the hint's priority from that key on (an index range that starts there, so it never reads
//! the dead head); if that finds fewer jobs than asked for, the rest comes from the priorities
//! below the hint's (`p.priority < v_below` in jq.claim: a range that starts past the dead head
//! too, so a shallow or empty queue does not walk it either). Capped and rate-limited queues
//! take the rest with the full claim from the head. A long-poll looks the same way, first and
//! after each wakeup (`a_long_poll_during_a_held_snapshot_starts_past_the_dead_head`).
//! Rules that keep the hint from hiding a job:
//!
//! - A claim moves the hint forward to the keys it claims (`jq._hint_advance`), only in READ
//!   COMMITTED (its snapshot is taken after it read the hint) and only if no other transaction
//!   made a job claimable or cleared the hint since it read it (a generation counter): a job
//!   committed after the claim's snapshot may sort before the keys it claims.
//! - A path that makes a job claimable and knows where it sorts (enqueue, promotion, release,
//!   reaping, snooze, a key slot handing over, and a claim that rolls back) moves the hint back
//!   to the job if the job sorts before it; the others (a retry or a failure due at once,
//!   priority aging) clear it. Both when the transaction ends, after it became visible, so a
//!   claim that reads the hint later also sees the job; and before the waiting claims are woken
//!   for the job (src/xact.rs runs [`at_commit`] before the wakeups), so a woken claim does too. Moving back rather than clearing
//!   matters: a cleared hint sends every claim of the queue to the full claim at once, which
//!   while an old snapshot is open means every worker walking the whole dead head.
//! - Whatever slips through (a row skipped because a non-claim transaction had it locked, a
//!   race): now and then one claim ignores the hint and runs the full claim for one job, the
//!   queue's true head, and sets the hint anew there; the rest of its batch comes from the hint
//!   (one job only: every job the full claim finds waits for its walk of the dead head). One claim of a queue at
//!   a time (its turn ends with its statement: at the first job it claims, right after it if
//!   it claims none, or when a failed one's (sub)transaction ends), at least a second after
//!   the previous one and at least a hundred times the CPU time that one used after it (a full
//!   claim that walks a long dead head is spaced out, so it never takes more than about a
//!   hundredth of one worker), at most a minute. So a job can be passed over for about a
//!   second, longer only while an old snapshot is open; it is never lost.
//! - A full claim runs only when a claim looks, and a long-poll asleep looks only when a commit
//!   wakes it: with every consumer asleep, a job nothing wakes anyone for would wait for the
//!   next wakeup or call. So one sleeping long-poll per queue (the watcher, [`_hint_watch`])
//!   sleeps at most until the next full claim is due, and at most a second; its look then takes
//!   the turn. A watcher that stops waiting (its long-poll statement returns, whatever its
//!   transaction does next) offers the watch to another sleeper of the queue, one that takes it
//!   at once without looking (src/wakeup.rs, `offer_watch`).
//!   `a_sleeping_long_poll_claims_a_job_left_behind_the_hint`.
//!
//! Hints are an optimisation only: without `shared_preload_libraries = 'jq'` or with
//! `jq.claim_hints = off` every claim is the full claim. A hint belongs to the tag
//! [`QueueHash::in_database`] of its queue, which differs between the queues of a database (their
//! hashes do: `queues_name_hash_idx`); slots are found by the tag, and two queues that share a
//! slot only take it from each other.

use crate::backend::{cpu_us, my_database, my_procno, now_us};
use crate::gucs;
use crate::queue_hash::QueueHash;
use crate::shmem::{Area, Zeroable};
use crate::spin::SpinCell;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};

/// Slots of claim-start hints, found by the tag of (database, queue).
pub const HINT_SLOTS: usize = 1024;

/// Shortest time between two full claims of a queue that has a hint, µs.
const FULL_CLAIM_EVERY_US: i64 = 1_000_000;
/// A full claim is due again after this many times the CPU time it used, if that is longer:
/// while an old snapshot keeps the dead head alive, a full claim walks all of it (seconds, after
/// minutes of such a snapshot), and one a second would take most of the machine. A hundred
/// keeps those walks at about a hundredth of one worker; at ten (of its wall time) they were a
/// tenth, a measurable part of the queue's whole CPU at a moderate load
/// (pg_test/tests/claim_hint.rs, a_full_claim_that_walks_a_long_dead_head_is_spaced_out).
const FULL_CLAIM_SPACING: i64 = 100;
/// How long one claim holds the turn to run the full claim before another may take it, µs.
const FULL_CLAIM_TURN_US: i64 = 60_000_000;

/// A job's position in claim order: priority DESC, run_at, id.
#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Key {
    pub priority: i32,
    pub run_at: i64,
    pub id: i64,
}

impl Key {
    /// Whether `self` is claimed before `other`.
    pub fn before(&self, other: &Key) -> bool {
        self.priority > other.priority
            || (self.priority == other.priority && (self.run_at, self.id) < (other.run_at, other.id))
    }
}

/// One queue's hint (the contents of a shared slot).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Hint {
    /// Hash of (database, queue); 0 = unused.
    pub tag: u64,
    /// Bumped whenever the hint is moved back or cleared (or the slot changes hands).
    pub gen: u64,
    /// Whether `key` holds.
    pub valid: bool,
    pub key: Key,
    /// When the next full claim of this queue is due (µs since 2000, PostgreSQL's epoch).
    pub full_due: i64,
    /// The sleeping long-poll that wakes by `watch_until` to look again (`pgprocno + 1`; 0:
    /// none): see [`_hint_watch`].
    pub watcher: i32,
    /// When the watcher wakes at the latest (µs since 2000).
    pub watch_until: i64,
}

// SAFETY: integers and a bool: all-zero bytes are an unused slot.
unsafe impl Zeroable for Hint {}

/// The shared area of the hints.
#[repr(C)]
pub struct Hints {
    slots: [SpinCell<Hint>; HINT_SLOTS],
}

// SAFETY: spin cells of zeroable hints.
unsafe impl Zeroable for Hints {}

impl Hints {
    /// The slot of a (database, queue) tag.
    fn slot(&self, tag: u64) -> &SpinCell<Hint> {
        &self.slots[(tag % HINT_SLOTS as u64) as usize]
    }
}

static AREA: Area<Hints> = Area::new(c"jq claim hints");

/// Attaches the hint slots. Called from `_PG_init` while preloading only.
pub fn init() {
    pgrx::pg_shmem_init!(AREA);
}

/// What the last `jq._claim_hint` of this backend read.
#[derive(Clone, Copy, Default)]
struct Seen {
    tag: u64,
    slot_tag: u64,
    gen: u64,
    valid: bool,
    key: Key,
    /// When this claim took the turn to run the full claim (0: it did not).
    turn_at: i64,
    /// This backend's CPU time then, µs ([`cpu_us`]).
    cpu_at: i64,
}

/// A change to apply when the transaction ends.
#[derive(Clone, Copy)]
enum Change {
    /// A job sorting at `Key` became claimable: move the hint back to it if it is ahead.
    Lower(Key),
    /// Jobs that may sort anywhere became claimable: clear the hint.
    Clear,
}

thread_local! {
    static SEEN: Cell<Seen> = const { Cell::new(Seen { tag: 0, slot_tag: 0, gen: 0, valid: false,
        key: Key { priority: 0, run_at: 0, id: 0 }, turn_at: 0, cpu_at: 0 }) };
    /// Turns to run the full claim taken in this transaction and not ended yet: (tag, turn_at,
    /// cpu_at).
    static TURNS: RefCell<Vec<(u64, i64, i64)>> = const { RefCell::new(Vec::new()) };
    /// Changes at commit (`.1 = false`) or at abort (`.1 = true`).
    static PENDING: RefCell<Vec<(u64, Change, bool)>> = const { RefCell::new(Vec::new()) };
    /// The tag of the queue this backend watches while it sleeps in a long-poll (0: none).
    static WATCH: Cell<u64> = const { Cell::new(0) };
}

/// The tag of queue `hash` in this database; never 0.
fn tag_of(hash: QueueHash) -> u64 {
    hash.in_database(my_database())
}

fn enabled() -> bool {
    gucs::CLAIM_HINTS.get() && AREA.get().is_some()
}

/// `jq._claim_hint(queue text) RETURNS boolean`: whether claims of `queue` may start at its
/// hint now; the hint's key is then what [`_hint_priority`], [`_hint_run_at`] and [`_hint_id`]
/// return until the next call. False (run the full claim) when there is no hint, hints are off,
/// or it is this claim's turn to run the full claim: at most one claim of a queue at a time, at
/// least a second and at least a hundred times the CPU time the previous full claim used after it.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _claim_hint(queue: &str) -> bool {
    let Some(sh) = AREA.get().filter(|_| gucs::CLAIM_HINTS.get()) else {
        SEEN.set(Seen::default());
        return false;
    };
    let tag = tag_of(QueueHash::of(queue));
    let now = now_us();
    let seen = sh.slot(tag).with(|h| {
        let mine = h.tag == tag && h.valid;
        let turn = mine && now >= h.full_due;
        if turn {
            // This claim runs the full claim; the others keep using the hint meanwhile.
            h.full_due = now + FULL_CLAIM_TURN_US;
        }
        Seen { tag, slot_tag: h.tag, gen: h.gen, valid: mine && !turn, key: h.key, turn_at: if turn { now } else { 0 },
               cpu_at: 0 }
    });
    // Read after the slot's spin lock is released (a system call does not belong under it), and
    // only by the claim that took the turn: the hinted claims never pay for it.
    let seen = if seen.turn_at > 0 { Seen { cpu_at: cpu_us(), ..seen } } else { seen };
    SEEN.set(seen);
    if seen.turn_at > 0 {
        // The turn ends at the first job the full claim claims (jq._hint_advance), or right
        // after its statement if it claims none (jq._hint_turn_end, called by jq.claim), or, if
        // the statement fails, when its subtransaction or transaction ends ([`at_subxact_abort`],
        // [`at_commit`], [`at_abort`]). A turn held until it times out would make a job behind
        // the hint wait a minute.
        TURNS.with_borrow_mut(|t| t.push((tag, now, seen.cpu_at)));
    }
    seen.valid
}

/// Ends the turn that this backend took at `turn_at` on the queue with `tag`, if it still holds
/// it: the next full claim is due after a second or a hundred times the CPU time this one used
/// (`cpu` µs), whichever is longer, at most a minute. CPU time, not wall time: the bound is on
/// the CPU the walks take, and a full claim that waited (for a lock, or for a CPU on a loaded
/// machine) walked no more for it.
fn end_turn(h: &mut Hint, tag: u64, turn_at: i64, now: i64, cpu: i64) {
    if h.tag == tag && h.full_due == turn_at + FULL_CLAIM_TURN_US {
        h.full_due = now + FULL_CLAIM_EVERY_US.max((FULL_CLAIM_SPACING * cpu.max(0)).min(FULL_CLAIM_TURN_US));
    }
}

/// Ends this backend's turns on the queue with `tag` (all of them when `tag` is `None`) now.
fn end_turns(tag: Option<u64>) {
    if TURNS.with_borrow(|t| t.is_empty()) {
        return;  // the usual case, at every commit of a claiming backend
    }
    let ended: Vec<(u64, i64, i64)> = TURNS.with_borrow_mut(|t| {
        let (ended, kept) = t.drain(..).partition(|(g, _, _)| tag.is_none_or(|x| x == *g));
        *t = kept;
        ended
    });
    if ended.is_empty() {
        return;
    }
    let mut seen = SEEN.get();
    if ended.iter().any(|(g, at, _)| *g == seen.tag && *at == seen.turn_at) {
        seen.turn_at = 0;
        SEEN.set(seen);
    }
    if let Some(sh) = AREA.get() {
        let (now, cpu) = (now_us(), cpu_us());
        for (g, at, cpu_at) in ended {
            sh.slot(g).with(|h| end_turn(h, g, at, now, cpu - cpu_at));
        }
    }
}

/// `jq._hint_turn_end(queue text) RETURNS boolean`: called by jq.claim right after a full claim
/// that claimed nothing; if this backend had the turn to run the full claim of `queue`, it ends
/// now, so the next full claim is spaced by this statement's duration, not by what the caller's
/// transaction (or a long-poll's sleep) does next. Always true.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _hint_turn_end(queue: &str) -> bool {
    end_turns(Some(tag_of(QueueHash::of(queue))));
    true
}

/// `jq._hint_turn() RETURNS boolean`: whether the last `jq._claim_hint` of this backend gave it
/// the turn to run the full claim (jq.claim then claims one job: sql/claim.sql).
#[pg_extern(create_or_replace, stable, parallel_unsafe)]
fn _hint_turn() -> bool {
    SEEN.get().turn_at > 0
}

/// `jq._hint_priority() RETURNS integer`: the priority of the hint read by the last
/// `jq._claim_hint` (NULL when it returned false).
#[pg_extern(create_or_replace, stable, parallel_unsafe)]
fn _hint_priority() -> Option<i32> {
    let s = SEEN.get();
    s.valid.then_some(s.key.priority)
}

/// `jq._hint_run_at() RETURNS timestamptz`: as [`_hint_priority`], the run_at.
#[pg_extern(create_or_replace, stable, parallel_unsafe)]
fn _hint_run_at() -> Option<TimestampWithTimeZone> {
    let s = SEEN.get();
    if !s.valid {
        return None;
    }
    TimestampWithTimeZone::try_from(s.key.run_at).ok()
}

/// `jq._hint_id() RETURNS bigint`: as [`_hint_priority`], the id.
#[pg_extern(create_or_replace, stable, parallel_unsafe)]
fn _hint_id() -> Option<i64> {
    let s = SEEN.get();
    s.valid.then_some(s.key.id)
}

/// `jq._hint_advance(queue text, priority integer, run_at timestamptz, id bigint) RETURNS
/// boolean`: called by a claim for each job it claims; moves `queue`'s hint forward to that key
/// if no transaction made a job of the queue claimable or cleared the hint since this backend's last `jq._claim_hint`,
/// and only under READ COMMITTED; if the transaction rolls back, moves the hint back to the key.
/// In any isolation level, the first job ends this backend's turn to run the full claim.
/// Always true.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _hint_advance(queue: &str, priority: i32, run_at: TimestampWithTimeZone, id: i64) -> bool {
    let key = Key { priority, run_at: run_at.into_inner(), id };
    let tag = tag_of(QueueHash::of(queue));
    // If this transaction rolls back, the job is claimable again at its old place, which other
    // sessions' claims may have passed by then (whatever this session's settings).
    pend(tag, Change::Lower(key), true);
    // SAFETY: a PostgreSQL global of this backend.
    let read_committed = unsafe { pg_sys::XactIsoLevel } == pg_sys::XACT_READ_COMMITTED as i32;
    let seen = SEEN.get();
    if !read_committed || !enabled() {
        // The hint stays where it is, but a full claim's turn ends with its first job all the
        // same (else other claims wait for this transaction to end before the next full claim).
        if seen.turn_at > 0 && seen.tag == tag {
            end_turns(Some(tag));
        }
        return true;
    }
    if seen.tag != tag {
        return true;  // not read by this claim
    }
    if let Some(sh) = AREA.get() {
        let now = now_us();
        let cpu = if seen.turn_at > 0 { cpu_us() - seen.cpu_at } else { 0 };
        let restarted = sh.slot(tag).with(|h| {
            if seen.turn_at > 0 && h.tag == tag {
                // The full claim this backend ran is done: space the next one by its CPU time.
                end_turn(h, tag, seen.turn_at, now, cpu);
                // It took the queue's true head, so nothing claimable sorts before its first
                // job: start the hint there, even behind where it was, so that jobs a race left
                // behind the hint are swept by the hinted claims that follow instead of one full
                // claim per second. Unless a transaction moved the hint further back or cleared
                // it since this claim read it. The generation moves on, so claims that read the
                // old hint do not carry it forward past them again; and if the hint was moved
                // back or cleared meanwhile, neither do this claim's other rows (a job
                // committed after this claim's snapshot may be what moved it).
                let moved = h.gen != seen.gen;
                if h.valid && !(moved && h.key.before(&key)) {
                    h.key = key;
                }
                h.gen += 1;
                return if moved { None } else { Some(h.gen) };
            }
            if h.tag != seen.slot_tag || h.gen != seen.gen {
                return None;  // a job made claimable, cleared or taken since we read it
            }
            if h.tag != tag {
                // Unused or another queue's: ours now.
                *h = Hint { tag, gen: h.gen + 1, valid: true, key, full_due: now + FULL_CLAIM_EVERY_US,
                            watcher: 0, watch_until: 0 };
            } else if !h.valid || h.key.before(&key) {
                h.valid = true;
                h.key = key;
            }
            None
        });
        if seen.turn_at > 0 {
            // The first claimed row ends the turn; the claim's other rows move the hint forward
            // from where the turn put it.
            TURNS.with_borrow_mut(|t| t.retain(|(g, at, _)| !(*g == tag && *at == seen.turn_at)));
            SEEN.set(Seen { turn_at: 0, gen: restarted.unwrap_or(seen.gen), slot_tag: tag, ..seen });
        }
    }
    true
}

/// `jq._hint_watch(queue text) RETURNS timestamptz`: called by a long-polling jq.claim that
/// found nothing and is about to sleep: when it must wake at the latest to look again (NULL:
/// sleep until woken or its deadline).
///
/// A sleeping claim looks again only when a commit wakes it, and no commit wakes anyone for a
/// job left behind the hint (a row another transaction held while claims passed it, released
/// still ready). The queue's full claim, which finds such a job, runs only when a claim looks
/// (`jq._claim_hint` gives it the turn): with every consumer asleep, none would. So one
/// sleeping long-poll per queue, the watcher, caps its sleep at the next due full claim, at
/// most [`FULL_CLAIM_EVERY_US`] away (a turn held by another claim, or a spaced one, may move
/// it earlier), and its next look takes the turn. The others sleep until woken: one timed
/// look per queue and second, not one per sleeper. The watch lasts until the watcher stops
/// waiting ([`end_watch`]: src/wakeup.rs then offers it to another sleeper of the queue, which
/// takes it without looking); one not renewed a second after it was due is taken over. Only for a queue with a hint (without one
/// every look is the full claim), for a registered waiter, and not in a transaction with a
/// transaction id (it does not sleep: jq._claim_sleep). pg_test/tests/claim_hint.rs,
/// a_sleeping_long_poll_claims_a_job_left_behind_the_hint.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _hint_watch(queue: &str) -> Option<TimestampWithTimeZone> {
    TimestampWithTimeZone::try_from(take_watch(QueueHash::of(queue))?).ok()
}

/// Takes the watch of `queue` for this backend unless another sleeper holds it (renews it if
/// this backend does): when to wake at the latest (µs since 2000), or None. Called by
/// [`_hint_watch`] and by src/wakeup.rs for a sleeper offered the watch, which takes it without
/// looking. Tells src/wakeup.rs when the queue then has a watcher or needs none (an offer of the
/// watch is settled).
pub fn take_watch(queue: QueueHash) -> Option<i64> {
    let sh = AREA.get().filter(|_| gucs::CLAIM_HINTS.get() && crate::wakeup::waiting())?;
    // SAFETY: reads this backend's transaction state.
    if unsafe { pg_sys::GetTopTransactionIdIfAny() } != pg_sys::InvalidTransactionId {
        return None;
    }
    let (tag, me, now) = (tag_of(queue), my_procno() + 1, now_us());
    let until = sh.slot(tag).with(|h| {
        let watched = h.watcher != 0 && h.watcher != me && now <= h.watch_until + FULL_CLAIM_EVERY_US;
        if h.tag != tag || !h.valid || watched {
            return None;
        }
        h.watcher = me;
        h.watch_until = h.full_due.clamp(now + 1_000, now + FULL_CLAIM_EVERY_US);
        Some(h.watch_until)
    });
    crate::wakeup::watch_settled();
    if until.is_some() {
        WATCH.set(tag);
    }
    until
}

/// Ends this backend's watch (src/wakeup.rs, when its long-poll stops waiting): true when it
/// held one, which src/wakeup.rs then offers at once to another sleeper of the queue that takes
/// watches (a single-queue long-poll): it takes the watch as it wakes, without looking
/// ([`take_watch`]). A claim going to sleep meanwhile may take it too.
pub fn end_watch() -> bool {
    let tag = WATCH.replace(0);
    let Some(sh) = AREA.get().filter(|_| tag != 0) else { return false };
    let me = my_procno() + 1;
    sh.slot(tag).with(|h| {
        let mine = h.tag == tag && h.watcher == me;
        if mine {
            h.watcher = 0;
        }
        mine
    })
}

/// Records `change` of the hint with `tag` for the end of the transaction: at its commit, or
/// with `at_abort` at its (or a subtransaction's) rollback.
fn pend(tag: u64, change: Change, at_abort: bool) {
    if AREA.get().is_none() {
        return;  // no hints without shared memory (the GUC is not consulted: another session may use hints)
    }
    PENDING.with_borrow_mut(|p| {
        // One entry per (queue, when): a clear wins; else the earliest key.
        match p.iter_mut().find(|(t, _, a)| *t == tag && *a == at_abort) {
            Some((_, c, _)) => {
                *c = match (*c, change) {
                    (Change::Lower(a), Change::Lower(b)) => Change::Lower(if b.before(&a) { b } else { a }),
                    _ => Change::Clear,
                }
            }
            None => p.push((tag, change, at_abort)),
        }
    });
}

/// Called for a job made claimable whose priority and run_at are known: at commit, the hint of
/// `queue` moves back to (priority, run_at) if it is ahead of it.
pub fn note_ready_key(queue: QueueHash, priority: i32, run_at: i64) {
    pend(tag_of(queue), Change::Lower(Key { priority, run_at, id: 0 }), false);
}

/// Called by the paths that make jobs of `queue` claimable without knowing where they sort (a
/// retry due at once, a failure retried at once, priority aging): at commit, its hint is cleared.
pub fn note_ready(queue: QueueHash) {
    pend(tag_of(queue), Change::Clear, false);
}

/// `jq._hint_clear(queue text) RETURNS boolean`: clears the hint of `queue` when this transaction
/// commits (for a path that changes the claim order of ready jobs, e.g. priority aging). Always true.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _hint_clear(queue: &str) -> bool {
    note_ready(QueueHash::of(queue));
    true
}

/// Applies ended changes to the shared hints.
fn apply(changes: &[(u64, Change, bool)]) {
    let Some(sh) = AREA.get() else { return };
    for (tag, change, _) in changes {
        sh.slot(*tag).with(|h| {
            match change {
                Change::Lower(k) if h.tag == *tag && h.valid && !k.before(&h.key) => {
                    // The job sorts after the hint, which stays. But a claim that read the
                    // hint before this commit, with a snapshot that does not see the job, may
                    // be about to move the hint past it; the new generation cancels that
                    // advance (else the job waited for the next full claim: pickups of up to a
                    // second in bench/experiments/longpoll_pinned.sh, 8 of 15,200 at 800/s).
                    h.gen += 1;
                }
                Change::Lower(k) if h.tag == *tag && h.valid => {
                    h.key = *k;
                    h.gen += 1;
                }
                _ => {
                    if h.tag == *tag {
                        h.valid = false;
                    }
                    h.gen += 1;  // also cancels advances of claims that read the slot before
                }
            }
        });
    }
}

/// At commit (src/xact.rs, before the wakeups): ends this backend's turns and applies the
/// changes due at commit.
pub fn at_commit() {
    end_turns(None);
    let now: Vec<_> = PENDING.take().into_iter().filter(|(_, _, at_abort)| !*at_abort).collect();
    apply(&now);
}

/// At abort (src/xact.rs): ends this backend's turns and moves the hints back to the jobs its
/// claims hand back.
pub fn at_abort() {
    end_turns(None);
    let now: Vec<_> = PENDING.take().into_iter().filter(|(_, _, at_abort)| *at_abort).collect();
    apply(&now);
}

/// At `PREPARE TRANSACTION` (src/xact.rs): a prepared transaction's jobs become claimable at
/// COMMIT PREPARED, in another session: clear the hints now (conservative; the full claim finds
/// them once committed).
pub fn at_prepare() {
    end_turns(None);
    let all: Vec<_> = PENDING.take().into_iter().map(|(t, _, a)| (t, Change::Clear, a)).collect();
    apply(&all);
}

/// At the rollback of a subtransaction (src/xact.rs): a claim rolled back to a savepoint hands
/// its jobs back now. A turn still held here belongs to a full claim that failed (a turn never
/// outlives its statement otherwise): it ends now, not when the whole transaction does.
pub fn at_subxact_abort() {
    let aborts: Vec<_> = PENDING.with_borrow(|p| p.iter().filter(|(_, _, a)| *a).copied().collect());
    apply(&aborts);
    end_turns(None);
}
