//! The worker and every `jqctl` command through a transaction-mode pooler: Debian's PgBouncer
//! 1.18 (no prepared-statement support), `pool_mode = transaction`, in front of the shared
//! test cluster (tests/common/bouncer.rs). The drain, kill -9 and SIGTERM scenarios of
//! tests/drain.rs, crash.rs and shutdown.rs run here unchanged with their `jqctl` processes
//! connected to the pooler; the test's own checks connect straight to the cluster.
//!
//! - The drain runs in the default statement mode (`prepared`): each connection meets a
//!   statement that is not its own (26000 or 42P05, a flood of retried claims), falls back to unnamed
//!   statements once, and the workers' logs hold nothing else.
//! - The pickup test also checks the worker's fleet entry (jq.fleet): registered, beating and
//!   deregistered through the pooler.
//! - The others run with `JQ_STATEMENT_MODE=unprepared` (no fallback warning at all) after
//!   every server connection of the pool was left holding statements named `s0` … `s199` by
//!   another client, so any named statement of the client collides.
//!
//! Negative controls, all seen failing:
//!   JQ_CLIENT_BREAK=always_prepared cargo test -p worker-client --features test-breaks --test pooler
//!     (the worker prepares and never falls back, as before statement modes):
//!     `drain_through_pgbouncer` → `timed out after 600s waiting for: all 10000 jobs completed`,
//!     its workers' logs a flood of retried claims (one of them: 1,206 `claim failed; retrying
//!     error=prepared statement "s…" does not exist (SQLSTATE 26000)`, 644 results not stored,
//!     24 `fail refused`); `crash_through_pgbouncer` → `timed out after 30s waiting for: A runs
//!     all 3 jobs`, `shutdown_through_pgbouncer` → `… waiting for: all 4 jobs running`,
//!     `pickup_through_pgbouncer` → `worker exited`: each worker exits at start with `jqctl:
//!     error: prepared statement "s5" already exists (SQLSTATE 42P05)`.
//!   JQ_TEST_JQCTL=<jqctl built before statement modes> cargo test -p worker-client --test pooler every_jqctl
//!     → `jqctl ["create-queue", …]: jqctl: error: prepared statement "s0" already exists
//!     (SQLSTATE 42P05)`.
//!   The cancel of src/cancel.rs replaced by tokio-postgres' `cancel_query(NoTls)` (the code
//!     before it) → `pickup_through_pgbouncer` panics `worker exits within 5 s of SIGTERM`:
//!     its 30 s claim was never cancelled (PgBouncer logs the cancel client "closing because:
//!     client unexpected eof").

mod common;
use common::bouncer::Bouncer;
use common::*;
use std::time::{Duration, Instant};

/// The workers' environment: `JQ_CLIENT_BREAK` of the run (a control), plus `extra`.
fn worker_env(extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = break_env();
    env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    env
}

fn as_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

const FALLBACK: &str = "sending unprepared statements from now on";

/// Every log line naming a SQLSTATE is a statement-mode fallback, at most `fallbacks` per
/// log (one per connection: claim, reporter, heartbeat).
fn assert_clean(logs: &[String], fallbacks: usize) {
    for log in logs {
        let errors: Vec<&str> = log.lines().filter(|l| l.contains("SQLSTATE")).collect();
        let n = errors.iter().filter(|l| l.contains(FALLBACK)).count();
        assert_eq!(errors.len(), n, "errors other than the fallback:\n{log}");
        assert!(n <= fallbacks, "{n} fallbacks (at most {fallbacks}):\n{log}");
    }
}

/// 10,000 jobs, three `jqctl work` processes in the default mode through
/// PgBouncer (pool of 9 server connections: three per worker).
#[test]
fn drain_through_pgbouncer() {
    let db = TestDb::new("pool_drain");
    let Some(bouncer) = Bouncer::start(5, 9) else { return };
    let env = worker_env(&[]);
    let start = Instant::now();
    let logs = scenarios::drain(&db, &bouncer.url(&db), 10_000, &as_refs(&env));
    eprintln!("drain through pgbouncer: 10,000 jobs in {:?} (enqueue included)", start.elapsed());
    assert_clean(&logs, 3);
}

