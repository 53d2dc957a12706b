//! Write-ahead log per transition. jq.jobs' column order (sql/schema.sql) puts the columns no
//! hot-path transition writes first, then those a claim writes, then state, then those the end
//! of an execution writes, so that PostgreSQL's prefix/suffix compression of same-page updates
//! (log_heap_update in heapam.c) logs only what changed. These tests read the sizes of the heap
//! records one claim and one completion write, with pg_walinspect: bytes, not time.

use jq_pg_test::{claim, complete, TestDb};
use postgres::Client;

/// Sizes in bytes of the heap UPDATE records logged between two WAL positions.
fn heap_updates(c: &mut Client, from: &str, to: &str) -> Vec<i32> {
    c.query(
        "SELECT record_length::int FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)
          WHERE resource_manager = 'Heap' AND record_type IN ('UPDATE', 'HOT_UPDATE') ORDER BY start_lsn",
        &[&from, &to],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn insert_lsn(c: &mut Client) -> String {
    c.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).unwrap().get(0)
}

/// One job with a 1,000-byte payload and a 40-character kind is claimed and completed; the
/// claim's update record must stay under 170 bytes and the completion's under 100, whatever
/// the payload. The row itself is over 1,100 bytes, so neither record may carry the payload,
/// the kind or the queue name, nor the claim's columns for the completion.
///
/// Seen failing (negative control): `JQ_TEST_BREAK=wal_old_layout` runs the same steps on a
/// 0.1.0 install, whose jq.jobs has the old column order (state fourth, the claim's columns
/// spread between the enqueue-only ones): "the claim logged 193 bytes for the row"; its
/// completion logged 173 bytes, against 155 and 88 with 0.2.0's order.
#[test]
fn claim_and_completion_log_only_the_columns_they_write() {
    let db = if jq_pg_test::broken("wal_old_layout") {
        TestDb::with_setup("wal_old", "CREATE EXTENSION jq VERSION '0.1.0'")
    } else {
        TestDb::new("wal")
    };
    let mut c = db.connect();
    c.batch_execute(
        // pg_walinspect reads only flushed WAL: every commit of this session flushes.
        "SET synchronous_commit = on;
         CREATE EXTENSION IF NOT EXISTS pg_walinspect;
         SELECT jq.create_queue('walq');
         SELECT jq.enqueue('walq', jsonb_build_object('pad', repeat('x', 1000)), kind => repeat('k', 40));",
    )
    .unwrap();
    let before_claim = insert_lsn(&mut c);
    let jobs = claim(&mut c, "walq", "wal-worker", 1, None);
    assert_eq!(jobs.len(), 1);
    let before_complete = insert_lsn(&mut c);
    assert!(complete(&mut c, &jobs[0]));
    let after = insert_lsn(&mut c);

    let claim_updates = heap_updates(&mut c, &before_claim, &before_complete);
    let complete_updates = heap_updates(&mut c, &before_complete, &after);
    eprintln!("heap update records: claim {claim_updates:?}, completion {complete_updates:?} bytes");
    assert_eq!(claim_updates.len(), 1, "the claim updates the job's row once");
    assert_eq!(complete_updates.len(), 1, "the completion updates the job's row once");
    assert!(claim_updates[0] < 170, "the claim logged {} bytes for the row", claim_updates[0]);
    assert!(complete_updates[0] < 100, "the completion logged {} bytes for the row", complete_updates[0]);
}
