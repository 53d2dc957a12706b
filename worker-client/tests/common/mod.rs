//! Harness for the worker-client tests: real `jqctl` processes against a real cluster.
//!
//! The shared cluster is found through `JQ_TEST_PGHOST` / `JQ_TEST_PGPORT` (default
//! 127.0.0.1:54329), as in pg_test: `pg_test/run` starts it with jq installed. Each test makes
//! a database of its own (dropped at the end), so tests run in parallel. The restart test
//! starts a private cluster with pg_test/cluster.sh on `JQ_CLIENT_TEST_PGPORT2` (default:
//! `JQ_TEST_PGPORT` + 1) using the PostgreSQL binaries in `JQ_PG_BIN`.
//!
//! Tests change state only through jq's functions and real worker processes; maintenance is
//! driven by calling `jq.tick()` (there is no background worker yet).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use postgres::{Client, NoTls};

static SEQ: AtomicUsize = AtomicUsize::new(0);

pub fn host() -> String {
    std::env::var("JQ_TEST_PGHOST").unwrap_or_else(|_| "127.0.0.1".into())
}

pub fn port() -> u16 {
    std::env::var("JQ_TEST_PGPORT").ok().and_then(|p| p.parse().ok()).unwrap_or(54329)
}

pub fn conninfo_at(port: u16, dbname: &str) -> String {
    format!("host={} port={port} user=postgres dbname={dbname} application_name=jq-client-test", host())
}

/// A database of its own with `CREATE EXTENSION jq` (unless `with_jq` is false), dropped on
/// drop.
pub struct TestDb {
    pub name: String,
    pub port: u16,
}

impl TestDb {
    pub fn new(tag: &str) -> TestDb {
        TestDb::new_at(port(), tag, true)
    }

    pub fn new_at(port: u16, tag: &str, with_jq: bool) -> TestDb {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let name = format!("jqc_{}_{}_{}", tag, std::process::id(), n);
        let mut a = Client::connect(&conninfo_at(port, "postgres"), NoTls)
            .expect("cannot connect to the test cluster: run with JQ_TEST_PGPORT set (pg_test/run)");
        a.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).unwrap();
        a.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let db = TestDb { name, port };
        if with_jq {
            db.connect().batch_execute("CREATE EXTENSION jq").expect("CREATE EXTENSION jq");
        }
        db
    }

    pub fn conninfo(&self) -> String {
        conninfo_at(self.port, &self.name)
    }

    pub fn connect(&self) -> Client {
        Client::connect(&self.conninfo(), NoTls).expect("connect to test database")
    }

    /// Retries the connection for up to 30 s (after a restart).
    pub fn connect_retrying(&self) -> Client {
        let start = Instant::now();
        loop {
            match Client::connect(&self.conninfo(), NoTls) {
                Ok(c) => return c,
                Err(e) if start.elapsed() < Duration::from_secs(30) => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("cannot reconnect: {e}"),
            }
        }
    }

    /// `jqctl` with this database in DATABASE_URL and the libpq variables cleared.
    pub fn jqctl(&self) -> Command {
        jqctl_with_url(&format!("postgresql://postgres@{}:{}/{}", host(), self.port, self.name))
    }

    /// A scalar query's first column as i64.
    pub fn count(&self, c: &mut Client, sql: &str) -> i64 {
        c.query_one(sql, &[]).unwrap().get::<_, i64>(0)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut a) = Client::connect(&conninfo_at(self.port, "postgres"), NoTls) {
            let _ = a.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

pub fn jqctl_with_url(url: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_jqctl"));
    for v in ["PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGPASSWORD", "PGOPTIONS", "PGAPPNAME"] {
        c.env_remove(v);
    }
    c.env("DATABASE_URL", url);
    c
}

/// Where test logs go (kept after the run for debugging).
pub fn log_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("jq-client-test-{}", port()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A running `jqctl work`; killed (SIGKILL) on drop if still running.
pub struct WorkerProc {
    pub child: Child,
    pub name: String,
    pub log: PathBuf,
}

impl WorkerProc {
    /// Starts `jqctl work --queue Q --worker NAME ARGS… -- sh -c SCRIPT`, logging to a file.
    pub fn start(db: &TestDb, queue: &str, name: &str, args: &[&str], script: &str, envs: &[(&str, &str)]) -> WorkerProc {
        let log = log_dir().join(format!("{}-{name}.log", db.name));
        let f = std::fs::File::create(&log).unwrap();
        let mut cmd = db.jqctl();
        cmd.args(["work", "--queue", queue, "--worker", name]).args(args).args(["--", "sh", "-c", script]);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = cmd.stdout(Stdio::null()).stderr(f).spawn().expect("start jqctl work");
        WorkerProc { child, name: name.to_string(), log }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill").args([&format!("-{sig}"), &self.pid().to_string()]).status().unwrap();
        assert!(st.success(), "kill -{sig} failed");
    }

    /// Waits for exit up to `limit`; returns the exit status, or None if still running.
    pub fn wait_for(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Calls `jq.tick()` every `every` on its own connection until dropped (the maintenance a
/// background worker will do); reconnects after errors (the restart test).
pub struct Ticker {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
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

/// Polls `cond` every 100 ms until it holds; panics with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Enqueues `payloads` (one JSON text each) through `jqctl enqueue` on stdin.
pub fn enqueue_lines(db: &TestDb, queue: &str, payloads: &[String]) {
    use std::io::Write;
    let mut child = db
        .jqctl()
        .args(["enqueue", queue])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for p in payloads {
            writeln!(stdin, "{p}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "jqctl enqueue failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// `jq.create_queue(name, lease => lease)` (lease a PostgreSQL interval literal).
pub fn create_queue(c: &mut Client, name: &str, lease: &str, extra: &str) {
    c.batch_execute(&format!("SELECT jq.create_queue('{name}', lease => '{lease}'{extra})")).unwrap();
}

/// Counts of jq.jobs by state, as (state, n), for assertion messages.
pub fn states(c: &mut Client) -> Vec<(String, i64)> {
    c.query("SELECT state::text, count(*) FROM jq.jobs GROUP BY 1 ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// (job id, seq, attempt, outcome, worker) of every execution, in order.
pub fn executions(c: &mut Client) -> Vec<(i64, i64, i32, String, Option<String>)> {
    c.query("SELECT job_id, seq, attempt, outcome::text, worker FROM jq.executions ORDER BY job_id, seq", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

/// Path of pg_test/cluster.sh.
pub fn cluster_sh() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../pg_test/cluster.sh")
}

/// Runs a bash snippet after sourcing pg_test/cluster.sh; panics on failure.
pub fn cluster_cmd(snippet: &str) {
    let st = Command::new("bash")
        .arg("-c")
        .arg(format!("source '{}' && {snippet}", cluster_sh().display()))
        .status()
        .unwrap();
    assert!(st.success(), "cluster command failed: {snippet}");
}
