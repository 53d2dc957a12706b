//! On_dead hooks in a database's maintenance worker. The reap duty calls the hooks of the jobs it
//! makes dead in its own transaction under `jq.hook_timeout` ([`run_reap`]); the hooks duty,
//! after the pass's other duties, calls the hooks that are due (`jq.pending_hooks`: queued by a
//! reap that overran, or failed before), one per transaction, each under the same timeout
//! ([`run_hooks`]). A hook that hangs or loops is cancelled at its timeout and waits its retry
//! delay like any failed call, so it delays maintenance by at most a timeout or two per pass,
//! never reaping or promotion of any queue for longer
//! (`a_hanging_hook_does_not_hold_up_maintenance` in pg_test/tests/kinds/hooks.rs; control
//! `hook_without_timeout` there).

use super::timeout;
use super::worker::{in_transaction, run_duty, Duty};
use crate::gucs;
use pgrx::bgworkers::BackgroundWorker;
use pgrx::prelude::*;
use std::time::{Duration, Instant};

/// At most this many hook calls per pass.
const MAX_CALLS: usize = 100;
/// No new call starts after the duty has run this long (the call in progress may still take
/// up to `jq.hook_timeout`).
const BUDGET: Duration = Duration::from_secs(1);

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

/// The reap duty, which calls the on_dead hooks of the jobs it makes dead in its transaction,
/// under `jq.hook_timeout`; when that fires (a hook hangs, or the reap itself overran it) the
/// transaction is rolled back and the reap redone with the hooks queued for [`run_hooks`].
pub fn run_reap() -> Duty {
    let ms = gucs::HOOK_TIMEOUT_MS.get();
    let (d, fired) = timeout::bounded(ms, || run_duty("reap"));
    if !fired || d.error.is_none() {
        return d;
    }
    warning!("jq maintenance: reap: on_dead hooks overran jq.hook_timeout ({ms} ms); reaping again with them queued");
    timeout::bounded(ms, || run_duty("reap_deferring_hooks")).0
}

/// Calls the hook of the pending row (`jq._run_hook`) in a transaction of its own under
/// `jq.hook_timeout`; `Err` when the transaction failed (the timeout, above all).
fn call(id: i64, attempt: i32) -> Result<bool, String> {
    let (r, _) = timeout::bounded(gucs::HOOK_TIMEOUT_MS.get(), || {
        in_transaction(|| {
            Spi::get_one_with_args::<bool>(
                "SELECT jq._run_hook($1, $2, pg_catalog.now())",
                &[id.into(), attempt.into()],
            )
        })
    });
    match r {
        Ok(Ok(v)) => Ok(v.unwrap_or(false)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e),
    }
}