#[test]
fn crash_through_pgbouncer() {
    let db = TestDb::new("pool_crash");
    let Some(bouncer) = Bouncer::start(6, 6) else { return };
    bouncer.leave_statements_behind(&db, 6);
    let env = worker_env(&[("JQ_STATEMENT_MODE", "unprepared")]);
    let logs = scenarios::crash(&db, &bouncer.url(&db), &as_refs(&env));
    assert_clean(&logs, 0);
}

#[test]
fn shutdown_through_pgbouncer() {
    let db = TestDb::new("pool_shutdown");
    let Some(bouncer) = Bouncer::start(7, 3) else { return };
    bouncer.leave_statements_behind(&db, 3);
    let env = worker_env(&[("JQ_STATEMENT_MODE", "unprepared")]);
    let logs = scenarios::shutdown(&db, &bouncer.url(&db), &as_refs(&env));
    assert_clean(&logs, 0);
    assert!(logs[0].contains("statements=unprepared"), "{}", logs[0]);
}

/// A worker idle in a long-poll claim through the pooler starts a new job within 500 ms of
/// its enqueue and completes it within a second, five times in a row.
#[test]
fn pickup_through_pgbouncer() {
    let db = TestDb::new("pool_pickup");
    let Some(bouncer) = Bouncer::start(8, 3) else { return };
    bouncer.leave_statements_behind(&db, 3);
    let mut c = db.connect();
    create_queue(&mut c, "pick", "30 seconds", "");
    // Beats every 500 ms, so that the check below sees one within the test.
    jq_pg_test::admin()
        .batch_execute(&format!("ALTER DATABASE {} SET jq.worker_beat_interval = '500ms'", db.name))
        .unwrap();
    let env = worker_env(&[("JQ_STATEMENT_MODE", "unprepared")]);
    let mut w =
        WorkerProc::start_at(&bouncer.url(&db), &db.name, "pick", "P", &["-c", "1", "--idle-wait", "30s"], "true", &as_refs(&env));
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND state = 'active' \
         AND query LIKE '%jq.claim(%' AND wait_event_type = 'Extension'",
        db.name
    );
    let mut lags = Vec::new();
    for round in 1..=5 {
        wait_until(Duration::from_secs(30), "the worker waits in a long-poll claim", || {
            if let Some(st) = w.child.try_wait().unwrap() {
                panic!("worker exited ({st:?}):\n{}", w.log_text());
            }
            db.count(&mut c, &waiting) == 1
        });
        let id: i64 = c.query_one("SELECT jq.enqueue('pick', jsonb_build_object('round', $1::int4))", &[&round]).unwrap().get(0);
        wait_until(Duration::from_secs(30), "the job completed", || state(&mut c, id).as_deref() == Some("completed"));
        let row = c
            .query_one(
                "SELECT extract(epoch FROM started_at - created_at)::float8, \
                        extract(epoch FROM finished_at - created_at)::float8 FROM jq.jobs WHERE id = $1",
                &[&id],
            )
            .unwrap();
        lags.push((row.get::<_, f64>(0), row.get::<_, f64>(1)));
    }
    // The worker registered in the fleet through the pooler (on its reporter connection, one
    // statement per call) and beats there; its graceful stop deregisters it.
    let fleet = |c: &mut Client| -> Option<(String, i32, i64)> {
        c.query_opt("SELECT state, pid, jsonb_array_length(samples)::int8 FROM jq.fleet WHERE name = 'P'", &[])
            .unwrap()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
    };
    wait_until(Duration::from_secs(30), "the worker is active in jq.fleet and has beaten", || {
        matches!(fleet(&mut c), Some((s, p, n)) if s == "active" && p == w.pid() && n >= 1)
    });
    // Its claim waits up to 30 s: the stop must cancel it through the pooler (src/cancel.rs).
    w.signal("TERM");
    let st = w.wait_for(Duration::from_secs(5)).unwrap_or_else(|| panic!("worker exits within 5 s of SIGTERM\n{}", w.log_text()));
    assert!(st.success(), "{}", w.log_text());
    assert_eq!(fleet(&mut c).map(|f| f.0).as_deref(), Some("stopped"), "{}", w.log_text());
    eprintln!("pickup through pgbouncer (started, finished after enqueue, s): {lags:?}");
    // Woken, not found by the next claim: each job starts well inside the claim's 30 s wait.
    // The bound is a third of that wait, not a speed target (the figures above are printed; on
    // a quiet machine they are milliseconds, under load a few seconds were seen), so that a
    // loaded machine cannot fail it while a missed wakeup (30 s) always does.
    for (started, _) in &lags {
        assert!(*started < 10.0, "pickup not woken {lags:?}\n{}", w.log_text());
    }
    assert_clean(&[w.log_text()], 0);
}

