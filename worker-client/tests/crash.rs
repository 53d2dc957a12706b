//! `kill -9` of a worker mid-job: its jobs come back when their leases expire (reaped by
//! `jq.tick()`), are run by another worker, and the lost attempt is refunded.
//!
//! No client-side negative control: what is checked here (expiry, refund, rerun elsewhere) is
//! jq's reaper plus ordinary claims, and the reaper's controls are in pg_test/tests/leases/.
//! The test shows the pieces work together through real processes and a real SIGKILL.
//!
//! The scenario is in tests/common/scenarios.rs; tests/pooler.rs runs it through PgBouncer.

mod common;
use common::*;

#[test]
fn kill_9_mid_job_jobs_come_back_with_attempt_refunded() {
    let db = TestDb::new("crash");
    scenarios::crash(&db, &db.url(), &[]);
}
