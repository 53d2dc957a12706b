//! The time limit of one on_dead hook call (jq._call_hook), in whatever session calls it: a
//! worker's `jq.fail`, `jq.expire_lease`, `jq.tick()`, or the maintenance worker's hooks duty.
//!
//! `statement_timeout` cannot do this: it is armed once per client statement (and never in a
//! background worker), and a SQL function cannot re-arm it. So `jq._hook_timer_start()` arms two
//! timers of the backend's own timeout machinery (utils/timeout.h) before the call:
//! * at `jq.hook_timeout` a cancel, as `statement_timeout` would send: 57014 inside the hook,
//!   which jq._call_hook records as the hook's failure (`jq._hook_timer_stop()` says it fired);
//! * at twice that plus one second, a termination of the session (as `pg_terminate_backend`),
//!   for a hook that catches `query_canceled` and goes on: FATAL cannot be caught, so no hook
//!   holds a session, a job's row or the maintenance worker longer than that
//!   (pg_test/tests/kinds/breakit.rs, `a_hook_that_swallows_its_cancel_does_not_hold_up_maintenance`).
//!
//! Both are disarmed after the call, and at the end of every transaction ([`crate::xact`]), so a
//! timer never outlives the call it bounds.

use crate::gucs;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;

// PostgreSQL's timeout API (utils/timeout.h), which pgrx does not bind.
extern "C-unwind" {
    fn RegisterTimeout(id: u32, handler: Option<unsafe extern "C" fn()>) -> u32;
    fn enable_timeout_after(id: u32, delay_ms: i32);
    fn disable_timeout(id: u32, keep_indicator: bool);
    fn get_timeout_indicator(id: u32, reset_indicator: bool) -> bool;
}
/// `USER_TIMEOUT` of PostgreSQL 15's `enum TimeoutId`: asks RegisterTimeout for a free id.
const USER_TIMEOUT: u32 = 12;

thread_local! {
    /// The (cancel, terminate) timer ids of this backend, registered at the first call.
    static IDS: Cell<Option<(u32, u32)>> = const { Cell::new(None) };
    /// Whether a timer is armed (so the end-of-transaction callback has work only then).
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

/// Timer handler (signal context): what `StatementCancelHandler` does for SIGINT.
unsafe extern "C" fn on_cancel() {
    // SAFETY: sets the backend's interrupt flags and latch, as the signal handlers do.
    unsafe {
        pg_sys::QueryCancelPending = 1;
        pg_sys::InterruptPending = 1;
        pg_sys::SetLatch(pg_sys::MyLatch);
    }
}

/// Timer handler (signal context): what `die` does for SIGTERM.
unsafe extern "C" fn on_terminate() {
    // SAFETY: as on_cancel.
    unsafe {
        pg_sys::ProcDiePending = 1;
        pg_sys::InterruptPending = 1;
        pg_sys::SetLatch(pg_sys::MyLatch);
    }
}

fn ids() -> (u32, u32) {
    IDS.with(|c| {
        c.get().unwrap_or_else(|| {
            // SAFETY: registers two timeout reasons of this backend, once (RegisterTimeout
            // raises FATAL when the backend has none left; jq registers no others).
            let ids = unsafe { (RegisterTimeout(USER_TIMEOUT, Some(on_cancel)), RegisterTimeout(USER_TIMEOUT, Some(on_terminate))) };
            c.set(Some(ids));
            ids
        })
    })
}

/// Arms the two timers of a hook call: the cancel at `jq.hook_timeout` ms, the termination at
/// twice that plus 1 s. Internal (jq._call_hook).
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _hook_timer_start() {
    // Negative control only (cargo feature `break-hook-timeout`): no timer, so a hanging hook
    // holds its caller (pg_test/tests/kinds/hooks.rs, a_hanging_hook_does_not_hold_up_maintenance).
    if cfg!(feature = "break-hook-timeout") {
        return;
    }
    let ms = gucs::HOOK_TIMEOUT_MS.get();
    let (cancel, terminate) = ids();
    // SAFETY: arms this backend's own timers; disarmed by _hook_timer_stop or at transaction end.
    unsafe {
        get_timeout_indicator(cancel, true);
        enable_timeout_after(cancel, ms);
        enable_timeout_after(terminate, ms.saturating_mul(2).saturating_add(1000));
    }
    ARMED.with(|a| a.set(true));
}

/// Disarms the timers; true when the cancel fired (the hook overran `jq.hook_timeout`).
/// Internal (jq._call_hook).
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _hook_timer_stop() -> bool {
    disarm()
}

/// Disarms the timers if armed; whether the cancel fired. A cancel that fired after the call
/// ended and was not yet acted on is dropped, so that it cannot cancel the caller's statement.
pub fn disarm() -> bool {
    if !ARMED.with(|a| a.replace(false)) {
        return false;
    }
    let (cancel, terminate) = ids();
    // SAFETY: disarms the timers armed by _hook_timer_start.
    unsafe {
        disable_timeout(terminate, false);
        disable_timeout(cancel, true);
        let fired = get_timeout_indicator(cancel, true);
        if fired {
            pg_sys::QueryCancelPending = 0;
        }
        fired
    }
}
