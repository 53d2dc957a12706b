//! Where the reaper's next pass starts in `jobs_running_idx` (`jq._reap_start`, `jq._reap_end`).
//!
//! A completed job leaves a dead entry in `jobs_running_idx`, keyed by the lease expiry it had.
//! Once that expiry is past, the entry lies in the range every reaper pass reads
//! (`lease_expires_at < now`, oldest first). Normally the first scan that passes it marks it
//! dead and vacuum removes it; while any snapshot older than the completion is open (a held xid,
//! a long REPEATABLE READ report) neither can happen, and a pass from the oldest expiry walks
//! every such entry, once a tick, a cost that grows for as long as the snapshot stays open
//! (docs/BENCHMARKS.md, "30-minute holds"; `a_reap_pass_during_a_held_snapshot_starts_past_the_dead_entries`
//! in pg_test/tests/leases/reap_start.rs).
//!
//! So a backend remembers where its last pass left the reaper: a pass that read every expired
//! lease up to its `now` lets the next one start at `now - MARGIN`; one that stopped at its
//! budget lets the next one go on from the expiry it reached; and a row a pass picked but left
//! running (a keyed job whose slot row another transaction holds, `jq._key_try_lock`) keeps the
//! next start at or before its expiry. The new start takes effect when the pass's transaction
//! commits (a rolled-back reap leaves the old one). What a later pass would then miss is a
//! running row whose lease expired before that start and that the last pass did not see: a row
//! another transaction had locked (SKIP LOCKED), or a claim or heartbeat that committed more
//! than MARGIN after its lease expired. A full pass from the oldest expiry catches those, at least every [`FULL_EVERY_US`] and at most once per ten times
//! its own duration (a full pass that walks a long dead range is spaced out like the claim's
//! full claim, src/claim_hint.rs). So an expired lease is reaped at the next tick as before,
//! except in those cases, where it waits for the next full pass.
//!
//! Only for passes whose `now` is the real time (within [`NEAR_US`] of the clock when the pass
//! starts): a pass at another instant (`jq._reap(now() + interval '2 days')`, as tests and manual recovery do) is a
//! full pass and forgets the start, since rows claimed later in real time expire before it.
//! The state is per backend: the background worker keeps it across its ticks; any other session
//! starts with a full pass.

use std::cell::Cell;
use std::time::Instant;

use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;

use crate::backend::now_us;

/// How far before the last committed pass's `now` the next pass starts, µs: longer than a
/// claim's or a heartbeat's transaction usually stays open after it computed a lease.
pub const MARGIN_US: i64 = 5_000_000;
/// Longest time between two full passes, µs.
pub const FULL_EVERY_US: i64 = 60_000_000;
/// A full pass is due again after at least this many times its own duration.
const FULL_SPACING: i64 = 10;
/// The longest spacing of full passes, µs (a pass's duration includes the hooks it runs).
const FULL_SPACING_MAX_US: i64 = 600_000_000;
/// A pass's `now` this close to the clock is the real time, µs.
pub const NEAR_US: u64 = 2_000_000;

#[derive(Clone, Copy)]
struct Start {
    /// The next pass starts at this lease expiry (PostgreSQL µs).
    from: i64,
    /// The next full pass is due at this `now`.
    full_due: i64,
}

/// The pass running in this backend: when it began, and the clock then if its `now` is the
/// real time.
#[derive(Clone, Copy)]
struct Began {
    at: Instant,
    clock: Option<i64>,
}

thread_local! {
    /// Where the next pass starts, as of the last committed pass.
    static START: Cell<Option<Start>> = const { Cell::new(None) };
    /// What the passes of the running transaction set, applied at its commit.
    static PENDING: Cell<Option<Start>> = const { Cell::new(None) };
    static BEGAN: Cell<Option<Began>> = const { Cell::new(None) };
}

/// The transaction committed: its passes' start holds from now on (src/xact.rs).
pub fn at_commit() {
    if let Some(p) = PENDING.take() {
        START.set(Some(p));
    }
}

/// The transaction, or one of its subtransactions, rolled back: the start stays where the last
/// committed pass left it (a start left earlier than it could be only costs reading).
pub fn at_abort() {
    PENDING.set(None);
}

/// `jq._reap_start(now timestamptz) RETURNS timestamptz`: the lease expiry where a reaper pass
/// at `now` starts, or NULL for a full pass (from the oldest expiry). Called by jq._reap.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _reap_start(now: TimestampWithTimeZone) -> Option<TimestampWithTimeZone> {
    let now = now.into_inner();
    let clock = now_us();
    let real = now.abs_diff(clock) <= NEAR_US;
    BEGAN.set(Some(Began { at: Instant::now(), clock: real.then_some(clock) }));
    if !real {
        // Rows claimed later in real time expire before any start this pass could leave.
        START.set(None);
        PENDING.set(None);
    }
    match PENDING.get().or(START.get()) {
        Some(s) if real && now < s.full_due && s.from <= now => TimestampWithTimeZone::try_from(s.from).ok(),
        _ => None,
    }
}

/// `jq._reap_end(now timestamptz, full boolean, reached timestamptz) RETURNS boolean`: the
/// reaper pass at `now` that jq._reap_start began (a full one if `full`) ended, having read every
/// expired lease up to `now` except from `reached` on (NULL: none left; else where its budget
/// ran out, or the earliest expiry of a row it picked but left running). At commit, the next
/// pass of this backend starts at `reached` or `now` - 5 s, whichever is earlier. Always true.
/// Called by jq._reap.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _reap_end(now: TimestampWithTimeZone, full: bool, reached: Option<TimestampWithTimeZone>) -> bool {
    let Some(began) = BEGAN.take() else { return true };
    let Some(clock) = began.clock else { return true };
    let now = now.into_inner();
    let took = i64::try_from(began.at.elapsed().as_micros()).unwrap_or(i64::MAX);
    let from = reached.map_or(i64::MAX, |r| r.into_inner()).min(now.min(clock).saturating_sub(MARGIN_US));
    let full_due = match (full, PENDING.get().or(START.get())) {
        (false, Some(s)) => s.full_due,
        _ => now.saturating_add(FULL_EVERY_US.max(took.saturating_mul(FULL_SPACING).min(FULL_SPACING_MAX_US))),
    };
    PENDING.set(Some(Start { from, full_due }));
    true
}
