//! Exactly-once delivery while the lease holds, with many real connections claiming at once:
//! every job handed to one worker, none lost, the concurrency cap never exceeded, and no
//! advisory locks left behind.
//!
//! Two negative controls stay in this file and run with the suite: a claim that reads candidate
//! ids and marks them running in a second statement (no row lock), and a capped claim that
//! counts running jobs and then claims without holding the queue row. The same harnesses that
//! check jq.claim must catch both, which is what shows the harnesses can see the failures they
//! look for.
//!
//! Further broken variants are applied on demand with `JQ_TEST_BREAK=<name>`: the test then
//! replaces one jq function in its own database with a broken copy (see
//! `jq_pg_test::sabotage`) and must fail. The comment at each test records what was broken and
//! how the test failed.

use jq_pg_test::{broken, claim, complete, sabotage, Claimed, Client, TestDb};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

const WORKERS: usize = 10;

const CLAIM: &str = "jq.claim(text,text,integer,interval,interval,bigint)";
const CLAIM_BATCH: &str = "jq._claim_batch(text,text,integer,interval,boolean,bigint,boolean)";
const CLAIM_GATE: &str = "jq._claim_gate(text,integer,boolean,integer,integer)";

/// The broken variants of jq.claim used by the tests below. The claiming statement has four
/// copies (the hinted claim and the full claim, each with LIMIT 1 for n = 1 in jq.claim and a
/// parameter LIMIT for batches in jq._claim_batch); a variant about how the claim picks and
/// locks rows breaks all four.
fn apply_breaks(c: &mut Client) {
    if broken("claim_no_row_lock") {
        // The picking sub-select no longer row-locks (no FOR UPDATE OF p SKIP LOCKED); the
        // UPDATE has no state fence, so a claimer that waited for another's row lock re-claims
        // the row it had picked.
        // The batch copies' sub-selects sit inside a CTE, one level deeper than the one-job ones.
        sabotage(c, CLAIM_BATCH, "\n                  FOR UPDATE OF p SKIP LOCKED))", "))", 2);
        sabotage(c, CLAIM, "\n              FOR UPDATE OF p SKIP LOCKED))", "))", 2);
    }
    if broken("cap_no_queue_lock") {
        // A capped claim counts running jobs without holding the queue row exclusively (both
        // of its row locks, waiting and SKIP LOCKED, become shared ones).
        sabotage(c, CLAIM_GATE, "FOR NO KEY UPDATE", "FOR KEY SHARE", 2);
    }
    if broken("claim_advisory_leak") {
        // A session-level advisory lock taken on each candidate row and never released.
        sabotage(
            c,
            CLAIM,
            "AND p.state OPERATOR(pg_catalog.=) 'ready'\n",
            "AND p.state OPERATOR(pg_catalog.=) 'ready' AND pg_try_advisory_lock(p.id)\n",
            2,
        );
        sabotage(
            c,
            CLAIM_BATCH,
            "AND p.state OPERATOR(pg_catalog.=) 'ready'\n",
            "AND p.state OPERATOR(pg_catalog.=) 'ready' AND pg_try_advisory_lock(p.id)\n",
            2,
        );
    }
}

fn create_queue(c: &mut Client, queue: &str, max_concurrency: Option<i32>) {
    c.execute("SELECT jq.create_queue($1, max_concurrency => $2)", &[&queue, &max_concurrency])
        .expect("create queue");
}

