//! jq's configuration parameters (GUCs), all named `jq.<word>`.
//!
//! Registered in `_PG_init`, before the background workers are, so that a preloaded library
//! reads them from postgresql.conf. `jq.max_databases` takes a server restart; `jq.databases`
//! and `jq.tick_interval` are `sighup` (change them and `SELECT pg_reload_conf()`);
//! `jq.poll_interval` may be set per session.

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::CString;

/// `jq.databases`: comma-separated database names the maintenance workers serve (an entry
/// ending in `*` is a prefix: `app_*`); empty (the default) serves every database that has the
/// extension installed.
pub static DATABASES: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// `jq.max_databases` (postmaster, defined only when jq is preloaded): how many databases with
/// jq the launcher serves at once, the number of database slots in shared memory
/// (src/bgworker/slots.rs). Databases without jq take none. Past it, databases with jq are not
/// served; the launcher logs how many, once per change.
pub static MAX_DATABASES: GucSetting<i32> = GucSetting::<i32>::new(64);

/// The largest `jq.max_databases`.
pub const MAX_DATABASES_LIMIT: i32 = 4096;

/// `jq.tick_interval`: milliseconds between two maintenance passes of a database's worker.
pub static TICK_INTERVAL_MS: GucSetting<i32> = GucSetting::<i32>::new(1000);

/// `jq.hook_timeout`: the time limit of one on_dead hook call in milliseconds, in any session:
/// cancelled at it, the session terminated at twice it plus 1 s (src/hook_timer.rs).
pub static HOOK_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(3000);

/// `jq.poll_interval`: milliseconds between re-checks of a waiting `jq.claim(…, wait => …)`
/// when jq is not in `shared_preload_libraries` (no shared-memory wakeups).
pub static POLL_INTERVAL_MS: GucSetting<i32> = GucSetting::<i32>::new(200);

/// `jq.notify`: whether the maintenance workers send `NOTIFY jq_ready, '<queue>'` for queues that
/// got claimable jobs. PostgreSQL does not check privileges on LISTEN, so any role that can
/// connect sees the queue names: turn it off in databases shared by tenants who must not learn
/// each other's queue names (docs/security.md). jq's own long-poll does not use it.
pub static NOTIFY: GucSetting<bool> = GucSetting::<bool>::new(true);

/// `jq.wakeups`: whether this session's transactions wake the claims waiting on a queue when they
/// make its jobs claimable. Off, no waiting claim is woken for those jobs: they are found by the
/// next look (a wakeup for another job, a waiting claim's last look at its deadline, or the next
/// claim); nothing is lost (`a_session_with_wakeups_off_wakes_nobody_and_loses_nothing` in
/// pg_test/tests/bgworker/long_poll.rs). For measuring what the wakeup path costs and for producers that
/// want no wakeup work at all.
pub static WAKEUPS: GucSetting<bool> = GucSetting::<bool>::new(true);

/// `jq.claim_hints` (user): whether this session's claims may start at their queue's
/// claim-start hint, past the dead head of the claim index (src/claim_hint.rs). On by default.
pub static CLAIM_HINTS: GucSetting<bool> = GucSetting::<bool>::new(true);

/// `jq.plan_min_pages` (superuser): the fewest pages the planner assumes `jq.jobs` has, so that
/// plans made while it is small stay index lookups after it grows (src/planner.rs); 0 = off.
pub static PLAN_MIN_PAGES: GucSetting<i32> = GucSetting::<i32>::new(1000);

/// `jq.max_payload_bytes` (superuser): the largest payload `jq.enqueue` and `jq.enqueue_many`
/// accept, both as JSON text and as stored (1 MiB by default; 1 kB to 256 MB).
pub static MAX_PAYLOAD_BYTES: GucSetting<i32> = GucSetting::<i32>::new(1_048_576);

/// `jq.worker_beat_interval` (user): milliseconds between two beats of a registered worker;
/// `jq.worker_beat_interval()` (sql/fleet.sql) reads it, workers read that when they register,
/// and `jq.fleet` shows a worker stale after three intervals without a beat. Set it per database
/// (`ALTER DATABASE … SET`) so that workers and readers agree.
pub static WORKER_BEAT_INTERVAL_MS: GucSetting<i32> = GucSetting::<i32>::new(5000);

/// `jq.worker_retention` (superuser): seconds `jq.workers` keeps a stopped or silent worker
/// before maintenance prunes it (`jq.worker_retention()`, sql/fleet.sql).
pub static WORKER_RETENTION_S: GucSetting<i32> = GucSetting::<i32>::new(3600);

