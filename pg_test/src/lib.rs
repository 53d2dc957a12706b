//! Harness for jq's tests against a real cluster: the cluster is started by `pg_test/run`
//! (initdb and postgres as the `postgres` user) and found through `JQ_TEST_PGHOST` /
//! `JQ_TEST_PGPORT` (default 127.0.0.1:24329). Each test gets a database of its own with the
//! extension freshly created, dropped again when the test ends, so tests run in parallel
//! without seeing each other's jobs.
//!
//! Nothing here writes jq's tables: tests change state only through jq's functions (and pass
//! explicit instants to the maintenance functions instead of moving the clock).

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

pub mod fingerprint;
pub mod own_cluster;
pub mod populate;
pub mod waiting;

pub use postgres::{Client, NoTls};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// The test cluster's host: `JQ_TEST_PGHOST`, default 127.0.0.1.
pub fn host() -> String {
    std::env::var("JQ_TEST_PGHOST").unwrap_or_else(|_| "127.0.0.1".into())
}

/// The test cluster's port: `JQ_TEST_PGPORT`, default 24329.
pub fn port() -> u16 {
    std::env::var("JQ_TEST_PGPORT").ok().and_then(|p| p.parse().ok()).unwrap_or(24329)
}

/// `host=… port=… user=postgres` for the test cluster, plus `dbname` when given.
pub fn conninfo(dbname: &str) -> String {
    conninfo_at(port(), dbname)
}

/// As [`conninfo`], for a cluster of the test's own on `port` (same host).
pub fn conninfo_at(port: u16, dbname: &str) -> String {
    format!("host={} port={port} user=postgres dbname={dbname} application_name=jq-pg-test", host())
}

/// A connection to the cluster's `postgres` database.
pub fn admin() -> Client {
    Client::connect(&conninfo("postgres"), NoTls)
        .expect("cannot connect to the test cluster: run the tests with pg_test/run")
}

/// A database of its own with `CREATE EXTENSION jq`, dropped on drop.
pub struct TestDb {
    pub name: String,
    /// The port of its cluster: [`port`], or the one given to [`TestDb::on_port`].
    pub port: u16,
}

impl TestDb {
    /// Creates `jqt_<tag>_<pid>_<n>` with the extension installed: `CREATE EXTENSION jq`, or,
    /// when the run sets `JQ_TEST_INSTALL=upgraded`, the oldest release upgraded to the current
    /// version ([`upgraded_install`]), so that the whole suite can be rerun on upgraded installs.
    pub fn new(tag: &str) -> TestDb {
        if std::env::var("JQ_TEST_INSTALL").as_deref() == Ok("upgraded") {
            TestDb::with_setup(tag, &upgraded_install())
        } else {
            TestDb::fresh(tag)
        }
    }

    /// Creates `jqt_<tag>_<pid>_<n>` with `CREATE EXTENSION jq`, whatever `JQ_TEST_INSTALL` says.
    pub fn fresh(tag: &str) -> TestDb {
        TestDb::with_setup(tag, "CREATE EXTENSION jq")
    }

    /// Creates `jqt_<tag>_<pid>_<n>` and runs `setup` in it instead of `CREATE EXTENSION jq`
    /// (e.g. an older version and `ALTER EXTENSION jq UPDATE`, or nothing for a restore target).
    pub fn with_setup(tag: &str, setup: &str) -> TestDb {
        TestDb::on_port(port(), tag, setup)
    }

    /// As [`TestDb::with_setup`], on the cluster listening on `port` (e.g. a cluster a test
    /// started for itself).
    pub fn on_port(port: u16, tag: &str, setup: &str) -> TestDb {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let name = format!("jqt_{}_{}_{}", tag, std::process::id(), n);
        let mut a = Client::connect(&conninfo_at(port, "postgres"), NoTls)
            .expect("cannot connect to the test cluster: run the tests with pg_test/run");
        // Two requests: a multi-statement request runs as one transaction block, which
        // DROP/CREATE DATABASE refuse.
        a.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).expect("drop test database");
        a.batch_execute(&format!("CREATE DATABASE {name}")).expect("create test database");
        let db = TestDb { name, port };
        if !setup.is_empty() {
            db.connect().batch_execute(setup).unwrap_or_else(|e| panic!("{setup}: {e:?}"));
        }
        db
    }

    /// A new connection to this database.
    pub fn connect(&self) -> Client {
        Client::connect(&self.conninfo(), NoTls).expect("connect to test database")
    }

    /// The connection string of this database.
    pub fn conninfo(&self) -> String {
        conninfo_at(self.port, &self.name)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut a) = Client::connect(&conninfo_at(self.port, "postgres"), NoTls) {
            let _ = a.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

/// The oldest released version of jq, whose frozen install script sql/releases/jq--VERSION.sql
/// pg_test/run installs next to the current one.
pub const OLDEST_RELEASE: &str = "0.1.0";

/// The released versions, oldest first: the `jq--<version>.sql` files of sql/releases.
pub fn released_versions() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql/releases");
    let mut v: Vec<Vec<u32>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let version = name.strip_prefix("jq--")?.strip_suffix(".sql")?.to_string();
            (!version.contains("--")).then(|| version.split('.').map(|p| p.parse().unwrap()).collect())
        })
        .collect();
    v.sort();
    v.iter().map(|p| p.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(".")).collect()
}

