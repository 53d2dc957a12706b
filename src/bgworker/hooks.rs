//! The hooks duty of a database's maintenance worker, after the pass's other duties: calls the
//! on_dead hooks that are due (`jq.pending_hooks`: queued by the reaper, or failed before), one
//! per transaction, after counting the attempt and moving `next_at` in a transaction before it
//! (`jq._take_hook`). Each call runs under `jq.hook_timeout` (src/hook_timer.rs): a hook that
//! hangs is cancelled there and waits its retry delay like any failed call, and one that ignores
//! the cancel ends this worker's session (the launcher starts a new one) with its attempt already
//! counted. So hooks cost a pass at most about a second plus one time limit, and never hold up
//! reaping or promotion of any queue (`a_hanging_hook_does_not_hold_up_maintenance` in
//! pg_test/tests/kinds/hooks.rs, `a_hook_that_swallows_its_cancel_does_not_hold_up_maintenance`
//! in pg_test/tests/kinds/breakit.rs).

use super::worker::{in_transaction, Duty};
use pgrx::bgworkers::BackgroundWorker;
use pgrx::prelude::*;
use std::time::{Duration, Instant};

/// At most this many hook calls per pass.
const MAX_CALLS: usize = 100;
/// No new call starts after the duty has run this long (the call in progress may still take
/// up to `jq.hook_timeout`, or twice that plus 1 s when the worker is terminated).
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
                // The call's transaction failed outside the hook's subtransaction: say so on the row.
                let error = format!("XX000: {e}");
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

/// Calls the hook of the pending row (`jq._run_hook`, whose call runs under `jq.hook_timeout`:
/// src/hook_timer.rs) in a transaction of its own; `Err` when the transaction failed.
fn call(id: i64, attempt: i32) -> Result<bool, String> {
    let r = in_transaction(|| {
        Spi::get_one_with_args::<bool>(
            "SELECT jq._run_hook($1, $2, pg_catalog.now())",
            &[id.into(), attempt.into()],
        )
    });
    match r {
        Ok(Ok(v)) => Ok(v.unwrap_or(false)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e),
    }
}
