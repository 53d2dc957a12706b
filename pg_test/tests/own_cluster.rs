//! Tests that need a cluster of their own, because they crash it or start it differently:
//! a postmaster crash-restart and jq without `shared_preload_libraries`.
//! Each starts a throwaway cluster with pg_test/cluster.sh on JQ_TEST_PGPORT + 1 or + 2 (as
//! the `postgres` user, like the main test cluster) and stops it at the end.
//!
//! Negative control: the crash test was seen failing with the launcher's respawn of exited
//! workers removed (see src/bgworker/); the fallback test fails if `jq._wait` does not bound its
//! sleep by `jq.poll_interval` when not preloaded (seen by making it sleep the full wait).

use jq_pg_test::own_cluster::OwnCluster;
use jq_pg_test::{Client, NoTls};
use std::process::Command;
use std::time::{Duration, Instant};

fn worker_pid(c: &mut Client) -> Option<i32> {
    c.query_opt("SELECT pid FROM jq.status() WHERE database = current_database() AND state = 'running' AND passes > 0", &[])
        .ok()
        .flatten()
        .and_then(|r| r.get(0))
}

#[test]
fn after_a_postmaster_crash_restart_the_worker_is_back_and_reaps_at_once() {
    // Durable commits: with synchronous_commit=off (the test default) a crash-restart loses the
    // last commits still in WAL buffers, CREATE EXTENSION included.
    let cl = OwnCluster::start(1, &["shared_preload_libraries=jq", "restart_after_crash=on", "synchronous_commit=on"]);
    let mut a = cl.connect("postgres");
    a.batch_execute("CREATE DATABASE crash").unwrap();
    let mut c = cl.connect("crash");
    c.batch_execute("CREATE EXTENSION jq; SELECT jq.create_queue('q'); SELECT jq.enqueue('q', '{}')").unwrap();
    let t = Instant::now();
    while worker_pid(&mut c).is_none() {
        assert!(t.elapsed() < Duration::from_secs(30), "never served");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A worker holds a job with a short lease when the server crashes.
    c.batch_execute("SELECT * FROM jq.claim('q', 'doomed', lease => '1 second')").unwrap();
    // kill -9 of an unrelated backend: the postmaster restarts every process.
    let victim: i32 = a.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let killed = Command::new("kill").arg("-9").arg(victim.to_string()).status().unwrap();
    assert!(killed.success());
    let t = Instant::now();
    drop(cl.connect_retry("crash", Duration::from_secs(20)));
    let mut back = None;
    while t.elapsed() < Duration::from_secs(20) {
        if let Ok(mut c2) = Client::connect(&format!("host=127.0.0.1 port={} user=postgres dbname=crash", cl.port), NoTls) {
            if worker_pid(&mut c2).is_some() {
                back = Some(t.elapsed());
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let back = back.expect("maintenance worker not back after the crash-restart");
    eprintln!("maintenance worker back {back:?} after the crash");
    // The expired lease comes back without anyone calling jq.tick().
    let mut c = cl.connect("crash");
    let rows = c.query("SELECT attempt FROM jq.claim('q', 'w', wait => '6 s')", &[]).unwrap();
    assert_eq!(rows.len(), 1, "the job of the crashed worker never came back");
    assert_eq!(rows[0].get::<_, i32>(0), 1);
}

#[test]
fn without_preloading_everything_works_and_waiting_claims_poll() {
    let cl = OwnCluster::start(2, &[]);
    let mut a = cl.connect("postgres");
    a.batch_execute("CREATE DATABASE plain").unwrap();
    let mut c = cl.connect("plain");
    c.batch_execute("CREATE EXTENSION jq; SELECT jq.create_queue('q')").unwrap();
    let (state, err): (String, String) = c
        .query_one("SELECT state, last_error FROM jq.status()", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(state, "not preloaded");
    assert!(err.contains("jq.tick()"), "{err}");
    // A waiting claim re-checks every jq.poll_interval (200 ms by default).
    let port = cl.port;
    let waiter = std::thread::spawn(move || {
        let mut w = Client::connect(&format!("host=127.0.0.1 port={port} user=postgres dbname=plain"), NoTls).unwrap();
        let rows = w.query("SELECT id FROM jq.claim('q', 'w', wait => '10 s')", &[]).unwrap();
        (Instant::now(), rows.len())
    });
    std::thread::sleep(Duration::from_millis(500));
    c.batch_execute("SELECT jq.enqueue('q', '{}')").unwrap();
    let committed = Instant::now();
    let (returned, n) = waiter.join().unwrap();
    assert_eq!(n, 1);
    let lag = returned.saturating_duration_since(committed);
    assert!(lag < Duration::from_millis(1500), "{lag:?}");
    // Maintenance is jq.tick(), called by the client.
    c.batch_execute("SELECT jq.enqueue('q', '{}', delay => '1 second')").unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let promoted: i32 = c.query_one("SELECT promoted FROM jq.tick()", &[]).unwrap().get(0);
    assert_eq!(promoted, 1);
}

/// The crash test: `pg_ctl stop -m immediate` in the middle of a 16-worker drain with a
/// cron schedule firing every second, then a restart: no job lost, none completed twice, every
/// cron fire time enqueued at most once. Negative control: `JQ_TEST_BREAK=crash_no_reap` (the
/// worker's reap duty does nothing, so jobs the crash left running are never handed back):
/// seen failing with "jobs not completed after the restart".
#[test]
fn immediate_shutdown_during_a_drain_with_cron_loses_nothing_and_doubles_nothing() {
    const JOBS: i64 = 3000;
    let settings = ["shared_preload_libraries=jq", "synchronous_commit=on", "max_connections=100"];
    let cl = OwnCluster::start(3, &settings);
    let mut a = cl.connect("postgres");
    a.batch_execute("CREATE DATABASE crashdrain").unwrap();
    let mut c = cl.connect("crashdrain");
    c.batch_execute(
        "CREATE EXTENSION jq;
         SELECT jq.create_queue('work', lease => '2 seconds');
         SELECT jq.create_queue('ticks');
         SELECT jq.schedule('every-second', '* * * * * *', 'ticks');",
    )
    .unwrap();
    c.execute("SELECT count(*) FROM jq.enqueue_many('work', (SELECT jsonb_agg(g) FROM generate_series(1, $1::int8) g))", &[&JOBS])
        .unwrap();
    if jq_pg_test::broken("crash_no_reap") {
        jq_pg_test::sabotage(&mut c, "jq._maintain(text,timestamptz)", "v_total := jq._reap(_maintain.now, 1000, 10000);",
                             "v_total := 0;", 1);
    }
    let port = cl.port;
    let drain = move |stop_after: Option<Duration>| -> Vec<i64> {
        let t = Instant::now();
        let handles: Vec<_> = (0..16)
            .map(|w| {
                std::thread::spawn(move || {
                    let mut done = Vec::new();
                    let Ok(mut c) = Client::connect(&format!("host=127.0.0.1 port={port} user=postgres dbname=crashdrain"), NoTls) else {
                        return done;
                    };
                    loop {
                        if stop_after.is_some_and(|d| t.elapsed() > d) {
                            return done;
                        }
                        let rows = match c.query("SELECT id, lease_token FROM jq.claim('work', $1, 5, wait => '1 s')", &[&format!("w{w}")]) {
                            Ok(r) => r,
                            Err(_) => return done, // the server went away
                        };
                        if rows.is_empty() && stop_after.is_none() {
                            return done;
                        }
                        for r in rows {
                            let id: i64 = r.get(0);
                            let token: uuid::Uuid = r.get(1);
                            match c.query_one("SELECT jq.complete($1, $2)", &[&id, &token]) {
                                Ok(row) if row.get::<_, bool>(0) => done.push(id),
                                Ok(_) => {}
                                Err(_) => return done,
                            }
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    };
    // Drain for a while, and kill the server under the workers' feet.
    let before_handle = std::thread::spawn(move || drain(Some(Duration::from_secs(60))));
    // Crash once about a third is done, so that jobs are in every state.
    let t = Instant::now();
    while c.query_one("SELECT count(*) FROM jq.jobs WHERE queue = 'work' AND state = 'completed'", &[])
        .unwrap()
        .get::<_, i64>(0)
        < JOBS / 3
    {
        assert!(t.elapsed() < Duration::from_secs(60), "the drain did not progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    cl.stop_immediate();
    let before = before_handle.join().unwrap();
    assert!(!before.is_empty(), "nothing was completed before the crash");
    cl.restart(&settings);
    // After the restart the maintenance worker reaps the leases the crash orphaned; drain the rest.
    let after = drain(None);
    let mut c = cl.connect_retry("crashdrain", Duration::from_secs(20));
    // Wait for stragglers (leases of 2 s reaped by the worker), then drain again.
    std::thread::sleep(Duration::from_secs(3));
    let after2 = drain(None);
    let all: Vec<i64> = before.iter().chain(&after).chain(&after2).copied().collect();
    let mut seen = std::collections::HashSet::new();
    for id in &all {
        assert!(seen.insert(*id), "job {id} was completed twice (as seen by workers)");
    }
    let row = c
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 'completed'), count(*)
             FROM jq.jobs WHERE queue = 'work'",
            &[],
        )
        .unwrap();
    let (completed, total): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(total, JOBS, "jobs lost");
    assert_eq!(completed, JOBS, "jobs not completed after the restart");
    // A complete that committed just before the crash may not have reached its worker: the
    // database's count is the truth, the workers' list a subset of it.
    assert!(all.len() as i64 <= JOBS);
    // A completed execution is its job row; no other ending may be recorded for the same one.
    let twice: i64 = c
        .query_one(
            "SELECT count(*) FROM jq.execution_log l JOIN jq.jobs j
                 ON j.id = l.job_id AND j.claims = l.seq AND j.state = 'completed'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(twice, 0, "completed executions also recorded as ended otherwise");
    // Cron: one job per fire time at most, and the fire log and the jobs agree.
    let (runs, jobs, dup): (i64, i64, i64) = c
        .query_one(
            "SELECT (SELECT count(*) FROM jq.cron_runs WHERE schedule = 'every-second' AND outcome = 'enqueued'),
                    (SELECT count(*) FROM jq.jobs WHERE queue = 'ticks'),
                    (SELECT count(*) FROM (SELECT fire_time FROM jq.cron_runs WHERE schedule = 'every-second'
                                           GROUP BY fire_time HAVING count(*) > 1) d)",
            &[],
        )
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .unwrap();
    assert!(runs >= 2, "cron did not fire around the crash ({runs})");
    assert_eq!(runs, jobs, "fire log and jobs disagree");
    assert_eq!(dup, 0);
    eprintln!("crash drain: {} completes seen before the crash, {} after; {runs} cron fires", before.len(), after.len() + after2.len());
}
