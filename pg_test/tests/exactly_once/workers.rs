//! Ten workers complete each of 10,000 jobs exactly once and leave no advisory lock; the harness sees a lockless claim.

use jq_pg_test::{claim, complete, TestDb};

use super::{
    apply_breaks, assert_each_completed_exactly_once, broken_two_statement_claim, create_queue, enqueue_n, jq_claim,
    run_workers, WORKERS,
};

// Negative control: the broken capped claim below, and the two-statement claim above, are run
// by their own tests. Breaking jq.claim itself (JQ_TEST_BREAK=claim_no_row_lock: FOR UPDATE OF
// p SKIP LOCKED removed from the picking sub-select of both claim copies; the UPDATE has no
// state fence and the picked ids are not re-read, so a claimer that waited for another's row
// lock re-claims the row) made this test (the LIMIT 1 copy) fail with "jobs handed to more than
// one worker" (2,688 duplicate hand-outs for 10,000 jobs). It still does since the one-job copy
// updates by ctid: a claimer that lost a row updates nothing there (see the hammer
// test below) and its fallback by id, unlocked too, then hands out duplicates.
#[test]
fn ten_workers_claiming_one_at_a_time_complete_each_of_10k_jobs_exactly_once() {
    let db = TestDb::new("once_n1");
    let mut c = db.connect();
    apply_breaks(&mut c);
    create_queue(&mut c, "q", None);
    let ids = enqueue_n(&mut c, "q", 10_000);
    let report = run_workers(&db, "q", WORKERS, 1, jq_claim);
    assert_each_completed_exactly_once(&mut c, "q", &ids, &report);
}

// Negative control: as above (JQ_TEST_BREAK=claim_no_row_lock, here the batch copy, then in
// jq.claim with LIMIT v_limit and now in jq._claim_batch,
// failed it with "jobs handed to more than one worker": 1,490 duplicate hand-outs).
#[test]
fn ten_workers_claiming_ten_at_a_time_complete_each_of_10k_jobs_exactly_once() {
    let db = TestDb::new("once_n10");
    let mut c = db.connect();
    apply_breaks(&mut c);
    create_queue(&mut c, "q", None);
    let ids = enqueue_n(&mut c, "q", 10_000);
    let report = run_workers(&db, "q", WORKERS, 10, jq_claim);
    assert_each_completed_exactly_once(&mut c, "q", &ids, &report);
}

/// The negative control of the two tests above, permanent: the same harness against the broken
/// two-statement claim must see jobs handed to two workers.
#[test]
fn harness_catches_a_claim_without_row_locks_handing_jobs_out_twice() {
    let db = TestDb::new("once_ctl");
    let mut c = db.connect();
    create_queue(&mut c, "q", None);
    enqueue_n(&mut c, "q", 3_000);
    let report = run_workers(&db, "q", WORKERS, 1, broken_two_statement_claim);
    let dups = report.duplicates();
    eprintln!(
        "broken two-statement claim: {} ids handed out, {dups} of them a second time, {} completes returned false",
        report.handed.len(),
        report.failed_completes
    );
    assert!(dups > 0, "the harness did not catch the broken claim handing a job out twice");
}

// Scenario (advisory locks leaked by a claim whose CTE the planner inlined). Negative
// control: JQ_TEST_BREAK=claim_advisory_leak makes jq.claim (and jq._claim_batch) take
// pg_try_advisory_lock(id) on each candidate row in the picking sub-select of every claim copy
// and never release it; this
// test then failed with "advisory locks left after claiming and completing 10k jobs": 10,000
// held by the workers' still-open sessions (one per job). (JQ_TEST_BREAK=claim_no_row_lock
// also fails it, with duplicate hand-outs.)
#[test]
fn claiming_and_completing_10k_jobs_leaves_no_advisory_locks_and_claim_of_one_locks_one_row() {
    let db = TestDb::new("x03");
    let mut c = db.connect();
    apply_breaks(&mut c);
    create_queue(&mut c, "q", None);
    let ids = enqueue_n(&mut c, "q", 10_000);
    let report = run_workers(&db, "q", 4, 1, jq_claim);
    assert_each_completed_exactly_once(&mut c, "q", &ids, &report);
    // The workers' sessions are still open: a session-level advisory lock would still be held.
    assert_eq!(report.clients.len(), 4);
    let advisory: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_locks
             WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(advisory, 0, "advisory locks left after claiming and completing 10k jobs");
    drop(report);

    // A claim of one, inside an open transaction, returns one job and row-locks only that row.
    enqueue_n(&mut c, "q", 20);
    c.batch_execute("CREATE EXTENSION pgrowlocks").expect("contrib extension pgrowlocks");
    let mut w = db.connect();
    let pid: i32 = w.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    w.batch_execute("BEGIN").unwrap();
    let got = claim(&mut w, "q", "w", 1, None);
    assert_eq!(got.len(), 1, "claim with n = 1 returned {} rows", got.len());
    let (locked, by_worker): (i64, i64) = {
        let r = c
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE $1 = ANY(pids)) FROM pgrowlocks('jq.jobs')",
                &[&pid],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((locked, by_worker), (1, 1), "row locks held by an open claim of one (all, by the claimer)");
    let advisory: i64 = c
        .query_one("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1", &[&pid])
        .unwrap()
        .get(0);
    assert_eq!(advisory, 0, "advisory locks held by an open claim");
    w.batch_execute("COMMIT").unwrap();
    assert!(complete(&mut w, &got[0]));
}
