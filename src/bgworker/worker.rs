//! A database's maintenance worker: runs one pass right away (the recovery pass) and then one
//! every `jq.tick_interval`: promote, reap, cron, prune, each duty in its own transaction
//! through `jq._maintain_guarded` (which turns an error into a value, so a broken row never stops
//! the worker), then the due on_dead hooks ([`super::hooks`]), then the NOTIFYs of
//! [`super::notify`]. Each pass is recorded in the database's
//! slot for `jq.status()`.
//!
//! It exits on SIGTERM (the launcher starts a new one within a second unless the server is
//! shutting down), when jq is dropped from its database, or when the database is being dropped,
//! renamed or copied ([`super::drop_hook`]).

use super::notify::notify_ready_queues;
use super::process::{die_on_sigterm, now_ts, process_alive, reload_config_if_asked, USECS_PER_SEC};
use super::presence;
use super::slots::{self, DbSlot, SlotState};
use super::RECHECK_SECS;
use crate::{backend, gucs};
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::time::Duration;

/// The duties of a pass, in order (the arguments of `jq._maintain_guarded`).
const DUTIES: [&str; 4] = ["promote", "reap", "cron", "prune"];

/// Result of one duty: how many rows it handled and its error, if any.
pub struct Duty {
    pub done: i64,
    pub error: Option<String>,
}

/// Runs `body` in its own transaction; an error (after `jq._maintain_guarded`'s own guard,
/// only an unexpected one) is logged, the transaction aborted, and returned as text.
pub fn in_transaction<R>(body: impl FnOnce() -> R + std::panic::UnwindSafe) -> Result<R, String> {
    // SAFETY: the standard background-worker transaction sequence (worker_spi, pg_cron); on
    // error the transaction is aborted, which releases its locks, snapshots and SPI state.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let result = PgTryBuilder::new(|| Ok(body()))
        .catch_others(|e| {
            let msg = match &e {
                pg_sys::panic::CaughtError::PostgresError(r)
                | pg_sys::panic::CaughtError::ErrorReport(r)
                | pg_sys::panic::CaughtError::RustPanic { ereport: r, .. } => r.message().to_string(),
            };
            Err(msg)
        })
        .execute();
    // SAFETY: see above.
    unsafe {
        match &result {
            Ok(_) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::CommitTransactionCommand();
            }
            Err(msg) => {
                warning!("jq maintenance: {msg}");
                pg_sys::AbortCurrentTransaction();
            }
        }
    }
    result
}

fn run_duty(duty: &str) -> Duty {
    let r = in_transaction(|| {
        Spi::get_two_with_args::<i64, String>(
            "SELECT done::bigint, error FROM jq._maintain_guarded($1, pg_catalog.now())",
            &[duty.into()],
        )
    });
    match r {
        Ok(Ok((done, error))) => {
            if let Some(e) = &error {
                warning!("jq maintenance: {duty}: {e}");
            }
            Duty { done: done.unwrap_or(0), error }
        }
        Ok(Err(e)) => Duty { done: 0, error: Some(e.to_string()) },
        Err(msg) => Duty { done: 0, error: Some(msg) },
    }
}

/// Empties the history tables of finished jobs whose jobs are all past retention
/// (`jq._truncate_history`), in a transaction of its own: inside the prune duty, run in
/// `jq._maintain_guarded`'s exception block (a subtransaction), it counts as a transaction block
/// and truncates nothing (src/xact.rs, `_in_transaction_block`). Checked by
/// `the_worker_truncates_history_tables_past_retention` in pg_test/tests/bgworker/duties.rs.
fn truncate_history() -> Duty {
    let r = in_transaction(|| -> Result<Option<i64>, pgrx::spi::Error> {
        // A database still on a version without history tables: nothing to do.
        let known = Spi::get_one::<bool>(
            "SELECT pg_catalog.to_regprocedure('jq._truncate_history(timestamptz)') IS NOT NULL",
        )?;
        if known != Some(true) {
            return Ok(Some(0));
        }
        Spi::get_one::<i64>("SELECT jq._truncate_history(pg_catalog.now())::bigint")
    });
    match r {
        Ok(Ok(done)) => Duty { done: done.unwrap_or(0), error: None },
        Ok(Err(e)) => Duty { done: 0, error: Some(e.to_string()) },
        Err(msg) => Duty { done: 0, error: Some(msg) },
    }
}

