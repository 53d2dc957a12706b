//! The concurrency cap: ten claimers never run more than max_concurrency jobs; the harness sees a lockless count.

use jq_pg_test::{claim, complete, Claimed, Client, TestDb};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use super::{apply_breaks, count, create_queue, enqueue_n, jq_claim, ready_left, WORKERS};

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
