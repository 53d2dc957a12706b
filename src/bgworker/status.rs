//! The rows of `jq._status()` (the SQL function is in [`super`]).

use super::slots::{self, SlotState, SlotStatus, MAX_DATABASES};
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
        // A recheck of a database last seen without jq: still that until the worker knows.
        SlotState::Starting | SlotState::Running | SlotState::NoSlot | SlotState::Exited if s.without_ext => {
            "no extension"
        }
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

/// The row of a database that has jq but no slot, so no maintenance worker.
fn not_served(me: pg_sys::Oid) -> Row {
    let why = format!(
        "this database has jq but no maintenance worker: add it to jq.databases if it is not listed \
         there (templates and databases that refuse connections are never served); if it is listed, \
         the launcher tracks {MAX_DATABASES} databases already (it serves at most that many): list fewer. Right \
         after a server start this row can show until the launcher's first pass"
    );
    (me, "not served".to_string(), None, None, None, 0, 0, 0, 0, 0, 0, 0.0, Some(why), None)
}

/// Every used slot as a row; plus, when jq is preloaded and this database (which has jq: the
/// function exists here) has no slot, a `not served` row, so that a database without
/// maintenance does not pass unseen.
pub fn rows() -> Vec<Row> {
    let statuses = slots::get().map(|sh| sh.statuses()).unwrap_or_default();
    let me = crate::backend::my_database();
    let unserved = slots::get().is_some() && !statuses.iter().any(|s| s.dboid == me);
    let mut rows: Vec<Row> = statuses.into_iter().map(row).collect();
    if unserved {
        rows.push(not_served(pg_sys::Oid::from(me)));
    }
    rows
}
