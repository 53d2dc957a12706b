//! Write-ahead log per transition. jq.jobs' column order (sql/schema.sql) puts the columns no
//! hot-path transition writes first, then those a claim writes, then state, then those the end
//! of an execution writes, so that PostgreSQL's prefix/suffix compression of same-page updates
//! (log_heap_update in heapam.c) logs only what changed. These tests read the sizes of the heap
//! records one claim and one completion write, with pg_walinspect: bytes, not time.

use std::sync::Mutex;

use jq_pg_test::{claim, complete, Claimed, TestDb};
use postgres::Client;

/// The tests read every record between two WAL positions, whoever wrote it: one at a time.
static WAL_READERS: Mutex<()> = Mutex::new(());

/// Only records of blocks of this test's database: the cluster is shared with the other test
/// binaries' databases and their maintenance workers (seen: 21 heap updates between a claim's two
/// WAL positions from another database's activity).
const THIS_DB: &str = "block_ref LIKE '%/' || (SELECT oid FROM pg_catalog.pg_database \
                       WHERE datname = pg_catalog.current_database())::text || '/%'";

/// Sizes in bytes of the heap UPDATE records logged between two WAL positions.
fn heap_updates(c: &mut Client, from: &str, to: &str) -> Vec<i32> {
    c.query(
        &format!("SELECT record_length::int FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)
          WHERE resource_manager = 'Heap' AND record_type IN ('UPDATE', 'HOT_UPDATE') AND {THIS_DB}
          ORDER BY start_lsn"),
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

/// One job enqueued into `queue` (`enqueue_args`: the rest of jq.enqueue's arguments, as SQL)
/// on a fresh database (a 0.1.0 install when `old`), then claimed by worker `<queue>-worker` and
/// completed; returns the job and the WAL insert positions before the claim, before the
/// completion and after it.
fn claim_and_complete_one(old: bool, queue: &str, enqueue_args: &str) -> (TestDb, Client, Claimed, [String; 3]) {
    let db = if old {
        TestDb::with_setup(&format!("{queue}_old"), "CREATE EXTENSION jq VERSION '0.1.0'")
    } else {
        TestDb::new(queue)
    };
    let mut c = db.connect();
    c.batch_execute(&format!(
        // pg_walinspect reads only flushed WAL: every commit of this session flushes.
        "SET synchronous_commit = on;
         CREATE EXTENSION IF NOT EXISTS pg_walinspect;
         SELECT jq.create_queue('{queue}');
         SELECT jq.enqueue('{queue}', {enqueue_args});"
    ))
    .unwrap();
    let before_claim = insert_lsn(&mut c);
    let mut jobs = claim(&mut c, queue, &format!("{queue}-worker"), 1, None);
    assert_eq!(jobs.len(), 1);
    let job = jobs.remove(0);
    let before_complete = insert_lsn(&mut c);
    assert!(complete(&mut c, &job));
    let after = insert_lsn(&mut c);
    (db, c, job, [before_claim, before_complete, after])
}

/// One job with a 1,000-byte payload and a 40-character kind is claimed and completed; the
/// claim's update record must stay under 170 bytes, whatever the payload: the row itself is
/// over 1,100 bytes, so the record may not carry the payload, the kind or the queue name. The
/// completion updates no row: it deletes the job from the hot table and inserts it into the
/// history (sql/history.sql; a_completion_moves_the_job_row_and_writes_no_execution_row).
///
/// Seen failing (negative control): `JQ_TEST_BREAK=wal_old_layout` runs the same steps on a
/// 0.1.0 install, whose jq.jobs has the old column order (state fourth, the claim's columns
/// spread between the enqueue-only ones): "the claim logged 194 bytes for the row", against
/// 155 with 0.2.0's order.
#[test]
fn the_claim_logs_only_the_columns_it_writes() {
    let _one = WAL_READERS.lock().unwrap_or_else(|e| e.into_inner());
    let (_db, mut c, _, [before_claim, before_complete, after]) = claim_and_complete_one(
        jq_pg_test::broken("wal_old_layout"),
        "walq",
        "jsonb_build_object('pad', repeat('x', 1000)), kind => repeat('k', 40)",
    );

    let claim_updates = heap_updates(&mut c, &before_claim, &before_complete);
    let complete_updates = heap_updates(&mut c, &before_complete, &after);
    eprintln!("heap update records: claim {claim_updates:?}, completion {complete_updates:?} bytes");
    assert_eq!(claim_updates.len(), 1, "the claim updates the job's row once");
    assert!(claim_updates[0] < 170, "the claim logged {} bytes for the row", claim_updates[0]);
}

/// WAL records of one resource manager whose type starts with `kind` (INSERT also matches
/// INSERT+INIT, the first insert into a new page) between two WAL positions.
fn records(c: &mut Client, from: &str, to: &str, rmgr: &str, kind: &str) -> i64 {
    c.query_one(
        &format!("SELECT count(*) FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)
          WHERE resource_manager = $3 AND record_type LIKE $4 || '%' AND {THIS_DB}"),
        &[&from, &to, &rmgr, &kind],
    )
    .unwrap()
    .get(0)
}

/// A completion moves the job's row and writes nothing else: one heap delete (the hot table),
/// one heap insert (the row, completed, into the history: sql/history.sql) with its two index
/// entries (id; queue, finished_at, id), no update and no execution row (a completed execution
/// is its job row; jq.executions shows it from there). The execution still appears in
/// jq.executions with its seq, attempt and worker.
///
/// Seen failing (negative control): `JQ_TEST_BREAK=completion_history` runs the same steps on a
/// 0.1.0 install, whose jq.complete updates the row in place and inserts an execution row:
/// "the completion logged 0 heap deletes".
#[test]
fn a_completion_moves_the_job_row_and_writes_no_execution_row() {
    let _one = WAL_READERS.lock().unwrap_or_else(|e| e.into_inner());
    let (_db, mut c, job, [_, before, after]) =
        claim_and_complete_one(jq_pg_test::broken("completion_history"), "walh", "'{}'");
    let deletes = records(&mut c, &before, &after, "Heap", "DELETE");
    let inserts = records(&mut c, &before, &after, "Heap", "INSERT");
    let updates = heap_updates(&mut c, &before, &after).len();
    let leaves = records(&mut c, &before, &after, "Btree", "INSERT_LEAF");
    eprintln!("completion: {deletes} heap deletes, {inserts} heap inserts, {updates} updates, {leaves} index entries");
    assert_eq!(deletes, 1, "the completion logged {deletes} heap deletes");
    assert_eq!(inserts, 1, "the completion logged {inserts} heap inserts");
    assert_eq!(updates, 0, "the completion logged {updates} heap updates");
    assert!(leaves <= 2, "{leaves} index entries; expected those of the history table's two indexes");
    let logged: i64 = c.query_one("SELECT count(*) FROM jq.execution_log WHERE job_id = $1", &[&job.id]).unwrap().get(0);
    assert_eq!(logged, 0, "the completion wrote an execution row");
    let history: (i32, i32, String, String) = {
        let r = c
            .query_one("SELECT seq::int4, attempt, outcome::text, worker FROM jq.executions WHERE job_id = $1",
                       &[&job.id])
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    assert_eq!(history, (1, 1, "completed".to_string(), "walh-worker".to_string()));
}