/// `CREATE EXTENSION jq VERSION '<OLDEST_RELEASE>'; ALTER EXTENSION jq UPDATE`: the upgraded
/// install, as a [`TestDb::with_setup`] argument.
pub fn upgraded_install() -> String {
    format!("CREATE EXTENSION jq VERSION '{OLDEST_RELEASE}'; ALTER EXTENSION jq UPDATE")
}

/// The path of a PostgreSQL program (pg_dump, pg_restore, ...) of the cluster under test:
/// `$JQ_PG_BIN/name` (pg_test/run exports it), else the system PostgreSQL 15.
pub fn pg_bin(name: &str) -> String {
    format!("{}/{name}", std::env::var("JQ_PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into()))
}

/// `pg_dump -Fc` of `src`, then `pg_restore --exit-on-error` into a new empty database
/// `jqt_<tag>_…`, which is returned (dropped on drop like any [`TestDb`]).
pub fn dump_and_restore(src: &TestDb, tag: &str) -> TestDb {
    let n = SEQ.fetch_add(1, Ordering::SeqCst);
    let dump = std::env::temp_dir().join(format!("jq-dump-{}-{n}.pgc", std::process::id()));
    let out = Command::new(pg_bin("pg_dump"))
        .args(["-Fc", "-f", dump.to_str().unwrap(), "-d", &conninfo(&src.name)])
        .output()
        .expect("run pg_dump");
    assert!(out.status.success(), "pg_dump failed: {}", String::from_utf8_lossy(&out.stderr));
    let dst = TestDb::with_setup(tag, "");
    let out = Command::new(pg_bin("pg_restore"))
        .args(["--exit-on-error", "-d", &conninfo(&dst.name), dump.to_str().unwrap()])
        .output()
        .expect("run pg_restore");
    let _ = std::fs::remove_file(&dump);
    assert!(out.status.success(), "pg_restore failed: {}", String::from_utf8_lossy(&out.stderr));
    dst
}

/// The SQLSTATE of a failed statement, e.g. `"22023"`; panics if it succeeded.
pub fn sqlstate<T: std::fmt::Debug>(r: Result<T, postgres::Error>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e
            .code()
            .map(|c| c.code().to_string())
            .unwrap_or_else(|| panic!("error without SQLSTATE: {e}")),
    }
}

/// One claimed job as returned by `jq.claim`.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: i64,
    pub token: uuid::Uuid,
    pub attempt: i32,
}

/// `jq.claim(queue, worker, n, lease)`; lease is a Postgres interval literal or `None`.
pub fn claim(c: &mut Client, queue: &str, worker: &str, n: i32, lease: Option<&str>) -> Vec<Claimed> {
    c.query(
        "SELECT id, lease_token, attempt FROM jq.claim($1, $2, $3, $4::text::interval)",
        &[&queue, &worker, &n, &lease],
    )
    .expect("jq.claim")
    .iter()
    .map(|r| Claimed { id: r.get(0), token: r.get(1), attempt: r.get(2) })
    .collect()
}

/// `jq.complete(id, token)`.
pub fn complete(c: &mut Client, job: &Claimed) -> bool {
    c.query_one("SELECT jq.complete($1, $2)", &[&job.id, &job.token])
        .expect("jq.complete")
        .get(0)
}

/// State of a job as text, or `None` when the row is gone.
pub fn state(c: &mut Client, id: i64) -> Option<String> {
    c.query_opt("SELECT state::text FROM jq.jobs WHERE id = $1", &[&id])
        .expect("read state")
        .map(|r| r.get(0))
}

/// True when this run asks for the deliberately broken variant `name`, i.e. the tests run with
/// `JQ_TEST_BREAK=name`. A test that has a negative control applies it (with [`sabotage`]) only
/// then, so the normal suite checks the real functions and
/// `JQ_TEST_BREAK=name cargo test -p jq-pg-test --release --test FILE TEST` must fail.
pub fn broken(name: &str) -> bool {
    std::env::var("JQ_TEST_BREAK").map(|v| v == name).unwrap_or(false)
}