/// `jq.max_payload_bytes() RETURNS integer`: the current `jq.max_payload_bytes` setting in bytes.
/// A function of this library, so that calling it loads jq and the setting is read from
/// postgresql.conf even where jq is not preloaded. Checked by pg_test/tests/producers.rs.
#[pgrx::pg_extern(create_or_replace, stable, parallel_safe)]
fn max_payload_bytes() -> i32 {
    MAX_PAYLOAD_BYTES.get()
}

/// Registers every GUC. Called once from `_PG_init`.
pub fn init() {
    GucRegistry::define_string_guc(
        c"jq.databases",
        c"Databases served by jq's maintenance workers (comma-separated, prefix* allowed; empty = every database with jq).",
        c"A worker runs only in databases where the jq extension is installed. Reloaded on SIGHUP.",
        &DATABASES,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // A postmaster setting can only be defined while the server starts (PostgreSQL refuses it
    // later: FATAL), i.e. when jq is preloaded, which is also the only case that uses it.
    // SAFETY: a PostgreSQL global, read in _PG_init.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        GucRegistry::define_int_guc(
            c"jq.max_databases",
            c"How many databases with jq the background workers serve at once (shared-memory slots).",
            c"Databases without jq take no slot. Past it, databases with jq are not served and the launcher logs how many. Takes a server restart.",
            &MAX_DATABASES,
            1,
            MAX_DATABASES_LIMIT,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    GucRegistry::define_int_guc(
        c"jq.tick_interval",
        c"Time between maintenance passes (promote, reap, cron, prune) of each jq worker.",
        c"Reloaded on SIGHUP; takes effect at the next pass.",
        &TICK_INTERVAL_MS,
        10,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"jq.hook_timeout",
        c"Time limit of one jq on_dead hook call: cancelled at it, its session terminated at twice it plus 1 s.",
        c"Reloaded on SIGHUP. Keep it below the workers' call timeout.",
        &HOOK_TIMEOUT_MS,
        100,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_bool_guc(
        c"jq.notify",
        c"Whether jq's maintenance workers NOTIFY jq_ready with the names of queues that got claimable jobs.",
        c"LISTEN is not privilege-checked: any role that can connect sees the queue names. Reloaded on SIGHUP.",
        &NOTIFY,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"jq.wakeups",
        c"Whether this session's transactions wake claims waiting on the queues they make jobs claimable in.",
        c"Off: no waiting claim is woken for those jobs; the next look finds them (nothing is lost).",
        &WAKEUPS,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"jq.claim_hints",
        c"Whether this session's claims may start at their queue's claim-start hint, past the dead head of the claim index.",
        c"Off: every claim walks the claim index from its head (as without shared_preload_libraries).",
        &CLAIM_HINTS,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"jq.poll_interval",
        c"Re-check interval of a waiting jq.claim when jq is not preloaded.",
        c"With jq in shared_preload_libraries waiting claims are woken through shared memory instead.",
        &POLL_INTERVAL_MS,
        10,
        60_000,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"jq.max_payload_bytes",
        c"Largest job payload jq.enqueue accepts, as JSON text and as stored.",
        c"Larger payloads raise 54000: keep big data in a table and enqueue its key. Superuser only.",
        &MAX_PAYLOAD_BYTES,
        1024,
        268_435_455,
        GucContext::Suset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_int_guc(
        c"jq.worker_beat_interval",
        c"Time between two beats of a registered worker (jq.worker_beat_interval()).",
        c"Workers read it when they register; jq.fleet shows a worker stale after 3 intervals without a beat. Set it per database.",
        &WORKER_BEAT_INTERVAL_MS,
        100,
        3_600_000,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"jq.worker_retention",
        c"How long a stopped or silent worker stays in jq.workers before maintenance prunes it.",
        c"Read by the maintenance worker's prune duty (jq.worker_retention()). Superuser only.",
        &WORKER_RETENTION_S,
        1,
        365 * 86_400,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"jq.plan_min_pages",
        c"The fewest pages the planner assumes jq.jobs has (0 = its real size).",
        c"Plans made while jq.jobs is small then stay index lookups after it grows. Planning only; cached plans keep the value they were made with.",
        &PLAN_MIN_PAGES,
        0,
        1_000_000,
        GucContext::Suset,
        GucFlags::default(),
    );
}

/// Whether `jq.databases` lists database `name` (an empty setting lists every database).
pub fn database_listed(name: &str) -> bool {
    let wanted = databases();
    wanted.is_empty() || wanted.iter().any(|w| database_matches(w, name))
}

/// `jq.databases` entry `pattern` names `name`: equal, or a prefix followed by `*`.
fn database_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// The `jq.databases` list, trimmed; empty means every database.
pub fn databases() -> Vec<String> {
    DATABASES
        .get()
        .and_then(|s| s.into_string().ok())
        .map(|s| s.split(',').map(|d| d.trim().to_string()).filter(|d| !d.is_empty()).collect())
        .unwrap_or_default()
}
