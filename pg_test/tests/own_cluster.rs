//! Tests that need a cluster of their own, because they crash it or start it differently:
//! a postmaster crash-restart (field case Q18) and jq without `shared_preload_libraries`.
//! Each starts a throwaway cluster with pg_test/cluster.sh on JQ_TEST_PGPORT + 1 or + 2 (as
//! the `postgres` user, like the main test cluster) and stops it at the end.
//!
//! Negative control: the crash test was seen failing with the launcher's respawn of exited
//! workers removed (see bgworker.rs); the fallback test fails if `jq._wait` does not bound its
//! sleep by `jq.poll_interval` when not preloaded (seen by making it sleep the full wait).

use jq_pg_test::{Client, NoTls};
use std::process::Command;
use std::time::{Duration, Instant};

struct OwnCluster {
    dir: String,
    port: u16,
}

impl OwnCluster {
    fn start(offset: u16, settings: &[&str]) -> OwnCluster {
        let base: u16 = std::env::var("JQ_TEST_PGPORT").unwrap_or_else(|_| "54329".into()).parse().unwrap();
        let port = base + offset;
        let dir = format!("/tmp/jq-own-{port}");
        let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let script = format!(
            "source {repo}/pg_test/cluster.sh; jq_cluster_stop {dir}/data || true; rm -rf {dir}; \
             mkdir -p {dir}; jq_cluster_start {dir}/data {port} {}",
            settings.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(" ")
        );
        let ok = Command::new("bash").arg("-c").arg(&script).status().expect("bash");
        assert!(ok.success(), "could not start a cluster on port {port}");
        OwnCluster { dir, port }
    }

    fn connect(&self, db: &str) -> Client {
        Client::connect(&format!("host=127.0.0.1 port={} user=postgres dbname={db}", self.port), NoTls)
            .expect("connect")
    }

    /// Connects, retrying while the server restarts.
    fn connect_retry(&self, db: &str, limit: Duration) -> Client {
        let t = Instant::now();
        loop {
            match Client::connect(&format!("host=127.0.0.1 port={} user=postgres dbname={db}", self.port), NoTls) {
                Ok(c) => return c,
                Err(e) if t.elapsed() < limit => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("server not back: {e}"),
            }
        }
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let _ = Command::new("bash")
            .arg("-c")
            .arg(format!("source {repo}/pg_test/cluster.sh; jq_cluster_stop {}/data", self.dir))
            .status();
    }
}

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
        assert!(t.elapsed() < Duration::from_secs(5), "never served");
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