/// Whether jq (recent enough for this library) is installed in the connected database.
pub fn extension_ready() -> Result<bool, String> {
    in_transaction(|| {
        Spi::get_one::<bool>(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jq') \
             AND pg_catalog.to_regprocedure('jq._maintain_guarded(text,timestamptz)') IS NOT NULL",
        )
        .ok()
        .flatten()
        .unwrap_or(false)
    })
}

#[pg_guard]
unsafe extern "C-unwind" fn worker_exit(_code: i32, arg: pg_sys::Datum) {
    let dboid = arg.value() as u32;
    if let Some(slot) = slots::get().and_then(|sh| sh.slot_of(dboid)) {
        let me = backend::my_pid();
        slot.with(|s| {
            if s.pid == me {
                s.pid = 0;
                if s.state == SlotState::Running {
                    // Let the launcher start the next worker at once.
                    s.state = SlotState::Exited;
                    s.recheck_at = 0;
                }
            }
        });
    }
}

/// Entry point of a database's maintenance worker; the argument is the database oid.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn jq_db_worker_main(arg: pg_sys::Datum) {
    let dboid = arg.value() as u32;
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    die_on_sigterm();
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(dboid)), None);
    // A duty that waits longer than this for a lock (a transaction holding jq.jobs in EXCLUSIVE
    // mode, e.g. an open jq.drop_queue or a prepared transaction) fails and is recorded instead
    // of stalling this database's maintenance.
    // SAFETY: sets a GUC for this session, as SET would.
    unsafe {
        pg_sys::SetConfigOption(c"lock_timeout".as_ptr(), c"5s".as_ptr(),
                                pg_sys::GucContext::PGC_SUSET, pg_sys::GucSource::PGC_S_SESSION);
    }
    // Maintenance reads in READ COMMITTED whatever the database's or role's default: the
    // truncation of history tables truncates nothing at a stricter level (sql/history.sql).
    // SAFETY: as above.
    unsafe {
        pg_sys::SetConfigOption(c"default_transaction_isolation".as_ptr(), c"read committed".as_ptr(),
                                pg_sys::GucContext::PGC_SUSET, pg_sys::GucSource::PGC_S_SESSION);
    }
    // The launcher gave the slot before it started this worker; none left means it took it
    // back meanwhile (the database left jq.databases).
    let Some(slot) = slots::get().and_then(|sh| sh.slot_of(dboid)) else { return };
    if !take_slot(slot) {
        return;
    }
    // SAFETY: registers the slot cleanup for any exit path (including ERROR and SIGTERM).
    unsafe {
        pg_sys::before_shmem_exit(Some(worker_exit), pg_sys::Datum::from(dboid));
        pg_sys::pgstat_report_appname(c"jq maintenance".as_ptr());
    }
    loop {
        reload_config_if_asked();
        if !still_installed(slot) {
            return;
        }
        let started = std::time::Instant::now();
        let Some((counts, error)) = run_pass() else { return };
        report_stats();
        record_pass(slot, counts, error, started.elapsed());
        let tick = Duration::from_millis(gucs::TICK_INTERVAL_MS.get().max(10) as u64);
        let wait = tick.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
        if !BackgroundWorker::wait_latch(Some(wait)) {
            return;
        }
    }
}

