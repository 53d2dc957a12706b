//! The background workers: one launcher per cluster ([`launcher`]) and one maintenance worker
//! per database ([`worker`]), with their shared memory ([`slots`]), the `NOTIFY jq_ready` of
//! queues that got claimable jobs ([`notify`]) and the hook that steps aside for
//! `DROP DATABASE` ([`drop_hook`]). This module is their SQL face: `jq._status()`,
//! `jq._preloaded()`, `jq._launcher_wake()`.
//!
//! * The launcher connects to no database. It lists `pg_database` (every database that allows
//!   connections, or those named in `jq.databases`) and keeps one maintenance worker running
//!   per database whose worker has not reported "no jq here". It wakes when a worker exits (it
//!   is each worker's `bgw_notify_pid`), when `CREATE EXTENSION jq` commits
//!   (`jq._launcher_wake()`), and every second; databases without jq are rechecked every
//!   [`RECHECK_SECS`] s.
//! * A maintenance worker runs promote, reap, cron and prune each pass, then the NOTIFYs, and
//!   records the pass in its slot for `jq.status()`.
//!
//! Modelled on pg_cron's scheduler (start after recovery, short restart time, latch waits,
//! SIGHUP reload, one transaction per duty) and PostgreSQL's autovacuum launcher (a
//! database-less launcher that scans pg_database), minus pg_cron's one-database limit.

pub mod drop_hook;
pub mod launcher;
pub mod notify;
mod process;
pub mod slots;
mod status;
pub mod worker;

use pgrx::prelude::*;
use slots::{SlotState, AREA as SLOTS};
use std::cell::Cell;

/// Seconds before a database without jq (or whose worker could not start) is checked again.
pub const RECHECK_SECS: i64 = 10;
/// Seconds a database stays unserved after `DROP DATABASE` / rename / use as a template starts.
pub const SUSPEND_SECS: i64 = 10;

/// Attaches the database slots, registers the launcher and installs the `DROP DATABASE` hook.
/// Called from `_PG_init` while preloading only.
pub fn init() {
    pgrx::pg_shmem_init!(SLOTS);
    launcher::register();
    drop_hook::init();
}

thread_local! {
    /// This transaction ran `CREATE EXTENSION jq`: tell the launcher at commit.
    static EXTENSION_CREATED: Cell<bool> = const { Cell::new(false) };
}

/// At commit (src/xact.rs): if this transaction created jq here, marks the database's slot for
/// a recheck now and wakes the launcher, so a new database is served within a second
/// (`a_new_database_with_jq_is_served_within_seconds_and_others_are_not`).
pub fn at_commit() {
    if !EXTENSION_CREATED.replace(false) {
        return;
    }
    let Some(sh) = slots::get() else { return };
    if let Some(slot) = sh.slot_for_in(crate::backend::my_database(), SlotState::NoExtension) {
        slot.with(|s| {
            s.ext_gen += 1;
            if s.state != SlotState::Running && s.state != SlotState::Starting {
                s.recheck_at = 0;
            }
        });
    }
    sh.wake_launcher();
}

/// At abort or prepare (src/xact.rs): forgets a `CREATE EXTENSION` of this transaction.
pub fn at_abort() {
    EXTENSION_CREATED.set(false);
}

/// `jq._launcher_wake()`: when this transaction commits, tells the launcher that jq exists in
/// this database (run by `CREATE EXTENSION jq`, so a new database is served within a second).
/// No-op when not preloaded.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _launcher_wake() {
    if slots::get().is_some() {
        EXTENSION_CREATED.set(true);
    }
}

/// `jq._status()`: one row per database slot in shared memory (see `jq.status()`), plus a
/// `not served` row for this database when it has jq but no slot.
#[pg_extern(create_or_replace, volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn _status() -> TableIterator<
    'static,
    (
        name!(dboid, pg_sys::Oid),
        name!(state, String),
        name!(pid, Option<i32>),
        name!(started_at, Option<TimestampWithTimeZone>),
        name!(last_pass_at, Option<TimestampWithTimeZone>),
        name!(passes, i64),
        name!(promoted, i64),
        name!(reaped, i64),
        name!(fired, i64),
        name!(pruned, i64),
        name!(notified, i64),
        name!(pass_ms, f64),
        name!(last_error, Option<String>),
        name!(last_error_at, Option<TimestampWithTimeZone>),
    ),
> {
    TableIterator::new(status::rows())
}

/// `jq._preloaded()`: whether jq's shared memory (and so the background workers and wakeups)
/// is present, i.e. jq is in `shared_preload_libraries`.
#[pg_extern(create_or_replace, stable, parallel_safe)]
fn _preloaded() -> bool {
    slots::get().is_some()
}