/// Every `jqctl` command but `work` (above), through a pool of one server connection left
/// holding named statements: each sends unnamed statements only.
#[test]
fn every_jqctl_command_through_pgbouncer() {
    let db = TestDb::new("pool_cmds");
    let Some(bouncer) = Bouncer::start(9, 1) else { return };
    bouncer.leave_statements_behind(&db, 1);
    let url = bouncer.url(&db);
    let run = |args: &[&str]| -> String {
        let out = jqctl_with_url(&url).args(args).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "jqctl {args:?}: {text}");
        text
    };
    run(&["create-queue", "cmds", "--max-attempts", "3", "--lease", "30s"]);
    run(&["alter-queue", "cmds", "--max-attempts", "4", "--rate-limit", "100"]);
    assert!(run(&["queues"]).contains("cmds"));
    run(&["pause", "cmds"]);
    run(&["resume", "cmds"]);
    let id = run(&["enqueue", "cmds", "{\"a\":1}", "--kind", "k", "--priority", "2"]).trim().to_string();
    enqueue_lines_at(&url, "cmds", &["{\"b\":2}".to_string(), "{\"b\":3}".to_string()]);
    assert!(run(&["stats"]).contains("cmds"));
    assert!(run(&["jobs", "--queue", "cmds", "--state", "ready"]).contains(&id));
    run(&["cancel", &id]);
    run(&["retry", &id]);
    let mut c = db.connect();
    if db.count(&mut c, "SELECT count(*) FROM pg_proc WHERE proname = 'schedule' AND pronamespace = 'jq'::regnamespace") > 0 {
        run(&["schedule", "nightly", "0 3 * * *", "cmds", "--payload", "{}"]);
        assert!(run(&["schedules"]).contains("nightly"));
        run(&["unschedule", "nightly"]);
    }
    assert!(run(&["metrics", "--once"]).contains("jq_queue_depth"));
    // The dashboard's pages, each query in a transaction of its own under SET LOCAL
    // statement_timeout (--query-timeout), on the pool's server connection.
    let dash = common::dashboard::DashboardProc::start(&url, "pool_cmds_dashboard", &[]);
    for path in ["/".to_string(), "/queues/cmds".to_string(), format!("/jobs/{id}"), "/schedules".into(), "/workers".into()] {
        let (status, body) = http_get(&dash.base, &path);
        assert_eq!(status, 200, "GET {path} through pgbouncer: {body}");
    }
    drop(dash);
    // The scrape's statement_timeout (--scrape-timeout) and the dashboard's ended with their
    // transactions: the pool's one server connection, which the next client gets, has none.
    // Seen failing with a session-wide SET in the scrape, and in the dashboard
    // (JQ_CLIENT_BREAK=dashboard_session_timeout): "10s".
    let mut next = Client::connect(&url, NoTls).unwrap();
    let shown = next.simple_query("SHOW statement_timeout").unwrap();
    let timeout = shown.iter().find_map(|m| match m {
        postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(timeout.as_deref(), Some("0"), "a scrape or the dashboard left its statement_timeout on the pooled connection");
    assert!(run(&["workers"]).contains("(0 rows)"));
    assert_eq!(db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE queue = 'cmds' AND state = 'ready'"), 3);
}

/// GET `base` + `path` (base: `http://HOST:PORT[/prefix]`) on a fresh connection: the status and
/// the body.
fn http_get(base: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let rest = base.strip_prefix("http://").expect("an http:// URL");
    let (addr, prefix) = rest.split_once('/').map_or((rest, String::new()), |(a, p)| (a, format!("/{p}")));
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {prefix}{path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, raw.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_string()))
}
