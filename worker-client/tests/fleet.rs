//! Real `jqctl work` processes in jq's fleet registry (jq.fleet): a running worker is active
//! with its pid and the jobs it holds, SIGTERM leaves it stopped, kill -9 leaves it stale (its
//! beats stop), and registration can be turned off. The beat interval is the database setting
//! jq.worker_beat_interval (500 ms here), which workers read when they register.
//!
//! Negative controls, each seen failing:
//!   JQ_CLIENT_BREAK=no_fleet_beat cargo test -p worker-client --features test-breaks --test fleet
//!     → `a_worker_is_active_with_its_pid_and_jobs_then_stopped_by_sigterm` times out waiting
//!     for in_flight 3 (the worker registers but never beats);
//!   JQ_CLIENT_BREAK=no_deregister cargo test -p worker-client --features test-breaks --test fleet
//!     → the same test finds the worker active, not stopped, after SIGTERM;
//!   JQ_TEST_BREAK=fleet_never_stale cargo test -p worker-client --test fleet kill_9
//!     (jq.worker_state never says stale) → `kill_9_leaves_a_stale_entry_whose_beats_stopped`
//!     times out waiting for stale.
//! pooler.rs checks the registry through PgBouncer.

mod common;
use common::*;
use std::time::Duration;

/// A database whose workers beat every 500 ms, with queue `q`.
fn fleet_db(tag: &str) -> TestDb {
    let db = TestDb::new(tag);
    let mut a = jq_pg_test::admin();
    a.batch_execute(&format!("ALTER DATABASE {} SET jq.worker_beat_interval = '500ms'", db.name)).unwrap();
    let mut c = db.connect();
    create_queue(&mut c, "q", "30 seconds", "");
    if jq_pg_test::broken("fleet_never_stale") {
        jq_pg_test::sabotage(&mut c, "jq.worker_state(timestamptz,timestamptz)", "THEN 'stale'", "THEN 'active'", 1);
    }
    db
}

/// (state, pid, in_flight, last_beat_at as text) of the worker named `name`, if registered.
fn entry(c: &mut Client, name: &str) -> Option<(String, i32, i32, String)> {
    c.query_opt(
        "SELECT state, pid, in_flight, last_beat_at::text FROM jq.fleet WHERE name = $1 ORDER BY started_at DESC LIMIT 1",
        &[&name],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
}

fn worker_env() -> Vec<(&'static str, String)> {
    break_env()
}

#[test]
fn a_worker_is_active_with_its_pid_and_jobs_then_stopped_by_sigterm() {
    let db = fleet_db("fleet_life");
    let mut c = db.connect();
    let env = worker_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut w = WorkerProc::start(&db, "q", "F", &["-c", "3"], "sleep 3", &env);
    let pid = w.pid();
    wait_until(Duration::from_secs(30), "the worker is registered and active", || {
        matches!(entry(&mut c, "F"), Some((s, p, _, _)) if s == "active" && p == pid)
    });
    let row = c
        .query_one("SELECT hostname <> '', queues, concurrency, client_version IS NOT NULL FROM jq.fleet WHERE name = 'F'", &[])
        .unwrap();
    assert!(row.get::<_, bool>(0));
    assert_eq!(row.get::<_, Vec<String>>(1), vec!["q"]);
    assert_eq!(row.get::<_, i32>(2), 3);
    assert!(row.get::<_, bool>(3));
    c.batch_execute("SELECT jq.enqueue('q', '{}') FROM generate_series(1, 3)").unwrap();
    wait_until(Duration::from_secs(20), "in_flight rises to 3 while the jobs run", || {
        matches!(entry(&mut c, "F"), Some((_, _, 3, _)))
    });
    let samples: i32 = c
        .query_one("SELECT jsonb_array_length(samples) FROM jq.fleet WHERE name = 'F'", &[])
        .unwrap()
        .get(0);
    assert!(samples >= 1);
    // `jqctl workers`: the table shows it (within 100 columns), --json types its fields.
    let out = db.jqctl().arg("workers").output().unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success() && table.lines().any(|l| l.contains("active") && l.contains("3/3")), "{table}");
    assert!(table.lines().all(|l| l.chars().count() <= 100), "{table}");
    let out = db.jqctl().args(["workers", "--json"]).output().unwrap();
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!((line["name"].as_str(), line["state"].as_str(), line["pid"].as_i64(), line["in_flight"].as_i64()),
               (Some("F"), Some("active"), Some(pid as i64), Some(3)), "{line}");
    assert_eq!(line["queues"], serde_json::json!(["q"]));
    w.signal("TERM");
    let st = w.wait_for(Duration::from_secs(30)).unwrap_or_else(|| panic!("worker did not stop\n{}", w.log_text()));
    assert!(st.success(), "{}", w.log_text());
    let (state, _, in_flight, _) = entry(&mut c, "F").unwrap();
    assert_eq!((state.as_str(), in_flight), ("stopped", 0), "after SIGTERM\n{}", w.log_text());
    assert_eq!(db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'completed'"), 3);
}

#[test]
fn kill_9_leaves_a_stale_entry_whose_beats_stopped() {
    let db = fleet_db("fleet_kill");
    let mut c = db.connect();
    let mut w = WorkerProc::start(&db, "q", "K", &["-c", "2"], "true", &[]);
    let pid = w.pid();
    let mut beats = std::collections::HashSet::new();
    wait_until(Duration::from_secs(30), "the worker beats (two distinct last_beat_at)", || {
        if let Some((s, p, _, at)) = entry(&mut c, "K") {
            assert_eq!(p, pid);
            if s == "active" {
                beats.insert(at);
            }
        }
        beats.len() >= 2
    });
    w.signal("KILL");
    w.wait_for(Duration::from_secs(5)).expect("killed");
    let (_, _, _, last) = entry(&mut c, "K").unwrap();
    wait_until(Duration::from_secs(30), "the killed worker goes stale (3 x 500 ms without a beat)", || {
        entry(&mut c, "K").unwrap().0 == "stale"
    });
    let (_, _, _, after) = entry(&mut c, "K").unwrap();
    assert_eq!(after, last, "a killed worker's last_beat_at moved");
}

#[test]
fn no_register_and_jq_register_0_keep_the_worker_out_of_the_fleet() {
    let db = fleet_db("fleet_off");
    let mut c = db.connect();
    let mut off = WorkerProc::start(&db, "q", "OFF", &["--no-register"], "true", &[]);
    let mut env_off = WorkerProc::start(&db, "q", "ENVOFF", &[], "true", &[("JQ_REGISTER", "0")]);
    let mut on = WorkerProc::start(&db, "q", "ON", &[], "true", &[]);
    c.batch_execute("SELECT jq.enqueue('q', '{}') FROM generate_series(1, 30)").unwrap();
    wait_until(Duration::from_secs(30), "all jobs completed and ON registered", || {
        db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'completed'") == 30 && entry(&mut c, "ON").is_some()
    });
    for w in [&mut off, &mut env_off, &mut on] {
        w.signal("TERM");
        assert!(w.wait_for(Duration::from_secs(30)).is_some_and(|s| s.success()), "{}", w.log_text());
    }
    let names: Vec<String> = c.query("SELECT name FROM jq.fleet", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(names, vec!["ON"]);
}
