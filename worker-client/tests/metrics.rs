//! `jqctl metrics`: the Prometheus exposition of a database's queues, tables and worker.

mod common;
use common::*;

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