/// Enqueues `n` jobs with jq.enqueue_many and returns their ids.
fn enqueue_n(c: &mut Client, queue: &str, n: i64) -> Vec<i64> {
    c.query(
        "SELECT jq.enqueue_many($1, (SELECT jsonb_agg(jsonb_build_object('n', g)) FROM generate_series(1, $2::bigint) g))",
        &[&queue, &n],
    )
    .expect("enqueue_many")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn count(c: &mut Client, sql: &str, queue: &str) -> i64 {
    c.query_one(sql, &[&queue]).expect(sql).get(0)
}

fn ready_left(c: &mut Client, queue: &str) -> i64 {
    count(c, "SELECT count(*) FROM jq.jobs WHERE queue = $1 AND state = 'ready'", queue)
}

/// A claim function under test: (connection, queue, worker, n) -> claimed jobs.
type ClaimFn = fn(&mut Client, &str, &str, i32) -> Vec<Claimed>;

fn jq_claim(c: &mut Client, queue: &str, worker: &str, n: i32) -> Vec<Claimed> {
    claim(c, queue, worker, n, Some("10 minutes"))
}

/// NEGATIVE CONTROL, deliberately broken, kept in the test tree and never in the extension: it
/// selects candidate ids in one statement and marks them running in a second one, with no row
/// lock (no FOR UPDATE SKIP LOCKED) and no state fence on the update, so two workers that read
/// the same ready row both take it.
///
/// This is the one place in the tests that writes jq.jobs directly. It is allowed only because
/// it is the negative control the issue asks for: a claim broken this way cannot be obtained
/// from jq's functions without editing the extension.
fn broken_two_statement_claim(c: &mut Client, queue: &str, worker: &str, n: i32) -> Vec<Claimed> {
    let ids: Vec<i64> = c
        .query(
            "SELECT id FROM jq.jobs WHERE queue = $1 AND state = 'ready'
             ORDER BY priority DESC, run_at, id LIMIT $2",
            &[&queue, &i64::from(n)],
        )
        .expect("broken claim: select")
        .iter()
        .map(|r| r.get(0))
        .collect();
    if ids.is_empty() {
        return Vec::new();
    }
    c.query(
        "UPDATE jq.jobs SET state = 'running', attempt = attempt + 1, claims = claims + 1,
                worker = $2, lease_token = gen_random_uuid(), started_at = clock_timestamp(),
                lease = interval '10 minutes',
                lease_expires_at = clock_timestamp() + interval '10 minutes'
         WHERE id = ANY($1)
         RETURNING id, lease_token, attempt",
        &[&ids, &worker],
    )
    .expect("broken claim: update")
    .iter()
    .map(|r| Claimed { id: r.get(0), token: r.get(1), attempt: r.get(2) })
    .collect()
}

/// What a run of `run_workers` saw.
struct Report {
    /// Every id handed out, over all workers (an id twice means it was handed out twice).
    handed: Vec<i64>,
    /// How many jq.complete calls returned false.
    failed_completes: usize,
    /// The workers' connections, still open (session-level locks would still be held).
    clients: Vec<Client>,
}

impl Report {
    fn duplicates(&self) -> usize {
        self.handed.len() - self.handed.iter().collect::<HashSet<_>>().len()
    }
}

/// `workers` threads, one connection each, start together and claim `n` at a time with
/// `claim_fn`, completing each job with jq.complete, until the queue has nothing ready.
fn run_workers(db: &TestDb, queue: &str, workers: usize, n: i32, claim_fn: ClaimFn) -> Report {
    let start = Arc::new(Barrier::new(workers));
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let mut c = db.connect();
            let start = start.clone();
            let queue = queue.to_string();
            thread::spawn(move || {
                let name = format!("w{w}");
                let mut handed = Vec::new();
                let mut failed = 0;
                start.wait();
                for _ in 0..1_000_000 {
                    let got = claim_fn(&mut c, &queue, &name, n);
                    if got.is_empty() {
                        // Empty while others hold candidate rows locked; done once none is ready.
                        if ready_left(&mut c, &queue) == 0 {
                            break;
                        }
                        continue;
                    }
                    for job in &got {
                        handed.push(job.id);
                        if !complete(&mut c, job) {
                            failed += 1;
                        }
                    }
                }
                (handed, failed, c)
            })
        })
        .collect();
    let mut report = Report { handed: Vec::new(), failed_completes: 0, clients: Vec::new() };
    for h in handles {
        let (handed, failed, c) = h.join().expect("worker thread");
        report.handed.extend(handed);
        report.failed_completes += failed;
        report.clients.push(c);
    }
    report
}

