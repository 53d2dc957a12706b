//! TLS: `jqctl` and the worker against a private cluster with `ssl = on`, a CA and a server
//! certificate (SAN `localhost`, `127.0.0.1`) made here with the `openssl` command. Its
//! pg_hba.conf refuses plain TCP connections except for the harness (`postgres`), and refuses
//! TLS for the role `plain_only`, so a connection that ends up plain or encrypted when it
//! should not fails visibly.
//!
//! The cluster runs on `JQ_CLIENT_TEST_TLS_PGPORT` (default `JQ_TEST_PGPORT` + 20) with the
//! binaries in `JQ_PG_BIN`; the tests of this file share it and the last one to finish stops it.
//! Negative controls (`JQ_CLIENT_BREAK=… cargo test -p worker-client --features test-breaks
//! --test tls`, worker-client/src/tls/breaks.rs) are named at each test.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use common::*;

/// The private TLS cluster; stopped when the last test holding it drops it.
struct TlsCluster {
    dir: String,
    port: u16,
    certs: PathBuf,
}

static CLUSTER: Mutex<Weak<TlsCluster>> = Mutex::new(Weak::new());

/// The shared TLS cluster, started (certificates, initdb) when no test holds it.
fn cluster() -> Arc<TlsCluster> {
    let mut g = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = g.upgrade() {
        return c;
    }
    let c = Arc::new(TlsCluster::start());
    *g = Arc::downgrade(&c);
    c
}

impl TlsCluster {
    fn start() -> TlsCluster {
        let port: u16 = std::env::var("JQ_CLIENT_TEST_TLS_PGPORT")
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or(port() + 20);
        let dir = format!("/tmp/jq-client-tls-{port}");
        let certs = PathBuf::from(format!("{dir}-certs"));
        // Fresh certificates and data once per test process; later starts reuse them.
        static FRESH: std::sync::Once = std::sync::Once::new();
        FRESH.call_once(|| {
            cluster_cmd(&format!("jq_cluster_stop '{dir}' || true; rm -rf '{dir}' '{}'", certs.display()));
            make_certs(&certs);
        });
        let hba = certs.join("pg_hba.conf");
        std::fs::write(
            &hba,
            "local all all trust\n\
             hostnossl all postgres 127.0.0.1/32 trust\n\
             hostssl all plain_only 127.0.0.1/32 reject\n\
             hostnossl all plain_only 127.0.0.1/32 trust\n\
             hostnossl all all 127.0.0.1/32 reject\n\
             hostssl all all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        let c = certs.display();
        cluster_cmd(&format!(
            "jq_cluster_start '{dir}' {port} ssl=on ssl_cert_file='{c}/server.crt' ssl_key_file='{c}/server.key' hba_file='{}'",
            hba.display()
        ));
        let cluster = TlsCluster { dir, port, certs };
        let mut admin = Client::connect(&conninfo_at(port, "postgres"), NoTls).expect("harness connects plain");
        admin
            .batch_execute(
                "DO $$ BEGIN CREATE ROLE app LOGIN SUPERUSER; CREATE ROLE plain_only LOGIN SUPERUSER;
                 EXCEPTION WHEN duplicate_object THEN NULL; END $$",
            )
            .unwrap();
        cluster
    }

    /// A database with jq on this cluster.
    fn db(&self, tag: &str) -> TestDb {
        TestDb::on_port(self.port, tag, "CREATE EXTENSION jq; SELECT jq.create_queue('q')")
    }

    fn cert(&self, name: &str) -> String {
        self.certs.join(name).display().to_string()
    }

    /// `postgresql://USER@HOST:PORT/DB?QUERY`.
    fn url(&self, user: &str, host: &str, db: &TestDb, query: &str) -> String {
        format!("postgresql://{user}@{host}:{}/{}?{query}", self.port, db.name)
    }
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg("-c")
            .arg(format!("source '{}' && jq_cluster_stop '{}'", cluster_sh().display(), self.dir))
            .status();
    }
}

