//! SIGTERM while jobs run: the worker stops claiming, keeps heartbeating during the grace
//! period, jobs that finish within it are completed (once), jobs that do not are released with
//! the attempt refunded — none is failed for the shutdown.
//!
//! The long jobs' command is killed (SIGTERM to its process group) when the grace period
//! ends and exits non-zero: a handler that *rejects on abort*, which must still be released,
//! not failed. Negative controls, both seen failing:
//!   JQ_CLIENT_BREAK=fail_on_shutdown cargo test -p worker-client --features test-breaks --test shutdown
//!     → the long jobs are failed (outcome 'failed', attempt charged);
//!   JQ_CLIENT_BREAK=no_heartbeat_on_shutdown cargo test -p worker-client --features test-breaks --test shutdown
//!     → the short jobs (longer than the 2 s lease) are reaped during the grace period.
//!
//! The scenario is in tests/common/scenarios.rs; tests/pooler.rs runs it through PgBouncer.

mod common;
use common::*;

#[test]
fn sigterm_finishes_within_grace_or_releases_never_fails() {
    let db = TestDb::new("shutdown");
    let envs = break_env();
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    scenarios::shutdown(&db, &db.url(), &envs);
}
