//! Client-process helpers for the worker-client tests: real `jqctl` processes against a real
//! cluster. The cluster, the database per test and the waiting helpers are pg_test's harness
//! (the `jq-pg-test` crate, pg_test/src), re-exported here.
//!
//! The shared cluster is found through `JQ_TEST_PGHOST` / `JQ_TEST_PGPORT`: `pg_test/run`
//! starts it with jq installed (background workers only for `jqt_bgw_*` databases, so these
//! tests drive maintenance with a [`Ticker`]). The restart test starts a private cluster with
//! pg_test/cluster.sh on `JQ_CLIENT_TEST_PGPORT2` (default: `JQ_TEST_PGPORT` + 1) using the
//! PostgreSQL binaries in `JQ_PG_BIN`; the TLS tests (tls.rs) one with `ssl = on` on
//! `JQ_CLIENT_TEST_TLS_PGPORT` (default: `JQ_TEST_PGPORT` + 20).

#![allow(dead_code, unused_imports)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod bouncer;
pub mod browser;
pub mod dashboard;
pub mod scenarios;

pub use jq_pg_test::waiting::{cluster_cmd, cluster_sh, wait_until, Ticker};
pub use jq_pg_test::{await_history_due, conninfo_at, hold_history, host, job_past_retention_in_history, port, state, Client, NoTls, TestDb};

/// `jqctl` against a test database.
pub trait Jqctl {
    /// `jqctl` with this database in DATABASE_URL and the libpq variables cleared.
    fn jqctl(&self) -> Command;
    /// The URL of this database, straight to its cluster.
    fn url(&self) -> String;
}

impl Jqctl for TestDb {
    fn jqctl(&self) -> Command {
        jqctl_with_url(&self.url())
    }

    fn url(&self) -> String {
        format!("postgresql://postgres@{}:{}/{}", host(), self.port, self.name)
    }
}

/// `JQ_CLIENT_BREAK` of this run, to pass on to the workers of a test with a negative control.
/// Panics when it is set but the crate was built without the feature `test-breaks` (the
/// control would silently test the real worker).
pub fn break_env() -> Vec<(&'static str, String)> {
    let v = std::env::var("JQ_CLIENT_BREAK").ok().filter(|v| !v.is_empty());
    assert!(
        v.is_none() || cfg!(feature = "test-breaks"),
        "JQ_CLIENT_BREAK needs the feature: cargo test -p worker-client --features test-breaks"
    );
    v.map(|v| vec![("JQ_CLIENT_BREAK", v)]).unwrap_or_default()
}

/// `jqctl` (the binary of this crate, or the one `JQ_TEST_JQCTL` names: a negative control
/// may run an older build) with `url` in DATABASE_URL and the libpq variables cleared.
pub fn jqctl_with_url(url: &str) -> Command {
    let bin = std::env::var("JQ_TEST_JQCTL").ok().filter(|b| !b.is_empty());
    let mut c = Command::new(bin.as_deref().unwrap_or(env!("CARGO_BIN_EXE_jqctl")));
    c.env_remove("JQ_STATEMENT_MODE");
    c.env_remove("JQ_CALL_TIMEOUT");
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
        WorkerProc::start_at(&db.url(), &db.name, queue, name, args, script, envs)
    }

    /// As [`WorkerProc::start`], connecting to `url` (e.g. through a pooler) and logging to
    /// `<log_prefix>-NAME.log`.
    pub fn start_at(
        url: &str,
        log_prefix: &str,
        queue: &str,
        name: &str,
        args: &[&str],
        script: &str,
        envs: &[(&str, &str)],
    ) -> WorkerProc {
        let log = log_dir().join(format!("{log_prefix}-{name}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let mut cmd = jqctl_with_url(url);
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

/// Enqueues `payloads` (one JSON text each) through `jqctl enqueue` on stdin.
pub fn enqueue_lines(db: &TestDb, queue: &str, payloads: &[String]) {
    enqueue_lines_at(&db.url(), queue, payloads)
}

/// As [`enqueue_lines`], connecting to `url` (e.g. through a pooler).
pub fn enqueue_lines_at(url: &str, queue: &str, payloads: &[String]) {
    use std::io::Write;
    let mut child = jqctl_with_url(url)
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

/// (job id, seq, attempt, outcome, worker) of every execution, in order.
pub fn executions(c: &mut Client) -> Vec<(i64, i64, i32, String, Option<String>)> {
    c.query("SELECT job_id, seq, attempt, outcome::text, worker FROM jq.executions ORDER BY job_id, seq", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}


/// A library worker running on a runtime of its own in a thread, until [`InProcess::stop`].
pub struct InProcess {
    stop: tokio::sync::oneshot::Sender<()>,
    runner: std::thread::JoinHandle<Result<worker_client::RunStats, worker_client::Error>>,
}

impl InProcess {
    pub fn start(worker: worker_client::Worker) -> InProcess {
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let runner = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(worker.run_until(async {
                let _ = stop_rx.await;
            }))
        });
        InProcess { stop, runner }
    }

    /// Asks the worker to shut down and returns its run statistics.
    pub fn stop(self) -> worker_client::RunStats {
        self.stop.send(()).unwrap();
        self.runner.join().unwrap().unwrap()
    }

    /// As [`InProcess::stop`], but panics unless the worker has stopped within `limit` (a
    /// worker stuck on a call must fail the test, not hang it).
    pub fn stop_within(self, limit: Duration) -> worker_client::RunStats {
        self.stop.send(()).unwrap();
        wait_until(limit, "the worker stopped", || self.runner.is_finished());
        self.runner.join().unwrap().unwrap()
    }
}
