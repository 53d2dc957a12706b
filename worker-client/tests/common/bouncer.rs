//! A private PgBouncer in transaction mode in front of the shared test cluster, for
//! tests/pooler.rs: Debian's `pgbouncer` package (1.18: no prepared-statement support), run
//! as the `postgres` user (it refuses root), `auth_type = trust` with a userlist written here,
//! listening on a port of its own.
//!
//! When `pgbouncer` is not installed the tests skip loudly, unless the environment variable
//! `CI` is set (.ci/run sets it; .ci/setup installs pgbouncer): then they fail.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{host, port, TestDb};

/// Where Debian's package installs it.
const PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// A running pgbouncer (daemonized, found through its pid file), stopped on drop.
pub struct Bouncer {
    pub port: u16,
    dir: PathBuf,
}

impl Bouncer {
    /// Starts a pgbouncer in transaction mode on `JQ_TEST_PGPORT + offset`, with
    /// `default_pool_size` server connections per database; `None` (after saying so on
    /// stderr) when pgbouncer is missing outside CI. When that port is taken (another process,
    /// or a client connection's local port when the base port lies in the ephemeral range), it
    /// retries on ports the kernel reports free, up to five times.
    pub fn start(offset: u16, default_pool_size: u32) -> Option<Bouncer> {
        if !std::path::Path::new(PGBOUNCER).exists() {
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty());
            assert!(!ci, "{PGBOUNCER} is missing, and CI is set: .ci/setup installs the pgbouncer package");
            eprintln!("SKIPPED: {PGBOUNCER} is missing (apt-get install pgbouncer, or run .ci/setup); pooler test not run");
            return None;
        }
        let mut port = port() + offset;
        for _ in 0..5 {
            match Self::start_on(port, default_pool_size) {
                Ok(b) => return Some(b),
                Err(log) if log.contains("Address already in use") => {
                    eprintln!("pgbouncer: port {port} is taken, retrying on another");
                    port = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap().local_addr().unwrap().port();
                }
                Err(log) => panic!("pgbouncer is not listening on {port}:\n{log}"),
            }
        }
        panic!("pgbouncer: no free port after five tries");
    }

    /// One attempt at [`Bouncer::start`] on `port`: the bouncer, or pgbouncer's log when it
    /// did not come up within 15 s (or exited: it does when it cannot bind).
    fn start_on(port: u16, default_pool_size: u32) -> Result<Bouncer, String> {
        let dir = std::env::temp_dir().join(format!("jq-bouncer-{port}"));
        stop_pidfile(&dir.join("pgbouncer.pid"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ini = format!(
            "[databases]\n* = host={host} port={server}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
             unix_socket_dir =\nauth_type = trust\nauth_file = {dir}/userlist.txt\npool_mode = transaction\n\
             default_pool_size = {default_pool_size}\nmax_client_conn = 200\nlogfile = {dir}/pgbouncer.log\n\
             pidfile = {dir}/pgbouncer.pid\n",
            host = host(),
            server = super::port(),
            dir = dir.display(),
        );
        std::fs::write(dir.join("pgbouncer.ini"), ini).unwrap();
        std::fs::write(dir.join("userlist.txt"), "\"postgres\" \"\"\n").unwrap();
        let as_root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        if as_root {
            let st = Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir).status().unwrap();
            assert!(st.success(), "chown {}", dir.display());
        }
        let mut cmd = if as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", PGBOUNCER]);
            c
        } else {
            Command::new(PGBOUNCER)
        };
        let st = cmd.current_dir("/").arg("-d").arg(dir.join("pgbouncer.ini")).status().unwrap();
        assert!(st.success(), "pgbouncer did not start: {st:?}");
        let b = Bouncer { port, dir };
        let deadline = Instant::now() + Duration::from_secs(15);
        // Up once its log says it listens on the port (a connect alone could reach another
        // process holding the port) and a connect succeeds; a FATAL line means it exited.
        let listening = format!("listening on 127.0.0.1:{port}");
        loop {
            let log = b.log();
            if log.contains(&listening) && TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(b);
            }
            if Instant::now() >= deadline || log.contains("FATAL") {
                return Err(log);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The URL of `db` through this pooler.
    pub fn url(&self, db: &TestDb) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/{}", self.port, db.name)
    }

    /// Leaves named prepared statements `s0` … `s199` (the names tokio-postgres gives its
    /// statements) on each of `servers` server connections of `db`'s pool, as other clients of
    /// a pooler without prepared-statement support do: `servers` client transactions held at
    /// once take as many server connections, and `PREPARE` outlives the transaction. With
    /// `servers` = the pool size, every server connection a later client gets has them, so a
    /// client that prepares named statements meets 42P05 "prepared statement \"s0\" already
    /// exists" at its first one, every time.
    pub fn leave_statements_behind(&self, db: &TestDb, servers: usize) {
        let url = self.url(db);
        let prepares: String = (0..200).map(|i| format!("PREPARE s{i} AS SELECT {i};")).collect();
        let mut held: Vec<super::Client> = (0..servers)
            .map(|_| {
                let mut c = super::Client::connect(&url, super::NoTls).expect("connect through pgbouncer");
                c.batch_execute(&format!("BEGIN; {prepares}")).expect("prepare through pgbouncer");
                c
            })
            .collect();
        for c in held.iter_mut() {
            c.batch_execute("COMMIT").expect("commit");
        }
    }

    /// pgbouncer's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        stop_pidfile(&self.dir.join("pgbouncer.pid"));
    }
}

/// Stops the pgbouncer whose pid `pidfile` holds (SIGTERM: immediate shutdown) and waits up
/// to 10 s for it to exit.
fn stop_pidfile(pidfile: &std::path::Path) {
    let Some(pid) = std::fs::read_to_string(pidfile).ok().and_then(|s| s.trim().parse::<i32>().ok()) else { return };
    // Only a pgbouncer: a stale pid file's pid may belong to another process by now.
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim() != "pgbouncer" {
        return;
    }
    let alive = |pid: i32| Command::new("kill").args(["-0", &pid.to_string()]).status().is_ok_and(|s| s.success());
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}
