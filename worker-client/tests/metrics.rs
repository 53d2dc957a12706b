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
