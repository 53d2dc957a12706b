//! One job, many claimers: it is handed out once per lease, and one-job claims see rows updated since their snapshot.

use jq_pg_test::{broken, complete, sabotage, Claimed, TestDb};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use super::{
    apply_breaks, broken_two_statement_claim, count, create_queue, enqueue_n, jq_claim, ready_left, CLAIM, ClaimFn,
};

/// One job, `claimers` threads starting together and claiming it in a tight loop for
/// `tries` calls each; returns every successful claim.
fn hammer_one_job(db: &TestDb, queue: &str, claimers: usize, tries: usize, claim_fn: ClaimFn) -> Vec<Claimed> {
    let start = Arc::new(Barrier::new(claimers));
    let handles: Vec<_> = (0..claimers)
        .map(|w| {
            let mut c = db.connect();
            let (start, queue) = (start.clone(), queue.to_string());
            thread::spawn(move || {
                let name = format!("h{w}");
                let mut won = Vec::new();
                start.wait();
                for _ in 0..tries {
                    won.extend(claim_fn(&mut c, &queue, &name, 1));
                }
                won
            })
        })
        .collect();
    handles.into_iter().flat_map(|h| h.join().expect("claimer thread")).collect()
}

// Scenario (a unique job executed by several nodes). Negative controls: the permanent
// one below (the broken two-statement claim wins the same job several times). Breaking jq.claim
// (JQ_TEST_BREAK=claim_no_row_lock) made this test fail in its first round in each of six runs:
// 2 to 8 of the 8 claimers got the one job while its lease held (attempt counting up to 8).
// Since the one-job copy updates by ctid that control no longer fails this test:
// the claimers that lost the one job's row update nothing, because PostgreSQL (15.20 here)
// re-checks a Tid Scan's condition against the newer row version it waited for, and their
// fallback by id then finds the job running. The row lock still decides which claimer skips
// to another job (the ten-workers tests above fail under the control).
#[test]
fn eight_claimers_hammering_one_job_get_it_exactly_once_per_lease() {
    let db = TestDb::new("x09");
    let mut c = db.connect();
    apply_breaks(&mut c);
    create_queue(&mut c, "one", None);
    let id: i64 = c.query_one("SELECT jq.enqueue('one')", &[]).unwrap().get(0);
    let mut tokens = HashSet::new();
    for round in 1..=3 {
        let won = hammer_one_job(&db, "one", 8, 200, jq_claim);
        assert_eq!(won.len(), 1, "round {round}: claims of the one job while its lease holds: {won:?}");
        assert_eq!(won[0].id, id);
        assert_eq!(won[0].attempt, 1, "round {round}: expired leases are refunded");
        assert!(tokens.insert(won[0].token), "round {round}: lease token reused");
        if round < 3 {
            // The lease ends (explicit instant past it), the job is claimable again.
            let reaped: i32 = c.query_one("SELECT jq._reap(now() + interval '1 hour')", &[]).unwrap().get(0);
            assert_eq!(reaped, 1);
        } else {
            assert!(complete(&mut c, &won[0]));
        }
    }
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM jq.claim($1, 'late')", "one"),
        0,
        "a completed job is claimed again"
    );
}

/// Permanent negative control of the test above: the hammer sees the broken claim take one job
/// more than once. The race window is the gap between the two statements, so a round can miss
/// it; it is repeated with a fresh job until it shows up.
#[test]
fn hammer_catches_a_claim_without_row_locks_taking_one_job_twice() {
    let db = TestDb::new("x09_ctl");
    let mut c = db.connect();
    create_queue(&mut c, "one", None);
    for round in 1..=50 {
        c.execute("SELECT jq.enqueue('one')", &[]).unwrap();
        let won = hammer_one_job(&db, "one", 8, 50, broken_two_statement_claim);
        if won.len() > 1 {
            eprintln!("round {round}: the broken claim took the one job {} times", won.len());
            return;
        }
        for job in &won {
            complete(&mut c, job);
        }
    }
    panic!("50 rounds of 8 claimers never caught the broken claim taking a job twice");
}

