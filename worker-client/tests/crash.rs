//! `kill -9` of a worker mid-job: its jobs come back when their leases expire (reaped by
//! `jq.tick()`), are run by another worker, and the lost attempt is refunded.
//!
//! No client-side negative control: what is checked here (expiry, refund, rerun elsewhere) is
//! jq's reaper plus ordinary claims, and the reaper's controls are in pg_test/tests/leases/.
//! The test shows the pieces work together through real processes and a real SIGKILL.

mod common;
use common::*;
use std::time::Duration;

#[test]
fn kill_9_mid_job_jobs_come_back_with_attempt_refunded() {
    let db = TestDb::new("crash");
    let mut c = db.connect();
    create_queue(&mut c, "crashy", "2 seconds", "");
    let payloads: Vec<String> = (1..=3).map(|i| format!("{{\"n\":{i}}}")).collect();
    enqueue_lines(&db, "crashy", &payloads);

    // A: holds all three jobs in a long command.
    let mut a = WorkerProc::start(&db, "crashy", "A", &["-c", "3"], "sleep 30; cat", &[]);
    wait_until(Duration::from_secs(30), "A runs all 3 jobs", || {
        db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'running' AND worker = 'A'") == 3
    });
    a.signal("KILL");
    a.wait_for(Duration::from_secs(5)).expect("A is dead");
    // The orphaned commands of A are still sleeping: they cannot report anything.

    // Maintenance reaps the expired leases (2 s); B runs the jobs.
    let _tick = Ticker::start(&db, Duration::from_millis(200));
    let mut b = WorkerProc::start(&db, "crashy", "B", &["-c", "3"], "cat", &[]);
    wait_until(Duration::from_secs(60), "B completes the 3 jobs", || {
        db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'completed'") == 3
    });
    b.signal("TERM");
    assert!(b.wait_for(Duration::from_secs(20)).expect("B exits").success());

    let ex = executions(&mut c);
    assert_eq!(ex.len(), 6, "two executions per job: {ex:?}");
    for pair in ex.chunks(2) {
        let (id, _, a1, o1, w1) = &pair[0];
        let (id2, _, a2, o2, w2) = &pair[1];
        assert_eq!(id, id2);
        assert_eq!((o1.as_str(), w1.as_deref(), *a1), ("lease_expired", Some("A"), 1), "{ex:?}");
        // Attempt refunded: the rerun is attempt 1 again.
        assert_eq!((o2.as_str(), w2.as_deref(), *a2), ("completed", Some("B"), 1), "{ex:?}");
    }
    assert_eq!(db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE attempt = 1 AND result = payload"), 3);
}
