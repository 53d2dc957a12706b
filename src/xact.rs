//! The end of a transaction: the one owner of jq's transaction and subtransaction callbacks.
//!
//! Statements record what must happen when their transaction ends in backend-local lists of
//! the subsystems (claim-start hints, wakeups, the launcher's news of a new extension); the
//! callbacks here call down into them. Registered once per process from `_PG_init`, so no
//! subsystem registers anything lazily; in a process that never calls jq they find empty lists.
//!
//! Order at commit: claim-start hints first, then the wakeups, so a claim woken for a job reads
//! the hint already moved back to it (src/claim_hint.rs); then the launcher and the reaper's start. The callbacks run
//! after the transaction is visible to new snapshots (XACT_EVENT_COMMIT), and never fail.

use crate::{awaiting, bgworker, claim_hint, hook_timer, reap_start, wakeup};
use pgrx::prelude::*;

/// Registers the callbacks. Called once from `_PG_init` (in the postmaster while preloading,
/// inherited by every backend it forks; else in the backend loading jq).
pub fn init() {
    // SAFETY: registers this library's callbacks once per process; they stay registered for the
    // process's life (the library is never unloaded).
    unsafe {
        pg_sys::RegisterXactCallback(Some(xact_callback), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(subxact_callback), std::ptr::null_mut());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn xact_callback(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT => {
            claim_hint::at_commit();
            wakeup::at_commit();
            awaiting::stop();
            hook_timer::disarm();
            bgworker::at_commit();
            reap_start::at_commit();
        }
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => {
            claim_hint::at_abort();
            wakeup::at_abort();
            awaiting::stop();
            hook_timer::disarm();
            bgworker::at_abort();
            reap_start::at_abort();
        }
        XACT_EVENT_PREPARE => {
            claim_hint::at_prepare();
            wakeup::at_prepare();
            awaiting::stop();
            hook_timer::disarm();
            bgworker::at_abort();
            reap_start::at_abort();
        }
        _ => {}
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn subxact_callback(
    event: pg_sys::SubXactEvent::Type,
    my: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        claim_hint::at_subxact_abort();
        wakeup::at_subxact_abort(my);
        awaiting::at_subxact_abort(my);
        reap_start::at_abort();
    }
}

/// Whether the calling statement runs inside an explicit transaction block (`BEGIN` … `COMMIT`,
/// or a function called from one), rather than alone in its own transaction. A subtransaction
/// (a plpgsql block with an EXCEPTION clause) counts as a block too: the background worker
/// runs the truncation outside `jq._maintain_guarded` for that reason (src/bgworker/worker.rs). Maintenance
/// truncates history tables only outside one (sql/history.sql, jq._truncate_history): a
/// truncated table stays locked until its transaction ends, and a pass left open in a
/// transaction block would hold readers of `jq.jobs` that long
/// (pg_test/tests/history.rs, a_maintenance_pass_in_an_open_transaction_truncates_nothing).
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _in_transaction_block() -> bool {
    // SAFETY: reads the backend's transaction state; always valid inside a transaction.
    unsafe { pg_sys::IsTransactionBlock() }
}
