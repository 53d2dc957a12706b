//! The worker-client scenarios that run both straight against the cluster (tests/drain.rs,
//! crash.rs, shutdown.rs) and through a transaction-mode pooler (tests/pooler.rs): each takes
//! the URL its `jqctl` processes connect to, and the extra environment of its workers. The
//! test's own checks always connect straight to `db`. Each returns the workers' logs.

use super::*;

/// `n` jobs drained by three `jqctl work -c 6 --batch 6` processes; each job runs and
/// completes exactly once, with its payload as its result (tests/drain.rs).
pub fn drain(db: &TestDb, url: &str, n: i64, envs: &[(&str, &str)]) -> Vec<String> {
    let mut c = db.connect();
    create_queue(&mut c, "bulk", "30 seconds", "");
    let payloads: Vec<String> = (1..=n).map(|i| format!("{{\"n\":{i}}}")).collect();
    enqueue_lines_at(url, "bulk", &payloads);
    assert_eq!(db.count(&mut c, "SELECT count(*) FROM jq.jobs"), n);

    let runs = log_dir().join(format!("{}-runs.log", db.name));
    let _ = std::fs::remove_file(&runs);
    // Each run appends its job id (one short O_APPEND write: atomic) and echoes the payload,
    // which becomes the job's result.
    let script = format!("echo \"$JQ_JOB_ID\" >> '{}'; IFS= read -r p; printf '%s' \"$p\"", runs.display());
    let start = Instant::now();
    let mut workers: Vec<WorkerProc> = (1..=3)
        .map(|w| WorkerProc::start_at(url, &db.name, "bulk", &format!("w{w}"), &["-c", "6", "--batch", "6"], &script, envs))
        .collect();
    wait_until(Duration::from_secs(600), &format!("all {n} jobs completed"), || {
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
    eprintln!("drained {n} jobs with 3 workers x 6 in {took:?} ({url})");

    // Exactly one execution per job, completed, and the result is the payload.
    assert_eq!(db.count(&mut c, "SELECT count(*) FROM jq.executions"), n);
    assert_eq!(db.count(&mut c, "SELECT count(DISTINCT job_id) FROM jq.executions WHERE outcome = 'completed'"), n);
    let odd: Vec<String> = c
        .query("SELECT format('id %s state %s attempt %s claims %s payload %s result %s error %s', id, state, attempt, \
                              claims, payload, result, last_error) FROM jq.jobs \
                WHERE result IS DISTINCT FROM payload OR attempt <> 1 LIMIT 5", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(odd.is_empty(), "jobs whose result is not their payload or not at attempt 1: {odd:#?}");
    // Every worker took part.
    assert_eq!(db.count(&mut c, "SELECT count(DISTINCT worker) FROM jq.executions"), 3);
    // The command ran exactly once per job.
    let text = std::fs::read_to_string(&runs).unwrap();
    let mut ids: Vec<i64> = text.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(ids.len(), n as usize, "runs logged");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n as usize, "distinct jobs run");
    workers.iter().map(|w| w.log_text()).collect()
}

/// `kill -9` of worker A holding three jobs: their leases (2 s) expire, `jq.tick()` reaps
/// them, worker B runs them; the lost attempt is refunded (tests/crash.rs).
pub fn crash(db: &TestDb, url: &str, envs: &[(&str, &str)]) -> Vec<String> {
    let mut c = db.connect();
    create_queue(&mut c, "crashy", "2 seconds", "");
    let payloads: Vec<String> = (1..=3).map(|i| format!("{{\"n\":{i}}}")).collect();
    enqueue_lines_at(url, "crashy", &payloads);

    // A: holds all three jobs in a long command.
    let mut a = WorkerProc::start_at(url, &db.name, "crashy", "A", &["-c", "3"], "sleep 30; cat", envs);
    wait_until(Duration::from_secs(30), "A runs all 3 jobs", || {
        db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'running' AND worker = 'A'") == 3
    });
    a.signal("KILL");
    a.wait_for(Duration::from_secs(5)).expect("A is dead");
    // The orphaned commands of A are still sleeping: they cannot report anything.

    // Maintenance reaps the expired leases (2 s); B runs the jobs.
    let _tick = Ticker::start(db, Duration::from_millis(200));
    let mut b = WorkerProc::start_at(url, &db.name, "crashy", "B", &["-c", "3"], "cat", envs);
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
    vec![a.log_text(), b.log_text()]
}

/// SIGTERM while four jobs run (lease 2 s, grace 7 s): the two 4 s jobs complete once, the
/// two 60 s jobs are released with the attempt refunded, a job enqueued after the signal is
/// never claimed, nothing fails (tests/shutdown.rs).
pub fn shutdown(db: &TestDb, url: &str, envs: &[(&str, &str)]) -> Vec<String> {
    let mut c = db.connect();
    create_queue(&mut c, "graceful", "2 seconds", ", max_attempts => 3");
    // Short jobs sleep 4 s (twice the lease; within the 7 s grace); long ones 60 s.
    let payloads = vec!["{\"sleep\":4}".to_string(), "{\"sleep\":4}".into(), "{\"sleep\":60}".into(), "{\"sleep\":60}".into()];
    enqueue_lines_at(url, "graceful", &payloads);
    let _tick = Ticker::start(db, Duration::from_millis(200));

    // The payload is {"sleep":N}: read N, sleep, print a JSON result.
    let script = r#"read -r p; s=${p#*:}; s=${s%\}}; sleep "$s"; echo "{\"slept\":$s}""#;
    let mut w = WorkerProc::start_at(url, &db.name, "graceful", "W", &["-c", "4", "--grace", "7s"], script, envs);
    wait_until(Duration::from_secs(30), "all 4 jobs running", || {
        db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'running'") == 4
    });
    // Enqueued after: must not be claimed once shutdown has begun.
    let sent = Instant::now();
    w.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    enqueue_lines_at(url, "graceful", &["{\"sleep\":0}".to_string()]);
    let status = w.wait_for(Duration::from_secs(20)).expect("worker exits within grace + abort time");
    let took = sent.elapsed();
    let log = w.log_text();
    assert!(status.success(), "exit status {status:?}\n{log}");
    assert!(took >= Duration::from_secs(6), "waited for the grace period ({took:?})\n{log}\n{:?}", executions(&mut c));
    assert!(took < Duration::from_secs(12), "stopped soon after the grace period ({took:?})\n{log}");

    let ex = executions(&mut c);
    let rows = c
        .query("SELECT (payload->>'sleep')::int, state::text, attempt, result::text FROM jq.jobs ORDER BY id", &[])
        .unwrap();
    let jobs: Vec<(i32, String, i32, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
    let detail = format!("jobs {jobs:?}\nexecutions {ex:?}\n{log}");
    assert!(!ex.iter().any(|e| e.3 == "failed" || e.3 == "lease_expired"), "nothing failed or expired: {detail}");
    for (sleep, state, attempt, result) in &jobs {
        match sleep {
            4 => {
                assert_eq!((state.as_str(), *attempt), ("completed", 1), "{detail}");
                assert_eq!(result.as_deref(), Some("{\"slept\": 4}"), "{detail}");
            }
            60 => assert_eq!((state.as_str(), *attempt), ("ready", 0), "released, attempt refunded: {detail}"),
            0 => assert_eq!((state.as_str(), *attempt), ("ready", 0), "never claimed: {detail}"),
            _ => unreachable!(),
        }
    }
    assert_eq!(ex.iter().filter(|e| e.3 == "completed").count(), 2, "{detail}");
    assert_eq!(ex.iter().filter(|e| e.3 == "released").count(), 2, "{detail}");
    vec![log]
}
