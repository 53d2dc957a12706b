//! A statement timeout for work the maintenance worker runs itself: PostgresMain arms
//! `statement_timeout` for client statements only, so a background worker arms the backend's own
//! timer around the transactions it wants bounded (src/bgworker/hooks.rs).

use pgrx::pg_sys;

// PostgreSQL's timeout API (utils/timeout.h), which pgrx does not bind.
extern "C-unwind" {
    fn enable_timeout_after(id: u32, delay_ms: i32);
    fn disable_timeout(id: u32, keep_indicator: bool);
    fn get_timeout_indicator(id: u32, reset_indicator: bool) -> bool;
}
/// `STATEMENT_TIMEOUT` of PostgreSQL 15's `enum TimeoutId` (utils/timeout.h).
const STATEMENT_TIMEOUT: u32 = 3;

/// Runs `body` (whole transactions, e.g. `super::worker::in_transaction`) with the statement
/// timeout armed for `ms` milliseconds; returns its result and whether the timeout fired (or
/// `body` ran at least `ms`: the error path resets the indicator). When it fires, the next
/// CHECK_FOR_INTERRUPTS inside `body` raises 57014 "canceling statement due to statement
/// timeout", which `in_transaction` turns into an aborted transaction.
pub fn bounded<R>(ms: i32, body: impl FnOnce() -> R) -> (R, bool) {
    let started = std::time::Instant::now();
    // Negative control only (cargo feature `break-hook-timeout`): nothing is armed, so a
    // hanging hook holds up the worker (a_hanging_hook_does_not_hold_up_maintenance fails).
    let arm = !cfg!(feature = "break-hook-timeout");
    // SAFETY: arms the backend's statement-timeout timer as start_xact_command does for a
    // client statement; its handler sets QueryCancelPending (and the indicator read below).
    if arm {
        unsafe { enable_timeout_after(STATEMENT_TIMEOUT, ms) };
    }
    let r = body();
    // SAFETY: see above. A timeout that fired after `body` ended must not cancel what this
    // worker runs next.
    let fired = unsafe {
        disable_timeout(STATEMENT_TIMEOUT, true);
        let fired = get_timeout_indicator(STATEMENT_TIMEOUT, true);
        if fired {
            pg_sys::QueryCancelPending = 0;
        }
        fired
    };
    (r, fired || started.elapsed() >= std::time::Duration::from_millis(ms.max(0) as u64))
}
