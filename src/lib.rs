//! jq: a durable job queue inside PostgreSQL with a SQL-native API.
//!
//! The public API is hand-written SQL in `sql/` (schema, queue administration, enqueue, the
//! worker calls, maintenance), included here in dependency order. Rust holds what is better in
//! Rust: the retry backoff arithmetic ([`backoff`]), cron expressions and time zones ([`cron`]),
//! the configuration ([`gucs`]), the caller tickets of the privilege checks ([`security`]) and
//! their random bits ([`random`]), the planner hook ([`planner`]), the wakeups of long-polling
//! claims ([`wakeup`]), the claim-start hints ([`claim_hint`]), where the reaper's passes start
//! ([`reap_start`]), the sizes of `jq.table_health` taken without waiting for a lock
//! ([`table_size`]) and the background workers ([`bgworker`]). [`xact`] owns the
//! end-of-transaction callbacks that call down into the wakeups, the hints, the launcher and the
//! reaper's start; each of the first three owns its shared memory ([`shmem`] is the registration
//! point); [`queue_hash`] is the one hash of a queue name.
//!
//! See `docs/semantics.md` for the job model and `docs/sql-api.md` for the reference.

use pgrx::prelude::*;

pub mod awaiting;
pub mod backend;
pub mod backoff;
pub mod bgworker;
pub mod claim_hint;
pub mod cron;
pub mod gucs;
pub mod hook_timer;
pub mod planner;
pub mod queue_hash;
pub mod random;
pub mod reap_start;
pub mod security;
pub mod shmem;
pub mod spin;
pub mod table_size;
pub mod wakeup;
pub mod xact;

::pgrx::pg_module_magic!(name, version);

/// Library load: GUCs, the planner hook and the end-of-transaction callbacks always; shared
/// memory, the launcher and the utility hook only while
/// PostgreSQL preloads the library (`shared_preload_libraries = 'jq'`). Loaded later (on first
/// use in a session), jq works without background workers and with polling long-polls.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // pgrx appends std::backtrace::Backtrace::capture() to the DETAIL of an error that crosses a
    // Rust frame; with RUST_BACKTRACE=1 in the server's environment that is a 30-line trace with
    // build paths in front of clients. RUST_LIB_BACKTRACE=0 turns off Backtrace::capture only
    // (panic messages on stderr keep following RUST_BACKTRACE). Set while the postmaster (or the
    // backend loading jq) is single-threaded, and only when the DBA has not chosen a value.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
    gucs::init();
    planner::init();
    xact::init();
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        // Loaded by a backend's first call of a jq function (not preloaded): plans this backend
        // cached before, without the planner hook, are made again with it at their next use.
        // SAFETY: marks cached plans invalid (as a shared-invalidation reset does); plans in use
        // stay valid until released.
        unsafe { pg_sys::ResetPlanCache() };
    }
    // SAFETY: a PostgreSQL global, read in _PG_init.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        bgworker::init();
        wakeup::init();
        awaiting::init();
        claim_hint::init();
    }
}

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!("../sql/history.sql", name = "history", requires = ["schema"]);
extension_sql_file!("../sql/queues.sql", name = "queues", requires = ["history", security::_ticket, security::_redeem]);
extension_sql_file!(
    "../sql/enqueue.sql",
    name = "enqueue",
    requires = ["queues", gucs::max_payload_bytes, wakeup::_wake, wakeup::_wake_n, wakeup::_wake_slot, wakeup::_wake_on_abort,
                wakeup::_wait_register, wakeup::_wait_register_batch, wakeup::_wait, wakeup::_wait_done, wakeup::_queue_bit,
                wakeup::_wakeups, wakeup::_wake_ready, wakeup::_wait_rebatch, wakeup::_waiters, claim_hint::_claim_hint, claim_hint::_hint_priority,
                claim_hint::_hint_run_at, claim_hint::_hint_id, claim_hint::_hint_advance, claim_hint::_hint_clear,
                claim_hint::_hint_turn_end, claim_hint::_hint_watch, claim_hint::_hint_turn]
);
extension_sql_file!("../sql/claim.sql", name = "claim", requires = ["enqueue", random::_lease_token]);
extension_sql_file!("../sql/finish.sql", name = "finish", requires = ["claim", backoff::backoff_seconds]);
extension_sql_file!("../sql/operator.sql", name = "operator", requires = ["finish"]);
extension_sql_file!("../sql/flow.sql", name = "flow", requires = ["operator"]);
extension_sql_file!(
    "../sql/cron.sql",
    name = "cron",
    requires = ["flow", cron::sql::cron_next, cron::sql::cron_fires, cron::sql::_cron_check,
                cron::sql::_cron_latest, cron::sql::_cron_count]
);
extension_sql_file!(
    "../sql/maintenance.sql",
    name = "maintenance",
    requires = ["cron", bgworker::_status, bgworker::_preloaded, bgworker::_launcher_wake, reap_start::_reap_start,
                reap_start::_reap_end, table_size::_table_bytes]
);
extension_sql_file!("../sql/kinds.sql", name = "kinds", requires = ["maintenance", hook_timer::_hook_timer_start, hook_timer::_hook_timer_stop]);
extension_sql_file!(
    "../sql/await.sql",
    name = "await",
    requires = ["kinds", wakeup::_wake_awaiters, awaiting::_await_register, awaiting::_await_sleep,
                awaiting::_await_done, awaiting::_await_wakeups]
);
extension_sql_file!("../sql/fleet.sql", name = "fleet", requires = ["await"]);
extension_sql_file!("../sql/observe.sql", name = "observe", requires = ["fleet", security::_authorize_queue]);
extension_sql_file!("../sql/grants.sql", name = "grants", requires = ["observe", security::_authorize, security::_authorize_queue], finalize);

#[cfg(any(test, feature = "pg_test"))]
mod pg_tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
