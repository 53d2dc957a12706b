//! Waiting on a cluster from tests that drive real processes: polling a condition, calling
//! `jq.tick()` in the background, reconnecting after a restart, counting rows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Client, NoTls, TestDb};

/// Polls `cond` every 100 ms until it holds; panics with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl TestDb {
    /// A new connection, retried for up to 30 s (after a restart of the cluster).
    pub fn connect_retrying(&self) -> Client {
        let start = Instant::now();
        loop {
            match Client::connect(&self.conninfo(), NoTls) {
                Ok(c) => return c,
                Err(_) if start.elapsed() < Duration::from_secs(30) => std::thread::sleep(Duration::from_millis(200)),
                Err(e) => panic!("cannot reconnect: {e}"),
            }
        }
    }

    /// A scalar query's first column as i64.
    pub fn count(&self, c: &mut Client, sql: &str) -> i64 {
        c.query_one(sql, &[]).unwrap().get::<_, i64>(0)
    }
}

/// Calls `jq.tick()` every `every` on its own connection until dropped, for tests that drive
/// maintenance themselves instead of the background worker (which the test cluster runs only
/// for `jqt_bgw_*` databases); reconnects after errors (a restart).
pub struct Ticker {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    /// Starts ticking `db` every `every`.
    pub fn start(db: &TestDb, every: Duration) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let info = db.conninfo();
        let handle = std::thread::spawn(move || {
            let mut c: Option<Client> = None;
            while !s.load(Ordering::SeqCst) {
                if c.is_none() {
                    c = Client::connect(&info, NoTls).ok();
                }
                if let Some(cl) = c.as_mut() {
                    if cl.batch_execute("SELECT jq.tick()").is_err() {
                        c = None;
                    }
                }
                std::thread::sleep(every);
            }
        });
        Ticker { stop, handle: Some(handle) }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Path of pg_test/cluster.sh.
pub fn cluster_sh() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("cluster.sh")
}

/// Runs a bash snippet after sourcing pg_test/cluster.sh (`jq_cluster_start DIR PORT`,
/// `jq_cluster_stop DIR`); panics on failure.
pub fn cluster_cmd(snippet: &str) {
    let st = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("source '{}' && {snippet}", cluster_sh().display()))
        .status()
        .unwrap();
    assert!(st.success(), "cluster command failed: {snippet}");
}