/// Marks the slot as served by this process; false when another live worker serves it, or a
/// `DROP`/`RENAME`/copy of the database began while this one connected (the hook found no pid to
/// signal, so this worker steps aside itself; both sides hold the slot lock: no gap).
fn take_slot(slot: &DbSlot) -> bool {
    let me = backend::my_pid();
    let now = now_ts();
    slot.with(|s| {
        let duplicate = s.state == SlotState::Running && s.pid != 0 && s.pid != me && process_alive(s.pid);
        if duplicate || (s.state == SlotState::Suspended && now < s.recheck_at) {
            return false;
        }
        s.state = SlotState::Running;
        s.pid = me;
        s.started_at = now;
        true
    })
}

/// Whether jq is still installed here; if not, records NoExtension with the presence
/// generation read before the look, for the launcher, which frees the slot and remembers the
/// database as without jq unless a `CREATE EXTENSION jq` committed meanwhile
/// (src/bgworker/presence.rs). A look that failed (logged) says nothing: the worker goes on and
/// looks again at its next pass, rather than have the launcher forget a database with jq.
fn still_installed(slot: &DbSlot) -> bool {
    let generation = presence::get().map(|p| p.generation()).unwrap_or(0);
    if extension_ready() != Ok(false) {
        return true;
    }
    slot.with(|s| {
        s.state = SlotState::NoExtension;
        s.checked_gen = generation;
        s.pid = 0;
        s.recheck_at = now_ts() + RECHECK_SECS * USECS_PER_SEC;
    });
    false
}

/// One pass: the duties, then the NOTIFYs. Returns the counts (promoted, reaped, fired,
/// pruned, notified) and the last error; None when SIGTERM arrived.
fn run_pass() -> Option<([i64; 5], Option<String>)> {
    let mut counts = [0i64; 5];
    let mut error: Option<String> = None;
    for (i, duty) in DUTIES.iter().enumerate() {
        // The worker's reaper queues the on_dead hooks of the jobs it makes dead for the hooks
        // duty below instead of calling them inline (jq._on_dead): no hook holds up reaping.
        let d = run_duty(if *duty == "reap" { "reap_deferring_hooks" } else { duty });
        counts[i] = d.done;
        if let Some(e) = d.error {
            error = Some(format!("{duty}: {e}"));
        }
        if BackgroundWorker::sigterm_received() {
            return None;
        }
    }
    let t = truncate_history();
    counts[3] += t.done;
    if let Some(e) = t.error {
        error = Some(format!("prune: {e}"));
    }
    let h = super::hooks::run_hooks();
    if let Some(e) = h.error {
        error = Some(format!("hooks: {e}"));
    }
    if BackgroundWorker::sigterm_received() {
        return None;
    }
    let n = notify_ready_queues();
    counts[4] = n.done;
    if let Some(e) = n.error {
        error = Some(format!("notify: {e}"));
    }
    Some((counts, error))
}

/// Sends the pass's table statistics (rows its duties updated and deleted) to the cumulative
/// statistics, which autovacuum reads to decide when jq.jobs needs a vacuum. A background worker
/// has no idle loop that sends them (PostgresMain's does before it waits for a command), so
/// without this call they would be sent only when the worker exits
/// (`the_workers_deletes_reach_the_statistics_autovacuum_reads` in pg_test/tests/bgworker/duties.rs).
/// PostgreSQL sends at most once a second (force = false).
fn report_stats() {
    // SAFETY: outside any transaction, as PostgresMain calls it.
    unsafe {
        pg_sys::pgstat_report_stat(false);
    }
}

/// Records a pass in the slot.
fn record_pass(slot: &DbSlot, counts: [i64; 5], error: Option<String>, took: Duration) {
    let at = now_ts();
    slot.with(|s| {
        s.last_pass_at = at;
        s.passes += 1;
        [s.promoted, s.reaped, s.fired, s.pruned, s.notified] = counts;
        s.pass_ms = took.as_secs_f64() * 1000.0;
        if let Some(e) = &error {
            s.set_error(e, at);
        }
    });
}