/// The checks of an exactly-once run over `ids`, all enqueued on `queue`.
fn assert_each_completed_exactly_once(c: &mut Client, queue: &str, ids: &[i64], report: &Report) {
    assert_eq!(report.duplicates(), 0, "jobs handed to more than one worker");
    let handed: HashSet<i64> = report.handed.iter().copied().collect();
    let enqueued: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(handed.len(), enqueued.len(), "jobs lost: enqueued {}, handed out {}", enqueued.len(), handed.len());
    assert_eq!(handed, enqueued, "the ids handed out are not the ids enqueued");
    assert_eq!(report.failed_completes, 0, "jq.complete returned false for a job its worker held");

    let n = ids.len() as i64;
    let done = count(c, "SELECT count(*) FROM jq.jobs WHERE queue = $1 AND state = 'completed' AND attempt = 1 AND claims = 1", queue);
    assert_eq!(done, n, "jobs completed with attempt 1 after one claim");
    // Exactly one execution row per job, and it is the completed first execution.
    let (rows, jobs_with_rows, good): (i64, i64, i64) = {
        let r = c
            .query_one(
                "SELECT count(*), count(DISTINCT job_id),
                        count(*) FILTER (WHERE outcome = 'completed' AND seq = 1 AND attempt = 1)
                 FROM jq.executions WHERE queue = $1",
                &[&queue],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!((rows, jobs_with_rows, good), (n, n, n), "jq.executions: (rows, jobs, completed seq 1 attempt 1)");
}

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

/// A capped claim under test: (connection, queue, worker, n) -> claimed jobs.
type CappedClaimFn = fn(&mut Client, &str, &str, i32) -> Vec<Claimed>;

const CAP: i32 = 3;

/// NEGATIVE CONTROL, deliberately broken, kept in the test tree: enforces the cap of 3 by
/// counting running jobs in one statement and claiming in another, without the queue-row lock,
/// so claimers that count at the same time all see room. It claims through jq.claim on a queue
/// without a cap, so it writes nothing itself.
fn broken_count_then_claim(c: &mut Client, queue: &str, worker: &str, n: i32) -> Vec<Claimed> {
    let running = count(c, "SELECT count(*) FROM jq.jobs WHERE queue = $1 AND state = 'running'", queue);
    let room = (i64::from(CAP) - running).min(i64::from(n));
    if room <= 0 {
        return Vec::new();
    }
    claim(c, queue, worker, room as i32, Some("10 minutes"))
}

/// Highest numbers of running jobs seen: held in-process by the workers, and counted from
/// another connection in jq.jobs and in jq.queue_stats.
#[derive(Debug)]
struct Peaks {
    held: usize,
    jobs_running: i64,
    stats_running: i64,
}

/// 10 workers claim 2 at a time, hold the jobs a short while, then complete them, while a
/// sampler counts running jobs. A worker adds its jobs to the in-process count after the claim
/// returned (committed) and removes them before completing, so the in-process count never
/// exceeds the number of jobs running in the database.
fn run_capped(db: &TestDb, queue: &str, jobs: i64, claim_fn: CappedClaimFn) -> Peaks {
    let mut c = db.connect();
    enqueue_n(&mut c, queue, jobs);
    let held = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(WORKERS + 1));

    let sampler = {
        let mut s = db.connect();
        let (done, start, queue) = (done.clone(), start.clone(), queue.to_string());
        thread::spawn(move || {
            let (mut jobs_max, mut stats_max) = (0i64, 0i64);
            start.wait();
            while !done.load(Ordering::SeqCst) {
                let r = s
                    .query_one(
                        "SELECT (SELECT count(*) FROM jq.jobs WHERE queue = $1 AND state = 'running'),
                                (SELECT running FROM jq.queue_stats WHERE queue = $1)",
                        &[&queue],
                    )
                    .expect("sample running jobs");
                jobs_max = jobs_max.max(r.get(0));
                stats_max = stats_max.max(r.get(1));
            }
            (jobs_max, stats_max)
        })
    };

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let mut c = db.connect();
            let (held, peak, start, queue) = (held.clone(), peak.clone(), start.clone(), queue.to_string());
            thread::spawn(move || {
                let name = format!("w{w}");
                start.wait();
                loop {
                    let got = claim_fn(&mut c, &queue, &name, 2);
                    if got.is_empty() {
                        if ready_left(&mut c, &queue) == 0 {
                            break;
                        }
                        thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    let now = held.fetch_add(got.len(), Ordering::SeqCst) + got.len();
                    peak.fetch_max(now, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(15));
                    for job in &got {
                        held.fetch_sub(1, Ordering::SeqCst);
                        assert!(complete(&mut c, job), "complete of a held job");
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker thread");
    }
    done.store(true, Ordering::SeqCst);
    let (jobs_running, stats_running) = sampler.join().expect("sampler thread");
    let left = count(&mut c, "SELECT count(*) FROM jq.jobs WHERE queue = $1 AND state <> 'completed'", queue);
    assert_eq!(left, 0, "jobs not completed at the end of the capped run");
    Peaks { held: peak.load(Ordering::SeqCst), jobs_running, stats_running }
}

// Negative controls: the permanent one below (count then claim without the queue-row lock).
// Breaking the claim's gate (JQ_TEST_BREAK=cap_no_queue_lock: "FOR NO KEY UPDATE" removed from
// jq._claim_gate's queue-row read, so counting and claiming no longer serialise) made this test fail with
// "workers held 7 jobs at once, cap 3" (7 or 8 sampled running in jq.jobs and
// jq.queue_stats, over three runs). Correct runs peak at 3.
#[test]
fn ten_claimers_never_run_more_jobs_than_max_concurrency() {
    let db = TestDb::new("cap");
    let mut c = db.connect();
    apply_breaks(&mut c);
    create_queue(&mut c, "capped", Some(CAP));
    let peaks = run_capped(&db, "capped", 90, jq_claim);
    eprintln!("capped claim peaks: {peaks:?}");
    assert!(peaks.held <= CAP as usize, "workers held {} jobs at once, cap {CAP}: {peaks:?}", peaks.held);
    assert!(peaks.jobs_running <= i64::from(CAP), "jq.jobs showed more running than the cap: {peaks:?}");
    assert!(peaks.stats_running <= i64::from(CAP), "jq.queue_stats showed more running than the cap: {peaks:?}");
    // Ten claimers holding jobs 15 ms each keep the queue at its cap, so the check was exercised.
    assert!(peaks.held >= 2, "the run never had concurrent jobs, so it checked nothing: {peaks:?}");
}

/// The permanent negative control of the test above: the same harness must see the broken
/// count-then-claim exceed the cap.
#[test]
fn harness_catches_a_capped_claim_that_counts_then_claims_without_the_queue_lock() {
    let db = TestDb::new("cap_ctl");
    let mut c = db.connect();
    create_queue(&mut c, "uncapped", None);
    let peaks = run_capped(&db, "uncapped", 90, broken_count_then_claim);
    eprintln!("broken count-then-claim peaks: {peaks:?}");
    assert!(
        peaks.held > CAP as usize || peaks.jobs_running > i64::from(CAP),
        "the harness did not catch the broken capped claim exceeding the cap: {peaks:?}"
    );
}

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
