//! A throwaway cluster of a test's own, started with pg_test/cluster.sh (as the `postgres`
//! user, like the main test cluster) on `JQ_TEST_PGPORT` + an offset and stopped on drop: for
//! tests that crash a cluster, start it without preloading, or need server settings of their own
//! (pg_test/tests/own_cluster.rs, pg_test/tests/bgworker/launcher.rs).
//!
//! Offsets in use: 1, 2, 3 (own_cluster.rs), 5, 6, 7 (bgworker/launcher.rs); each falls back to
//! offset + 10, + 20, ... when its port is busy.

use crate::{Client, NoTls};
use std::process::Command;
use std::time::{Duration, Instant};

/// A running cluster of the test's own.
pub struct OwnCluster {
    /// Its directory (`data/` and `data/server.log` inside).
    pub dir: String,
    pub port: u16,
}

impl OwnCluster {
    /// Initializes and starts a cluster with the `postgres -c` `settings`.
    pub fn start(offset: u16, settings: &[&str]) -> OwnCluster {
        let base: u16 = std::env::var("JQ_TEST_PGPORT").unwrap_or_else(|_| "24329".into()).parse().unwrap();
        // base + offset, or the next port up that nothing listens on (a postmaster left behind by
        // an earlier run whose data directory is gone can hold the port for up to a minute).
        // Ports base + 10 .. are never used by the other suites (worker-client uses + 3 and + 97).
        let port = (0..10)
            .map(|k| base + offset + 10 * k)
            .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
            .expect("no free port for a test cluster");
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

    /// The server log so far (`log_min_messages = warning`: warnings and errors).
    pub fn log(&self) -> String {
        std::fs::read_to_string(format!("{}/data/server.log", self.dir)).unwrap_or_default()
    }

    /// A connection to `db`.
    pub fn connect(&self, db: &str) -> Client {
        Client::connect(&format!("host=127.0.0.1 port={} user=postgres dbname={db}", self.port), NoTls)
            .expect("connect")
    }

    /// Connects, retrying while the server restarts.
    pub fn connect_retry(&self, db: &str, limit: Duration) -> Client {
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

impl OwnCluster {
    /// `pg_ctl stop -m immediate`: every process killed with SIGQUIT, no checkpoint — what a
    /// power cut does to shared memory (the OS page cache survives here, so fsync=off is moot).
    pub fn stop_immediate(&self) {
        let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let ok = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {repo}/pg_test/cluster.sh; jq_as_postgres \"$JQ_PG_BIN/pg_ctl\" -D {}/data -m immediate -w stop >/dev/null",
                self.dir
            ))
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Starts the stopped cluster again with the same settings.
    pub fn restart(&self, settings: &[&str]) {
        let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let ok = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {repo}/pg_test/cluster.sh; jq_cluster_start {}/data {} {}",
                self.dir,
                self.port,
                settings.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(" ")
            ))
            .status()
            .unwrap();
        assert!(ok.success(), "restart failed");
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

