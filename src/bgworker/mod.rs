//! The background workers: one launcher per cluster ([`launcher`]), one maintenance worker
//! per database with jq ([`worker`]) and short-lived probes that find out which databases have
//! jq ([`probe`]), with their shared memory ([`slots`], [`presence`]) and the launcher's memory
//! ([`census`]), the `NOTIFY jq_ready` of queues that got claimable jobs ([`notify`]) and the
//! utility hook that steps aside for `DROP DATABASE` and hears `DROP EXTENSION jq`
//! ([`drop_hook`]). This module is their SQL face: `jq._status()`, `jq._preloaded()`,
//! `jq._launcher_wake()`.
//!
//! * The launcher connects to no database. It lists `pg_database` (every database that allows
//!   connections, or those named in `jq.databases`) and keeps one maintenance worker running
//!   per database that has jq, up to `jq.max_databases` of them; a database without jq takes
//!   nothing once a probe has looked at it ([`presence`] explains how it stays right). It wakes
//!   when a worker or probe exits (it is their `bgw_notify_pid`), when a commit creates or drops
//!   jq (`jq._launcher_wake()`, the utility hook), and every second.
//! * A maintenance worker runs promote, reap, cron and prune each pass, then the NOTIFYs, and
//!   records the pass in its slot for `jq.status()`.
//!
//! Modelled on pg_cron's scheduler (start after recovery, short restart time, latch waits,
//! SIGHUP reload, one transaction per duty) and PostgreSQL's autovacuum launcher (a
//! database-less launcher that scans pg_database), minus pg_cron's one-database limit.

mod census;
pub mod drop_hook;
mod hooks;
pub mod launcher;
pub mod notify;
pub mod presence;
pub mod probe;
mod process;
pub mod slots;
mod status;
pub mod worker;

use pgrx::prelude::*;
use std::cell::Cell;

/// Seconds before a database whose probe or worker could not start or answer is tried again.
pub const RECHECK_SECS: i64 = 10;
/// Seconds a database stays unserved after `DROP DATABASE` / rename / use as a template starts.
pub const SUSPEND_SECS: i64 = 10;

/// Attaches the database slots and the presence area, registers the launcher and installs the
/// utility hook. Called from `_PG_init` while preloading only.
// pgrx's macro tests the features of PostgreSQL versions this crate does not declare.
#[allow(unexpected_cfgs)]
pub fn init() {
    pgrx::pg_shmem_init!(SLOTS_HEADER);
    pgrx::pg_shmem_init!(SLOT_ARRAY);
    pgrx::pg_shmem_init!(PRESENCE);
    launcher::register();
    drop_hook::init();
}

use presence::AREA as PRESENCE;
use slots::{AREA as SLOTS_HEADER, SLOTS as SLOT_ARRAY};

thread_local! {
    /// This transaction may have created or dropped jq in this database (`CREATE EXTENSION`,
    /// `ALTER EXTENSION … UPDATE`, `DROP EXTENSION`, `COMMIT PREPARED`): tell the launcher at
    /// commit.
    static PRESENCE_CHANGED: Cell<bool> = const { Cell::new(false) };
}

/// Notes that this transaction may create or drop jq in this database (no-op when not
/// preloaded); the launcher hears of it when the transaction commits.
pub fn note_presence_change() {
    if presence::get().is_some() {
        PRESENCE_CHANGED.set(true);
    }
}

/// At commit (src/xact.rs): if this transaction may have created or dropped jq here, marks the
/// database in the launcher's change filter and wakes the launcher, so a new database is served
/// within seconds (`a_database_with_jq_created_last_is_served_past_many_without_jq`).
pub fn at_commit() {
    if !PRESENCE_CHANGED.replace(false) {
        return;
    }
    let (Some(p), Some(sh)) = (presence::get(), slots::get()) else { return };
    p.mark_changed(crate::backend::my_database());
    sh.wake_launcher();
}

/// At abort or prepare (src/xact.rs): forgets a change of this transaction (a prepared one is
/// reported by the `COMMIT PREPARED` that ends it).
pub fn at_abort() {
    PRESENCE_CHANGED.set(false);
}

/// `jq._launcher_wake()`: when this transaction commits, tells the launcher that jq exists in
/// this database (run by `CREATE EXTENSION jq` and `ALTER EXTENSION jq UPDATE`, so a new
/// database is served within seconds). No-op when not preloaded.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _launcher_wake() {
    note_presence_change();
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
