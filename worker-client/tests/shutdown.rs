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

mod common;
use common::*;
use std::time::{Duration, Instant};

#[test]
fn sigterm_finishes_within_grace_or_releases_never_fails() {
    let db = TestDb::new("shutdown");
    let mut c = db.connect();
    create_queue(&mut c, "graceful", "2 seconds", ", max_attempts => 3");
    // Short jobs sleep 4 s (twice the lease; within the 7 s grace); long ones 60 s.
    let payloads = vec!["{\"sleep\":4}".to_string(), "{\"sleep\":4}".into(), "{\"sleep\":60}".into(), "{\"sleep\":60}".into()];
    enqueue_lines(&db, "graceful", &payloads);
    let _tick = Ticker::start(&db, Duration::from_millis(200));

    let envs = break_env();
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // The payload is {"sleep":N}: read N, sleep, print a JSON result.
    let script = r#"read -r p; s=${p#*:}; s=${s%\}}; sleep "$s"; echo "{\"slept\":$s}""#;
    let mut w = WorkerProc::start(&db, "graceful", "W", &["-c", "4", "--grace", "7s"], script, &envs);
    wait_until(Duration::from_secs(30), "all 4 jobs running", || {
        db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'running'") == 4
    });
    // Enqueued after: must not be claimed once shutdown has begun.
    let sent = Instant::now();
    w.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    enqueue_lines(&db, "graceful", &["{\"sleep\":0}".to_string()]);
    let status = w.wait_for(Duration::from_secs(20)).expect("worker exits within grace + abort time");
    let took = sent.elapsed();
    let log = w.log_text();
    assert!(status.success(), "exit status {status:?}\n{log}");
    assert!(took >= Duration::from_secs(6), "waited for the grace period ({took:?})");
    assert!(took < Duration::from_secs(12), "stopped soon after the grace period ({took:?})\n{log}");

    let ex = executions(&mut c);
    let rows = c
        .query(
            "SELECT (payload->>'sleep')::int, state::text, attempt, result::text FROM jq.jobs ORDER BY id",
            &[],
        )
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
}
