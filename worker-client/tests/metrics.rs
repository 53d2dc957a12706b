//! `jqctl metrics`: the Prometheus exposition of a database's queues, tables and worker.

mod common;
use common::*;
use std::time::Duration;

#[test]
fn metrics_once_exposes_queue_gauges_and_table_health() {
    let db = TestDb::new("metrics");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('mq'); SELECT jq.enqueue_many('mq', '[1, 2, 3]')").unwrap();
    let out = db.jqctl().args(["metrics", "--once"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for line in [
        "jq_queue_depth{queue=\"mq\"} 3.0",
        "jq_queue_claimable{queue=\"mq\"} 3.0",
        "jq_queue_running{queue=\"mq\"} 0.0",
        "# TYPE jq_queue_oldest_claimable_age_seconds gauge",
        "jq_table_total_bytes{table=\"jobs\"}",
        "# TYPE jq_worker_up gauge",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
}

/// A history table past retention that a reporting transaction keeps from truncation is
/// counted (jq.history_tables(); docs/observability.md, JqHistoryRetentionBlocked). Seen failing with the gauge left out: the line was missing.
/// Waits about 10 s: maintenance spares the table the ring just left for that long.
#[test]
fn metrics_count_the_sessions_that_keep_a_history_table_from_truncation() {
    let db = TestDb::new("metrics_hist");
    // The ring moves on from table 0, whose one job is past retention; a reader then holds it.
    let mut c = db.connect();
    job_past_retention_in_history(&mut c, "mh");
    await_history_due(&mut c, "jobs_done_0");
    let mut reader = db.connect();
    hold_history(&mut reader);
    let scrape = || {
        let out = db.jqctl().args(["metrics", "--once"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let text = scrape();
    for line in ["jq_history_truncation_blocked_sessions{table=\"jobs_done_0\"} 1.0",
                 "jq_history_truncation_blocked_sessions{table=\"jobs_done_1\"} 0.0"] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    reader.batch_execute("COMMIT").unwrap();
    let text = scrape();
    assert!(text.contains("jq_history_truncation_blocked_sessions{table=\"jobs_done_0\"} 0.0"), "{text}");
}

/// jqctl may be newer than the extension: against jq 0.1.0 (no hooks_pending, no history
/// tables) a scrape still answers, with the table gauges and without the history series. Seen
/// failing with jq.history_tables() called unchecked: "function jq.history_tables() does not exist".
#[test]
fn metrics_answer_against_an_older_jq() {
    let db = TestDb::with_setup("metrics_old", "CREATE EXTENSION jq VERSION '0.1.0'");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('mo'); SELECT jq.enqueue('mo')").unwrap();
    let out = db.jqctl().args(["metrics", "--once"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("jq_queue_depth{queue=\"mo\"} 1.0"), "{text}");
    assert!(text.contains("jq_table_total_bytes{table=\"jobs\"}"), "{text}");
    assert!(!text.contains("jq_history_truncation_blocked_sessions{"), "{text}");
}

/// A table whose size jq.table_health cannot read without waiting (one an open transaction has
/// locked, here the cron fire log, which no other part of the scrape reads) has no size sample,
/// and the scrape still answers with the others. Seen failing with the size read as a number:
/// the scrape panicked on the NULL.
#[test]
fn metrics_answer_while_a_table_is_locked() {
    let db = TestDb::new("metrics_locked");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('ml')").unwrap();
    let mut locker = db.connect();
    locker.batch_execute("BEGIN; LOCK TABLE jq.cron_runs IN ACCESS EXCLUSIVE MODE").unwrap();
    let out = db.jqctl().args(["metrics", "--once"]).output().unwrap();
    locker.batch_execute("ROLLBACK").unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("jq_table_total_bytes{table=\"jobs\"}"), "{text}");
    assert!(!text.contains("jq_table_total_bytes{table=\"cron_runs\"}"), "{text}");
    assert!(text.contains("jq_table_dead_tuples{table=\"cron_runs\"}"), "{text}");
}

/// `jqctl metrics --once --scrape-timeout SECS` while another session holds an open REINDEX of a
/// history table (every read of jq.jobs waits for its indexes); its output once it exits. Panics
/// if it still waits after `limit`.
fn scrape_behind_a_lock(db: &TestDb, secs: &str, limit: Duration) -> std::process::Output {
    let mut locker = db.connect();
    locker.batch_execute("BEGIN; SET LOCAL statement_timeout = 0; REINDEX TABLE jq.jobs_done_2").unwrap();
    let mut child = db
        .jqctl()
        .args(["metrics", "--once", "--scrape-timeout", secs])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            child.kill().unwrap();
            panic!("the scrape was still waiting after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    locker.batch_execute("ROLLBACK").unwrap();
    out
}

/// A scrape stuck behind a lock fails after --scrape-timeout instead of waiting for as long as
/// the lock is held. Seen failing with the timeout not set: the scrape was still waiting after
/// 30 s.
#[test]
fn a_scrape_behind_a_lock_fails_after_its_timeout() {
    let db = TestDb::new("metrics_timeout");
    db.connect().batch_execute("SELECT jq.create_queue('mt')").unwrap();
    let out = scrape_behind_a_lock(&db, "2", Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("statement timeout"), "{err}");
    let out = db.jqctl().args(["metrics", "--once", "--scrape-timeout", "2"]).output().unwrap();
    assert!(out.status.success(), "the next scrape answers: {}", String::from_utf8_lossy(&out.stderr));
}

/// --scrape-timeout never loosens a stricter statement_timeout of the database (or role): with
/// the database's 1 s and --scrape-timeout 600, a scrape behind a lock fails after about 1 s.
/// Seen failing with the scrape's `SET LOCAL statement_timeout` of before, which replaced the
/// database's: still waiting after 60 s.
#[test]
fn a_stricter_database_statement_timeout_is_kept() {
    let db = TestDb::new("metrics_strict");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('ms')").unwrap();
    let name: String = c.query_one("SELECT current_database()", &[]).unwrap().get(0);
    c.batch_execute(&format!("ALTER DATABASE \"{name}\" SET statement_timeout = '1s'")).unwrap();
    let out = scrape_behind_a_lock(&db, "600", Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("statement timeout"), "{err}");
}

#[test]
fn alter_queue_sets_flow_control_options() {
    let db = TestDb::new("alterq");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('fq')").unwrap();
    let out = db
        .jqctl()
        .args(["alter-queue", "fq", "--key-concurrency", "3", "--rate-limit", "50", "--rate-period", "1 second",
               "--burst", "5", "--priority-aging", "10 seconds", "--max-concurrency", "7"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row = c
        .query_one(
            "SELECT key_concurrency, rate_limit, rate_period = interval '1 second', rate_burst,
                    priority_aging = interval '10 seconds', max_concurrency FROM jq.queues WHERE name = 'fq'",
            &[],
        )
        .unwrap();
    let got: (i32, Option<i32>, Option<bool>, Option<i32>, Option<bool>, Option<i32>) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4), row.get(5));
    assert_eq!(got, (3, Some(50), Some(true), Some(5), Some(true), Some(7)));
    // A bad value: one line, exit 1, nothing changed.
    let out = db.jqctl().args(["alter-queue", "fq", "--key-concurrency", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("jqctl: error: "));
}

/// `jq_worker_up` covers databases with jq only. The launcher used to keep a row in state
/// `no extension` for every database it found without jq; exported as `jq_worker_up 0`, they
/// made the documented JqMaintenanceStalled alert fire for `postgres` and every other such
/// database (seen failing before metrics left them out: the line
/// `jq_worker_up{database="jqt_bgw_noext_…"} 0` was there). Now a database without jq has no
/// row, and one that drops jq keeps its `no extension` row only until the launcher's next pass
/// (which metrics still leaves out): after DROP EXTENSION jq, the database leaves jq.status()
/// and metrics has no line for it.
#[test]
fn databases_without_jq_are_not_reported_as_workers_down() {
    let db = TestDb::new("metricsnoext");
    let mut c = db.connect();
    // A database the test cluster's launcher serves (jq.databases = 'jqt_bgw_*'), then without jq.
    let noext = format!("jqt_bgw_noext_{}", std::process::id());
    let mut a = Client::connect(&conninfo_at(port(), "postgres"), NoTls).unwrap();
    // Two calls: a multi-statement batch is one transaction, which DROP DATABASE refuses.
    a.batch_execute(&format!("DROP DATABASE IF EXISTS {noext} WITH (FORCE)")).unwrap();
    a.batch_execute(&format!("CREATE DATABASE {noext}")).unwrap();
    let mut n = Client::connect(&conninfo_at(port(), &noext), NoTls).unwrap();
    n.batch_execute("CREATE EXTENSION jq").unwrap();
    wait_until(Duration::from_secs(20), "the launcher serves the database", || {
        c.query_opt("SELECT 1 FROM jq.status() WHERE database = $1 AND state = 'running'", &[&noext]).unwrap().is_some()
    });
    n.batch_execute("DROP EXTENSION jq").unwrap();
    wait_until(Duration::from_secs(20), "the database without jq leaves jq.status()", || {
        c.query_opt("SELECT 1 FROM jq.status() WHERE database = $1", &[&noext]).unwrap().is_none()
    });
    drop(n);
    let out = db.jqctl().args(["metrics", "--once"]).output().unwrap();
    a.batch_execute(&format!("DROP DATABASE IF EXISTS {noext} WITH (FORCE)")).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains(&format!("database=\"{noext}\"")), "{noext} reported:\n{text}");
}
