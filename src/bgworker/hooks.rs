//! The hooks duty of a database's maintenance worker: calls the on_dead hooks that are due
//! (`jq.pending_hooks`: queued by the reaper, or failed before), one per transaction, each under
//! `jq.hook_timeout`, after the pass's other duties. A hook that hangs or loops is cancelled at
//! its timeout and waits its retry delay like any failed call, so it delays maintenance by at
//! most one timeout per call, never reaping or promotion of any queue
//! (`a_hanging_hook_does_not_hold_up_maintenance` in pg_test/tests/kinds/hooks.rs; control
//! `hook_without_timeout` there).

use super::worker::{in_transaction, Duty};
use crate::gucs;
use pgrx::bgworkers::BackgroundWorker;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::time::{Duration, Instant};

/// At most this many hook calls per pass.
const MAX_CALLS: usize = 100;
/// No new call starts after the duty has run this long (the call in progress may still take
/// up to `jq.hook_timeout`).
const BUDGET: Duration = Duration::from_secs(1);

// PostgreSQL's timeout API (utils/timeout.h), which pgrx does not bind. The background worker
// arms the statement timeout itself: PostgresMain does that for client statements only.
extern "C-unwind" {
    fn enable_timeout_after(id: u32, delay_ms: i32);
    fn disable_timeout(id: u32, keep_indicator: bool);
    fn get_timeout_indicator(id: u32, reset_indicator: bool) -> bool;
}
/// `STATEMENT_TIMEOUT` of PostgreSQL 15's `enum TimeoutId` (utils/timeout.h).
const STATEMENT_TIMEOUT: u32 = 3;

/// Runs the due hooks; `done` counts the calls that settled their row.
pub fn run_hooks() -> Duty {
    let started = Instant::now();
    let mut duty = Duty { done: 0, error: None };
    for _ in 0..MAX_CALLS {
        let taken = in_transaction(|| {
            Spi::get_two::<i64, i32>(
                "SELECT t.job_id, t.attempt FROM (SELECT 1) one LEFT JOIN jq._take_hook(pg_catalog.now()) t ON true",
            )
        });
        let (id, attempt) = match taken {
            Ok(Ok((Some(id), Some(attempt)))) => (id, attempt),
            Ok(Ok(_)) => break,
            Ok(Err(e)) => {
                duty.error = Some(e.to_string());
                break;
            }
            Err(e) => {
                duty.error = Some(e);
                break;
            }
        };
        match call(id, attempt) {
            Ok(true) => duty.done += 1,
            Ok(false) => {}
            Err(e) => {
                // The call's transaction was rolled back (timeout): say so on the row.
                let error = format!("57014: {e} (jq.hook_timeout {} ms)", gucs::HOOK_TIMEOUT_MS.get());
                let _ = in_transaction(|| {
                    Spi::run_with_args(
                        "SELECT jq._hook_interrupted($1, $2, $3, pg_catalog.now())",
                        &[id.into(), attempt.into(), error.clone().into()],
                    )
                });
                duty.error = Some(format!("on_dead hook of job {id}: {error}"));
            }
        }
        if started.elapsed() >= BUDGET || BackgroundWorker::sigterm_received() {
            break;
        }
    }
    duty
}

/// Calls the hook of the pending row (`jq._run_hook`) in a transaction of its own under
/// `jq.hook_timeout`; `Err` when the transaction failed (the timeout, above all).
fn call(id: i64, attempt: i32) -> Result<bool, String> {
    // SAFETY: arms and disarms the backend's own statement-timeout timer, as start_xact_command
    // and finish_xact_command do for a client statement; its handler sets QueryCancelPending,
    // which the next CHECK_FOR_INTERRUPTS turns into ERROR 57014 inside the transaction.
    // Negative control only (cargo feature `break-hook-timeout`): no timeout, so a hanging
    // hook holds up every later pass (a_hanging_hook_does_not_hold_up_maintenance fails).
    if !cfg!(feature = "break-hook-timeout") {
        unsafe { enable_timeout_after(STATEMENT_TIMEOUT, gucs::HOOK_TIMEOUT_MS.get()) };
    }
    let r = in_transaction(|| {
        Spi::get_one_with_args::<bool>(
            "SELECT jq._run_hook($1, $2, pg_catalog.now())",
            &[id.into(), attempt.into()],
        )
    });
    // SAFETY: see above. A timeout that fired after the call ended must not cancel whatever
    // this worker runs next.
    unsafe {
        disable_timeout(STATEMENT_TIMEOUT, true);
        if get_timeout_indicator(STATEMENT_TIMEOUT, true) {
            pg_sys::QueryCancelPending = 0;
        }
    }
    match r {
        Ok(Ok(v)) => Ok(v.unwrap_or(false)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e),
    }
}
