//! Three `jqctl work` processes drain 10,000 jobs; each job runs and completes exactly once.
//!
//! No negative control of its own: the client has no step that could run a claimed job
//! twice without also breaking the lease tests (tests/shutdown.rs `no_heartbeat_on_shutdown`
//! makes jobs run twice), and claim exclusivity is jq's (pg_test/tests/exactly_once/).
//! What this adds is the whole path through real processes at volume: `jqctl enqueue` in
//! batches, batched claims, one child process per job, batched `jq.complete_many`.
//!
//! The scenario is in tests/common/scenarios.rs; tests/pooler.rs runs it through PgBouncer.

mod common;
use common::*;

#[test]
fn three_workers_drain_10k_jobs_exactly_once() {
    let db = TestDb::new("drain");
    scenarios::drain(&db, &db.url(), 10_000, &[]);
}
