//! The rows of `jq._status()` (the SQL function is in [`super`]).

use super::presence::{self, Unserved};
use super::slots::{self, SlotState, SlotStatus};
use pgrx::prelude::*;

/// One row of `jq._status()`: dboid, state, pid, started_at, last_pass_at, passes, promoted,
/// reaped, fired, pruned, notified, pass_ms, last_error, last_error_at.
pub type Row = (
    pg_sys::Oid,
    String,
    Option<i32>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    f64,
    Option<String>,
    Option<TimestampWithTimeZone>,
);

/// The state as `jq.status()` shows it.
fn label(s: &SlotStatus) -> &'static str {
    match s.state {
        SlotState::Starting => "starting",
        SlotState::Running => "running",
        SlotState::NoExtension => "no extension",
        SlotState::Suspended => "suspended",
        SlotState::NoSlot => "waiting for a worker slot",
        SlotState::Exited => "restarting",
        SlotState::Free => "unknown",
    }
}

fn ts(v: i64) -> Option<TimestampWithTimeZone> {
    (v != 0).then(|| TimestampWithTimeZone::try_from(v).ok()).flatten()
}

fn row(s: SlotStatus) -> Row {
    (
        pg_sys::Oid::from(s.dboid),
        label(&s).to_string(),
        (s.pid != 0).then_some(s.pid),
        ts(s.started_at),
        ts(s.last_pass_at),
        s.passes as i64,
        s.promoted,
        s.reaped,
        s.fired,
        s.pruned,
        s.notified,
        s.pass_ms,
        s.error(),
        ts(s.error_at),
    )
}

/// A `not served` row: a database that has jq but no maintenance worker, and why.
fn not_served(dboid: u32, why: String) -> Row {
    (pg_sys::Oid::from(dboid), "not served".to_string(), None, None, None, 0, 0, 0, 0, 0, 0, 0.0, Some(why), None)
}

/// Why a database the launcher found with jq has no slot.
fn no_slot_left(u: &Unserved) -> String {
    format!(
        "this database has jq but no maintenance worker: all {} slots of jq.max_databases are taken by \
         other databases with jq ({} databases with jq are not served); raise jq.max_databases (takes a \
         server restart) or list fewer databases in jq.databases",
        slots::max_databases(),
        u.count
    )
}

/// Why the calling database, which has jq, has no slot when the launcher does not list it as
/// one without a free slot (`u`: it may be one past the listed ones).
fn not_found(u: &Unserved) -> String {
    let mut why = "this database has jq but no maintenance worker: add it to jq.databases if it is not \
                   listed there (templates and databases that refuse connections are never served). If it \
                   is listed, the launcher has not found jq here yet: it looks within seconds of CREATE \
                   EXTENSION jq and of a server start, when a background worker is free (max_worker_processes)"
        .to_string();
    if u.count > u.listed {
        why += &format!(
            "; or it is one of the {} databases with jq that have no slot: raise jq.max_databases ({})",
            u.count,
            slots::max_databases()
        );
    }
    why
}

/// Every used slot as a row; a `not served` row for each database with jq the launcher has no
/// slot for (jq.max_databases); and, when this database (which has jq: the function exists
/// here) has no slot, a `not served` row for it, so that a database without maintenance does
/// not pass unseen.
pub fn rows() -> Vec<Row> {
    let (Some(sh), Some(p)) = (slots::get(), presence::get()) else { return Vec::new() };
    let statuses = sh.statuses();
    let unserved = p.unserved();
    let has_slot = |oid: u32| statuses.iter().any(|s| s.dboid == oid);
    let mut rows: Vec<Row> =
        unserved.oids().iter().filter(|o| !has_slot(**o)).map(|o| not_served(*o, no_slot_left(&unserved))).collect();
    let me = crate::backend::my_database();
    if !has_slot(me) && !unserved.oids().contains(&me) {
        rows.push(not_served(me, not_found(&unserved)));
    }
    rows.extend(statuses.into_iter().map(row));
    rows
}
