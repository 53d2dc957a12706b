//! Three `jqctl work` processes drain 10,000 jobs; each job runs and completes exactly once.
//!
//! No negative control of its own: the client has no step that could run a claimed job
//! twice without also breaking the lease tests (tests/shutdown.rs `no_heartbeat_on_shutdown`
//! makes jobs run twice), and claim exclusivity is jq's (pg_test/tests/exactly_once/).
//! What this adds is the whole path through real processes at volume: `jqctl enqueue` in
//! batches, batched claims, one child process per job, batched `jq.complete_many`.

mod common;
use common::*;
use std::time::{Duration, Instant};

#[test]
fn three_workers_drain_10k_jobs_exactly_once() {
    let db = TestDb::new("drain");
    let mut c = db.connect();
    create_queue(&mut c, "bulk", "30 seconds", "");
    let n = 10_000;
    let payloads: Vec<String> = (1..=n).map(|i| format!("{{\"n\":{i}}}")).collect();
    enqueue_lines(&db, "bulk", &payloads);
    assert_eq!(db.count(&mut c, "SELECT count(*) FROM jq.jobs"), n);

    let runs = log_dir().join(format!("{}-runs.log", db.name));
    let _ = std::fs::remove_file(&runs);
    // Each run appends its job id (one short O_APPEND write: atomic) and echoes the payload,
    // which becomes the job's result.
    let script = format!("echo \"$JQ_JOB_ID\" >> '{}'; IFS= read -r p; printf '%s' \"$p\"", runs.display());
    let start = Instant::now();
    let mut workers: Vec<WorkerProc> =
        (1..=3).map(|w| WorkerProc::start(&db, "bulk", &format!("w{w}"), &["-c", "6", "--batch", "6"], &script, &[])).collect();
    wait_until(Duration::from_secs(600), "all 10,000 jobs completed", || {
        db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'completed'") == n
    });
    let took = start.elapsed();
    for w in &workers {
        w.signal("TERM");
    }
    for w in workers.iter_mut() {
        let st = w.wait_for(Duration::from_secs(20)).expect("worker exits after SIGTERM");
        assert!(st.success(), "worker {} exit status {st:?}\n{}", w.name, w.log_text());
    }
    eprintln!("drained {n} jobs with 3 workers x 6 in {took:?}");

    // Exactly one execution per job, completed, and the result is the payload.
    assert_eq!(db.count(&mut c, "SELECT count(*) FROM jq.executions"), n);
    assert_eq!(db.count(&mut c, "SELECT count(DISTINCT job_id) FROM jq.executions WHERE outcome = 'completed'"), n);
    assert_eq!(db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE result = payload AND attempt = 1"), n);
    // Every worker took part.
    assert_eq!(db.count(&mut c, "SELECT count(DISTINCT worker) FROM jq.executions"), 3);
    // The command ran exactly once per job.
    let text = std::fs::read_to_string(&runs).unwrap();
    let mut ids: Vec<i64> = text.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(ids.len(), n as usize, "runs logged");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n as usize, "distinct jobs run");
}