/// One-job claims update their row by ctid (sql/claim.sql, jq.claim). A row that a transaction
/// committed after the claim's snapshot updated and left ready is locked by the claim in that
/// newer version, whose ctid the claim's UPDATE (same snapshot) does not see; jq.claim then
/// claims the same range again by id. Here a "releaser" keeps claiming the head job and
/// releasing it in one transaction (jq.claim, jq.release, COMMIT: the job is ready again, in a
/// newer version, at the head), while eight claimers take one job at a time from a queue that
/// never runs dry; every claim must get a job, each job once. Twice:
/// without claim-start hints (the full claim's copy) and with them (the hinted copy: all jobs
/// have one priority, so nothing is below the hint's and a hinted claim that came back empty
/// would end empty).
/// Negative controls, seen failing: `JQ_TEST_BREAK=ctid_claim_no_fallback` (the
/// full claim's fallback by id removed): 40, 42, 47 and 50 of 2,400 claims came back empty with
/// more than 2,600 jobs ready (four runs, hints off); `JQ_TEST_BREAK=ctid_hinted_claim_no_fallback`
/// (the hinted claim's): 11, 11 and 14 of 2,400 (three runs, hints on). The last run of each
/// with the fallbacks gated on the transaction id.
#[test]
fn one_job_claims_find_rows_updated_since_their_snapshot() {
    for hints in [false, true] {
        one_job_claims_race_a_releaser(hints);
    }
}

fn one_job_claims_race_a_releaser(hints: bool) {
    const CLAIMERS: usize = 8;
    const CLAIMS_EACH: usize = 300;
    let db = TestDb::new(if hints { "eo_ctid_race_hinted" } else { "eo_ctid_race" });
    let mut c = db.connect();
    if broken("ctid_claim_no_fallback") {
        sabotage(&mut c, CLAIM, "IF v_got OPERATOR(pg_catalog.=) 0 AND pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN\n            -- The ctid fallback",
                 "IF false THEN\n            -- The ctid fallback", 1);
    }
    if broken("ctid_hinted_claim_no_fallback") {
        sabotage(&mut c, CLAIM, "IF v_hinted OPERATOR(pg_catalog.=) 0 AND pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN\n            -- Found by ctid",
                 "IF false THEN\n            -- Found by ctid", 1);
    }
    create_queue(&mut c, "race", None);
    let ids = enqueue_n(&mut c, "race", 5_000);
    let stop = Arc::new(AtomicBool::new(false));
    let released = Arc::new(AtomicUsize::new(0));
    let releaser = {
        let mut r = db.connect();
        let (stop, released) = (stop.clone(), released.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut t = r.transaction().unwrap();
                let rows = t
                    .query("SELECT jq.release(id, lease_token) FROM jq.claim('race', 'releaser', 1, '10 minutes')", &[])
                    .expect("claim and release");
                t.commit().unwrap();
                released.fetch_add(rows.len(), Ordering::Relaxed);
            }
        })
    };
    let start = Arc::new(Barrier::new(CLAIMERS));
    let handles: Vec<_> = (0..CLAIMERS)
        .map(|w| {
            let mut c = db.connect();
            let start = start.clone();
            thread::spawn(move || {
                c.batch_execute(if hints { "SET jq.claim_hints = on" } else { "SET jq.claim_hints = off" }).unwrap();
                let name = format!("r{w}");
                let (mut handed, mut empty, mut failed) = (Vec::new(), 0usize, 0usize);
                start.wait();
                for _ in 0..CLAIMS_EACH {
                    let got = jq_claim(&mut c, "race", &name, 1);
                    if got.is_empty() {
                        empty += 1;
                    }
                    for job in &got {
                        handed.push(job.id);
                        if !complete(&mut c, job) {
                            failed += 1;
                        }
                    }
                }
                (handed, empty, failed)
            })
        })
        .collect();
    let (mut handed, mut empty, mut failed) = (Vec::new(), 0, 0);
    for h in handles {
        let (ha, e, f) = h.join().expect("claimer thread");
        handed.extend(ha);
        empty += e;
        failed += f;
    }
    stop.store(true, Ordering::Relaxed);
    releaser.join().expect("releaser thread");
    let unique: HashSet<i64> = handed.iter().copied().collect();
    eprintln!("released {} times", released.load(Ordering::Relaxed));
    assert!(released.load(Ordering::Relaxed) > 0, "the releaser released nothing");
    assert_eq!(unique.len(), handed.len(), "jobs handed to more than one claimer");
    assert_eq!(failed, 0, "completions refused");
    assert_eq!(
        empty, 0,
        "{empty} of {} one-job claims (claim-start hints {}) came back empty with {} jobs ready",
        CLAIMERS * CLAIMS_EACH,
        if hints { "on" } else { "off" },
        ready_left(&mut c, "race")
    );
    assert!(ids.len() > CLAIMERS * CLAIMS_EACH, "the queue must not run dry");
}
