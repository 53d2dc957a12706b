//! Lost connections: PostgreSQL restarted under running workers, and the workers' backends
//! terminated while they idle (a dead waiting connection must not stop jobs from being picked
//! up). Negative control, seen failing:
//!   JQ_CLIENT_BREAK=no_reconnect cargo test -p worker-client --features test-breaks --test reconnect
//! (the claim loop silently stops after its connection is lost; the worker stays up).

mod common;
use common::*;
use std::time::Duration;

#[test]
fn terminated_backends_jobs_still_picked_up() {
    let db = TestDb::new("q12");
    let mut c = db.connect();
    create_queue(&mut c, "wake", "10 seconds", "");
    let envs = break_env();
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut w = WorkerProc::start(&db, "wake", "idle", &["-c", "2"], "cat", &envs);
    for round in 1..=2i64 {
        // Both of the worker's connections are open (claims, and heartbeats/outcomes after
        // the first round), then killed while it idles.
        wait_until(Duration::from_secs(30), "worker connected", || {
            db.count(&mut c, &format!(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND application_name = 'jqctl-work'",
                db.name
            )) >= 1
        });
        let killed = db.count(&mut c, &format!(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{}' AND application_name = 'jqctl-work') t",
            db.name
        ));
        assert!(killed >= 1);
        let payloads: Vec<String> = (1..=5).map(|i| format!("{{\"round\":{round},\"n\":{i}}}")).collect();
        enqueue_lines(&db, "wake", &payloads);
        wait_until(Duration::from_secs(20), "jobs picked up after the connections were killed", || {
            db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'completed'") == 5 * round
        });
    }
    assert!(w.child.try_wait().unwrap().is_none(), "worker still running");
    w.signal("TERM");
    assert!(w.wait_for(Duration::from_secs(20)).expect("exits").success());
    assert_eq!(db.count(&mut c, "SELECT count(*) FROM jq.executions WHERE outcome <> 'completed'"), 0);
}

/// Stops the private cluster when the test ends, whatever happens.
struct PrivateCluster {
    dir: String,
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("source '{}' && jq_cluster_stop '{}'", cluster_sh().display(), self.dir))
            .status();
    }
}

#[test]
fn postgres_restart_workers_reconnect_nothing_lost() {
    let port2: u16 = std::env::var("JQ_CLIENT_TEST_PGPORT2").ok().and_then(|p| p.parse().ok()).unwrap_or(port() + 1);
    let dir = format!("/tmp/jq-client-restart-{port2}");
    cluster_cmd(&format!("jq_cluster_stop '{dir}' || true; rm -rf '{dir}'; jq_cluster_start '{dir}' {port2}"));
    let _cluster = PrivateCluster { dir: dir.clone() };
    let db = TestDb::on_port(port2, "restart", "CREATE EXTENSION jq");
    let mut c = db.connect();
    create_queue(&mut c, "steady", "6 seconds", "");
    let n = 400;
    let payloads: Vec<String> = (1..=n).map(|i| format!("{{\"n\":{i}}}")).collect();
    enqueue_lines(&db, "steady", &payloads);
    let _tick = Ticker::start(&db, Duration::from_millis(300));
    let envs = break_env();
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut workers: Vec<WorkerProc> = (1..=2)
        .map(|i| WorkerProc::start(&db, "steady", &format!("r{i}"), &["-c", "4"], "sleep 0.1; cat", &envs))
        .collect();
    wait_until(Duration::from_secs(60), "a quarter done", || {
        db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'completed'") >= n / 4
    });
    drop(c);
    // A fast stop (every backend terminated), 2 s down, then up again.
    cluster_cmd(&format!("jq_cluster_stop '{dir}' && sleep 2 && jq_cluster_start '{dir}' {port2}"));
    let mut c = db.connect_retrying();
    wait_until(Duration::from_secs(120), "all jobs completed after the restart", || {
        db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'completed'") == n
    });
    for w in workers.iter_mut() {
        assert!(w.child.try_wait().unwrap().is_none(), "worker {} still running\n{}", w.name, w.log_text());
        w.signal("TERM");
    }
    for w in workers.iter_mut() {
        let st = w.wait_for(Duration::from_secs(20)).expect("exits");
        assert!(st.success(), "{}", w.log_text());
    }
    let logs: String = workers.iter().map(|w| w.log_text()).collect();
    assert!(logs.contains("reconnecting") || logs.contains("cannot connect") || logs.contains("connection problem"),
        "the workers saw the restart:\n{logs}");
    // Nothing lost, nothing completed twice, nothing failed.
    assert_eq!(db.count(&mut c, "SELECT count(*) FROM jq.executions WHERE outcome = 'completed'"), n);
    // A completed execution is its job row; none may also be recorded as ended otherwise.
    assert_eq!(
        db.count(&mut c, "SELECT count(*) FROM jq.execution_log l JOIN jq.jobs j
                              ON j.id = l.job_id AND j.claims = l.seq AND j.state = 'completed'"),
        0
    );
    assert_eq!(db.count(&mut c, "SELECT count(*) FROM jq.executions WHERE outcome = 'failed'"), 0);
    assert_eq!(db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE result = payload"), n);
}