/// Installs a deliberately broken variant of one jq function in this test's own database, for
/// a negative control: reads the definition of `func` (a regprocedure such as
/// `jq.claim(text,text,integer,interval,interval,bigint)`) with `pg_get_functiondef`, replaces every occurrence
/// of `from` by `to` and runs the result (`CREATE OR REPLACE FUNCTION`).
///
/// Panics unless `from` occurs exactly `times` times in the definition, so a control cannot
/// silently stop breaking anything when the function changes, nor break only some of several
/// copies of a statement (jq.claim has one copy per LIMIT: pass 2 to break both).
pub fn sabotage(c: &mut Client, func: &str, from: &str, to: &str, times: usize) {
    let def: String = c
        .query_one("SELECT pg_get_functiondef($1::text::regprocedure)", &[&func])
        .expect("read function definition")
        .get(0);
    let found = def.matches(from).count();
    assert_eq!(
        found, times,
        "sabotage of {func}: {from:?} occurs {found} times in its definition, expected {times}"
    );
    c.batch_execute(&def.replace(from, to)).expect("install the broken variant");
}

/// A completed job left in a history table that is past retention and no longer current:
/// creates `queue` with retention 0, completes one job of it and runs a maintenance pass an
/// hour on, which moves the done ring on from that table (and truncates nothing). Returns the
/// job's id; the next pass would truncate the table.
pub fn job_past_retention_in_history(c: &mut Client, queue: &str) -> i64 {
    c.execute("SELECT jq.create_queue($1, retention => '0', history_retention => '0')", &[&queue]).expect("create_queue");
    let id: i64 = c.query_one("SELECT jq.enqueue($1)", &[&queue]).expect("enqueue").get(0);
    let job = claim(c, queue, "w", 1, None).pop().expect("claim the job");
    assert!(complete(c, &job), "complete the job");
    let gone: i64 = c.query_one("SELECT jq._prune(now() + interval '1 hour')::int8", &[]).expect("_prune").get(0);
    assert_eq!(gone, 0, "the pass that moves the ring on truncates nothing");
    id
}

/// Waits (at most 30 s) until `jq.history_tables()` says history table `table` is due for
/// truncation now: the pass spares the table its ring left for 10 s of real time (sql/history.sql).
pub fn await_history_due(c: &mut Client, table: &str) {
    waiting::wait_until(std::time::Duration::from_secs(30), &format!("{table} due for truncation"), || {
        c.query_one("SELECT truncation_due IS TRUE FROM jq.history_tables() WHERE table_name = $1", &[&table])
            .expect("jq.history_tables")
            .get::<_, bool>(0)
    });
}

/// A reporting transaction on `reader`: it reads `jq.jobs` (not ONLY) and so holds every
/// history table until it ends. Returns the reader's backend pid.
pub fn hold_history(reader: &mut Client) -> i32 {
    let pid = backend_pid(reader);
    reader.batch_execute("BEGIN; SELECT count(*) FROM jq.jobs").expect("a reporting transaction");
    pid
}

/// The whole job row as JSON text, to compare before and after a call that must change nothing.
pub fn job_row(c: &mut Client, id: i64) -> String {
    c.query_one("SELECT to_jsonb(j)::text FROM jq.jobs j WHERE id = $1", &[&id]).expect("job row").get(0)
}

/// (seq, attempt, outcome) of a job's executions, in order.
pub fn executions(c: &mut Client, id: i64) -> Vec<(i32, i32, String)> {
    c.query("SELECT seq::int4, attempt, outcome::text FROM jq.executions WHERE job_id = $1 ORDER BY seq", &[&id])
        .expect("executions")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// The backend pid of a connection, to watch it from another one.
pub fn backend_pid(c: &mut Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

/// Waits (polling every 10 ms, at most 10 s) until backend `pid` waits for a lock or `ended()`
/// holds (the call under test returned instead); panics with `what` after 10 s.
pub fn await_lock_wait(admin: &mut Client, pid: i32, what: &str, mut ended: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !waiting_on_lock(admin, pid) && !ended() {
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "{what}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether backend `pid` is waiting for a lock right now (seen from `admin`).
pub fn waiting_on_lock(admin: &mut Client, pid: i32) -> bool {
    admin.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
    admin
        .query_one(
            "SELECT coalesce((SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1), false)",
            &[&pid],
        )
        .unwrap()
        .get(0)
}