/// A CA, a server certificate it signs (CN localhost, SAN localhost and 127.0.0.1, key
/// readable by `postgres` only), and an unrelated second CA.
fn make_certs(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let script = r#"set -e
        ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
        openssl req -x509 $ec -keyout ca.key -out ca.crt -days 30 -subj "/CN=jq test CA" 2>/dev/null
        openssl req -x509 $ec -keyout other-ca.key -out other-ca.crt -days 30 -subj "/CN=jq other CA" 2>/dev/null
        openssl req $ec -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >san.ext
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
            -extfile san.ext -out server.crt 2>/dev/null
        chmod 600 server.key
        if [ "$(id -u)" = 0 ]; then chown postgres:postgres server.key server.crt; fi
        chmod 755 ."#;
    let st = Command::new("bash").arg("-c").arg(script).current_dir(dir).status().unwrap();
    assert!(st.success(), "making certificates with openssl failed");
}

/// An empty HOME, so that no `~/.postgresql/root.crt` of the machine takes part.
fn empty_home() -> PathBuf {
    let d = log_dir().join("tls-home");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `jqctl ARGS` with `url`, the TLS variables cleared then set from `envs`, an empty HOME.
fn jqctl_tls(url: &str, envs: &[(&str, &str)], args: &[&str]) -> Output {
    break_env(); // the control's variable is inherited; this checks the feature is on
    let mut c = jqctl_with_url(url);
    c.env_remove("PGSSLMODE").env_remove("PGSSLROOTCERT").env("HOME", empty_home());
    for (k, v) in envs {
        c.env(k, v);
    }
    c.args(args).stdin(Stdio::null()).output().unwrap()
}

/// Asserts `jqctl queues` connected and listed queue `q`.
fn connects(out: &Output, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains('q'),
        "{what}: expected to connect; exit {:?}, stderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Asserts exit 1 and exactly one stderr line `jqctl: error: …` containing each of `expect`.
fn fails_with(out: &Output, what: &str, expect: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: expected exit 1; stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{what}: one line expected: {stderr}");
    assert!(stderr.starts_with("jqctl: error: "), "{what}: {stderr}");
    for e in expect {
        assert!(stderr.contains(e), "{what}: expected {e:?} in: {stderr}");
    }
}

/// verify-full with the right CA, by name and by IP address (both in the SAN), in the URL
/// and the key=value forms; verify-ca; `jqctl metrics --once` too. Control
/// `tls_no_tls` (every connection plain, as before TLS support) was seen failing with
/// "pg_hba.conf rejects connection for host \"127.0.0.1\", user \"app\", … no encryption".
#[test]
fn verify_full_with_the_right_ca_and_host_connects() {
    let cl = cluster();
    let db = cl.db("tlsok");
    let ca = cl.cert("ca.crt");
    for host in ["localhost", "127.0.0.1"] {
        let url = cl.url("app", host, &db, &format!("sslmode=verify-full&sslrootcert={ca}"));
        connects(&jqctl_tls(&url, &[], &["queues"]), &format!("verify-full to {host}"));
    }
    let kv = format!("host=localhost port={} user=app dbname={} sslmode=verify-full sslrootcert='{ca}'", cl.port, db.name);
    connects(&jqctl_tls(&kv, &[], &["queues"]), "key=value form");
    let url = cl.url("app", "localhost", &db, &format!("sslmode=verify-ca&sslrootcert={ca}"));
    connects(&jqctl_tls(&url, &[], &["queues"]), "verify-ca");
    let out = jqctl_tls(&url, &[], &["metrics", "--once"]);
    assert!(out.status.success(), "metrics: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("queue=\"q\""), "metrics lists queue q");
}

/// A wrong CA, a host name not in the certificate (`hostaddr` connects to 127.0.0.1 under the
/// name `wrong.invalid`), and verify-full without any root certificate: each one line, exit 1,
/// never a plain fallback (its error would be pg_hba's). verify-ca accepts the wrong name (chain
/// only). Controls: `tls_accept_any_cert` seen failing ("wrong CA: expected exit 1" — it
/// connected), `tls_no_hostname_check` seen failing ("wrong host: expected exit 1").
#[test]
fn wrong_ca_and_wrong_host_are_one_line_errors() {
    let cl = cluster();
    let db = cl.db("tlsbad");
    let other = cl.cert("other-ca.crt");
    let url = cl.url("app", "localhost", &db, &format!("sslmode=verify-full&sslrootcert={other}"));
    let out = jqctl_tls(&url, &[], &["queues"]);
    let at = format!("cannot connect to PostgreSQL at localhost:{}", cl.port);
    fails_with(&out, "wrong CA", &[&at, "the server certificate does not verify: unable to get local issuer certificate", "sslmode=verify-full", "other-ca.crt"]);

    let ca = cl.cert("ca.crt");
    let wrong = |mode: &str| cl.url("app", "wrong.invalid", &db, &format!("hostaddr=127.0.0.1&sslmode={mode}&sslrootcert={ca}"));
    let out = jqctl_tls(&wrong("verify-full"), &[], &["queues"]);
    fails_with(&out, "wrong host", &["wrong.invalid", "does not verify: hostname mismatch", "sslmode=verify-full"]);
    connects(&jqctl_tls(&wrong("verify-ca"), &[], &["queues"]), "verify-ca ignores the host name");

    let url = cl.url("app", "localhost", &db, "sslmode=verify-full");
    let out = jqctl_tls(&url, &[], &["queues"]);
    fails_with(&out, "no root certificate", &["sslmode=verify-full needs a root certificate", "root.crt"]);
}

/// require works with no CA at all; disable is refused by the server (`hostnossl … reject`);
/// require for `plain_only` (whose TLS connections the server rejects) fails instead of
/// falling back. Control `tls_no_tls` seen failing ("require without a CA: expected to
/// connect; … no encryption").
#[test]
fn require_works_without_a_ca_and_never_falls_back() {
    let cl = cluster();
    let db = cl.db("tlsreq");
    connects(&jqctl_tls(&cl.url("app", "localhost", &db, "sslmode=require"), &[], &["queues"]), "require without a CA");
    let out = jqctl_tls(&cl.url("app", "localhost", &db, "sslmode=disable"), &[], &["queues"]);
    fails_with(&out, "disable on a TLS-only server", &["no encryption", "SQLSTATE 28000"]);
    let out = jqctl_tls(&cl.url("plain_only", "localhost", &db, "sslmode=require"), &[], &["queues"]);
    fails_with(&out, "require for a plain-only role", &["SSL encryption", "SQLSTATE 28000"]);
}

/// prefer (the default) connects `plain_only` although the server offers TLS: the TLS
/// attempt is refused by pg_hba, and prefer retries plain, as libpq does. Control
/// `tls_prefer_no_fallback` seen failing ("prefer for a plain-only role: expected to connect;
/// … SSL encryption").
#[test]
fn prefer_falls_back_to_plain_when_tls_is_refused() {
    let cl = cluster();
    let db = cl.db("tlspref");
    for query in ["sslmode=prefer", ""] {
        let out = jqctl_tls(&cl.url("plain_only", "localhost", &db, query), &[], &["queues"]);
        connects(&out, &format!("prefer for a plain-only role ({query:?})"));
    }
}

/// `PGSSLMODE` and `PGSSLROOTCERT` set the mode and the CA when the URL has neither; the URL
/// wins over them; a bad PGSSLMODE is a one-line error. Controls: `tls_no_tls` seen failing
/// ("PGSSLMODE=verify-full with the right CA: expected to connect; … no encryption"),
/// `tls_ignore_url_sslmode` seen failing ("the URL's sslmode=disable over PGSSLMODE: expected
/// exit 1").
#[test]
fn environment_variables_set_the_mode_and_root_certificate() {
    let cl = cluster();
    let db = cl.db("tlsenv");
    let url = cl.url("app", "localhost", &db, "");
    let (ca, other) = (cl.cert("ca.crt"), cl.cert("other-ca.crt"));
    let env_ok = [("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", ca.as_str())];
    connects(&jqctl_tls(&url, &env_ok, &["queues"]), "PGSSLMODE=verify-full with the right CA");
    let out = jqctl_tls(&url, &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", &other)], &["queues"]);
    fails_with(&out, "PGSSLROOTCERT with the wrong CA", &["certificate does not verify"]);
    let out = jqctl_tls(&cl.url("app", "localhost", &db, "sslmode=disable"), &env_ok, &["queues"]);
    fails_with(&out, "the URL's sslmode=disable over PGSSLMODE", &["no encryption"]);
    let out = jqctl_tls(&url, &[("PGSSLMODE", "verify_full")], &["queues"]);
    fails_with(&out, "bad PGSSLMODE", &["invalid sslmode \"verify_full\""]);
}

/// On the shared test cluster (no TLS): disable and prefer connect; require and verify-full
/// fail with one line. Controls `tls_no_tls` and `tls_ignore_url_sslmode` seen failing
/// ("require on a server without TLS: expected exit 1" — it connected plain).
#[test]
fn disable_and_prefer_work_on_a_server_without_tls() {
    let db = TestDb::with_setup("tlsnone", "CREATE EXTENSION jq; SELECT jq.create_queue('q')");
    let url = |q: &str| format!("postgresql://postgres@{}:{}/{}?{q}", host(), db.port, db.name);
    for q in ["sslmode=disable", "sslmode=prefer", ""] {
        connects(&jqctl_tls(&url(q), &[], &["queues"]), q);
    }
    let out = jqctl_tls(&url("sslmode=require"), &[], &["queues"]);
    fails_with(&out, "require on a server without TLS", &["server does not support TLS"]);
}

/// A job enqueued over verify-full is completed by a `jqctl work` connected over verify-full
/// (both its connections encrypted, pg_stat_ssl says); SIGTERM during its waiting claim
/// (idle wait 60 s) stops it within 10 s, so the cancel request went over TLS too. Controls:
/// `tls_cancel_no_tls` seen failing ("the worker stops within 10 s": the cancel was refused
/// and the claim waited), `tls_no_tls` seen failing (the worker could not connect).
#[test]
fn a_job_flows_through_a_worker_over_verify_full() {
    let cl = cluster();
    let db = cl.db("tlswork");
    let url = cl.url("app", "localhost", &db, &format!("sslmode=verify-full&sslrootcert={}", cl.cert("ca.crt")));
    let out = jqctl_tls(&url, &[], &["enqueue", "q", r#"{"n":1}"#]);
    assert!(out.status.success(), "enqueue: {}", String::from_utf8_lossy(&out.stderr));

    let log = log_dir().join(format!("{}-worker.log", db.name));
    let mut cmd = jqctl_with_url(&url);
    cmd.env_remove("PGSSLMODE").env_remove("PGSSLROOTCERT").env("HOME", empty_home());
    cmd.args(["work", "--queue", "q", "--idle-wait", "60s", "--", "cat"]);
    let child = cmd.stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    let mut w = WorkerProc { child, name: "tls".into(), log };
    let mut c = db.connect();
    wait_until(Duration::from_secs(30), "the job completed over TLS", || {
        db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'completed' AND result = payload") == 1
    });
    let sessions = format!(
        "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
          WHERE a.datname = '{}' AND a.application_name = 'jqctl-work' AND s.ssl",
        db.name
    );
    assert_eq!(db.count(&mut c, &sessions), 2, "both worker connections use TLS\n{}", w.log_text());
    wait_until(Duration::from_secs(30), "the worker waits in jq.claim", || {
        db.count(&mut c, &format!("{sessions} AND a.state = 'active' AND a.query LIKE '%jq.claim%'")) == 1
    });
    w.signal("TERM");
    let st = w.wait_for(Duration::from_secs(10));
    assert!(st.is_some_and(|s| s.success()), "the worker stops within 10 s\n{}", w.log_text());
}
