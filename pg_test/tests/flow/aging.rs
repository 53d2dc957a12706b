//! Priority aging: a waiting job rises above fresh ones within the bound, and capped aging starves no queue.

use jq_pg_test::{broken, claim, complete, conninfo, sabotage, Client, NoTls, TestDb};
use std::thread;
use std::time::{Duration, Instant};

use super::{explain, index_scan};

/// Priority aging, deterministic: in a queue with priority_aging 10 s, a priority-0 job due 60 s
/// ago overtakes fresh priority-5 jobs once an aging pass ran (6 steps: priority 6); the pass
/// reads its batch from jobs_aging_idx. A queue without aging keeps every job out of that index.
/// Negative control: JQ_TEST_BREAK=age_noop (jq._age changes no priority) fails (the
/// priority-5 job is claimed first).
#[test]
fn aging_raises_a_waiting_job_above_fresh_higher_priority_jobs() {
    let db = TestDb::new("flow_age");
    let mut c = db.connect();
    if broken("age_noop") {
        sabotage(&mut c, "jq._age(timestamptz,integer)", "+ jq._age_steps(_age.now, j.run_at, q.priority_aging),", "+ 0,", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('q'); SELECT jq.create_queue('plain');
         SELECT jq.alter_queue('q', priority_aging => '10 seconds');
         SELECT count(jq.enqueue('plain', '{}')) FROM generate_series(1, 100);",
    )
    .unwrap();
    let low: i64 = c
        .query_one("SELECT jq.enqueue('q', '{}', priority => 0, run_at => now() - interval '60 seconds')", &[])
        .unwrap()
        .get(0);
    c.batch_execute("SELECT count(jq.enqueue('q', '{}', priority => 5)) FROM generate_series(1, 100); ANALYZE jq.jobs;").unwrap();
    let in_index: i64 = c
        .query_one("SELECT count(*) FROM jq.jobs WHERE state = 'ready' AND next_age_at IS NOT NULL AND queue = 'plain'", &[])
        .unwrap()
        .get(0);
    assert_eq!(in_index, 0, "jobs of a queue without aging are in the aging index");
    let plan = explain(
        &mut c,
        "SELECT x.id FROM jq.jobs x WHERE x.state = 'ready' AND x.next_age_at <= now()
         ORDER BY x.next_age_at LIMIT 5000 FOR UPDATE SKIP LOCKED",
    );
    let (index, rows) = index_scan(&plan);
    assert_eq!(index, "jobs_aging_idx", "{plan}");
    assert_eq!(rows, 1, "{plan}");
    let aged: i32 = c.query_one("SELECT jq._age(now())", &[]).unwrap().get(0);
    assert_eq!(aged, 1);
    let r = c.query_one("SELECT priority, base_priority FROM jq.jobs WHERE id = $1", &[&low]).unwrap();
    eprintln!("aged job: priority {:?}, base {:?}", r.get::<_, i32>(0), r.get::<_, Option<i32>>(1));
    let first = claim(&mut c, "q", "w", 1, None);
    assert_eq!(first[0].id, low, "the aged job was not claimed first");
    // Turning aging off gives waiting jobs their base priority back at their next step.
    c.batch_execute("SELECT jq.alter_queue('q', priority_aging => '0')").unwrap();
    let n: i32 = c.query_one("SELECT jq._age(now() + interval '11 seconds')", &[]).unwrap().get(0);
    assert_eq!(n, 100);
    let max: i32 = c.query_one("SELECT max(priority) FROM jq.jobs WHERE state = 'ready' AND queue = 'q'", &[]).unwrap().get(0);
    assert_eq!(max, 5);
}

/// Priority aging stops at its cap. A job waiting so long that the
/// step count (2^31-1) or the priority (2^31-1) is capped has nothing left to gain: the aging
/// pass must take it out of jobs_aging_idx (next_age_at NULL). Otherwise its next_age_at stays
/// in the past, every pass picks it again first (oldest next_age_at), and a batch of such jobs
/// starves every other queue's aging. Here: 3 jobs due in 1900 in a queue aging every second
/// (2^31-1 steps are about 68 years), a batch of 3, and a job in another aging queue due 60 s ago.
/// Negative control: JQ_TEST_BREAK=age_no_cap_stop (the cap branch removed from jq._age) fails:
/// the second pass takes the three capped jobs again and the other queue's job is never aged.
#[test]
fn capped_aging_leaves_the_aging_index_and_starves_no_queue() {
    let db = TestDb::new("flow_age_cap");
    let mut c = db.connect();
    if broken("age_no_cap_stop") {
        // (A OR B) THEN NULL becomes (A AND false) THEN NULL: the cap branch never taken.
        sabotage(&mut c, "jq._age(timestamptz,integer)", "OR jq._age_steps(_age.now, j.run_at, q.priority_aging) >= 2147483647 THEN NULL", "AND false THEN NULL", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('old', paused => true); SELECT jq.create_queue('fresh', paused => true);
         SELECT jq.alter_queue('old', priority_aging => '1 second');
         SELECT jq.alter_queue('fresh', priority_aging => '10 seconds');
         SELECT count(jq.enqueue('old', '{}', priority => -5, run_at => '1900-01-01 00:00:00+00')) FROM generate_series(1, 3);",
    )
    .unwrap();
    // The first pass (batch 3) takes the three oldest: the capped jobs.
    let aged: i32 = c.query_one("SELECT jq._age(now(), 3)", &[]).unwrap().get(0);
    assert_eq!(aged, 3);
    let capped: (i32, i64) = {
        let r = c
            .query_one("SELECT min(priority), count(*) FILTER (WHERE next_age_at IS NULL) FROM jq.jobs WHERE queue = 'old'", &[])
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(capped, (2147483647 - 5, 3), "capped jobs keep a next_age_at (or lost their priority)");
    let fresh: i64 = c
        .query_one("SELECT jq.enqueue('fresh', '{}', priority => 0, run_at => now() - interval '60 seconds')", &[])
        .unwrap()
        .get(0);
    // The next pass reaches the other queue's job: the capped ones are out of the index.
    let aged: i32 = c.query_one("SELECT jq._age(now(), 3)", &[]).unwrap().get(0);
    assert_eq!(aged, 1, "the pass took capped jobs again");
    let p: i32 = c.query_one("SELECT priority FROM jq.jobs WHERE id = $1", &[&fresh]).unwrap().get(0);
    assert_eq!(p, 6, "the other queue's job was not aged");
}

/// Priority aging under a saturated stream, with the background worker (database jqt_bgw_*,
/// tick 1 s): a producer keeps ~20 priority-3 jobs ready, two claimers drain them; a priority-0
/// job in a queue with priority_aging 1 s must start within the documented bound
/// ((3 - 0) x 1 s + one tick + a claim; asserted: 8 s).
/// Negative control: JQ_TEST_BREAK=age_noop fails (the low job waits out the whole stream).
#[test]
fn aging_starts_a_low_priority_job_behind_a_saturated_stream_within_the_bound() {
    let db = TestDb::new("bgw_flow_age");
    let mut c = db.connect();
    if broken("age_noop") {
        sabotage(&mut c, "jq._age(timestamptz,integer)", "+ jq._age_steps(_age.now, j.run_at, q.priority_aging),", "+ 0,", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('q'); SELECT jq.alter_queue('q', priority_aging => '1 second');
         SELECT count(jq.enqueue('q', '{}', priority => 3)) FROM generate_series(1, 20);",
    )
    .unwrap();
    let low: i64 = c.query_one("SELECT jq.enqueue('q', '{}', priority => 0)", &[]).unwrap().get(0);
    let t0 = Instant::now();
    let stop = t0 + Duration::from_secs(14);
    let producer = {
        let name = db.name.clone();
        thread::spawn(move || {
            let mut c = Client::connect(&conninfo(&name), NoTls).unwrap();
            while Instant::now() < stop {
                c.batch_execute(
                    "SELECT count(jq.enqueue('q', '{}', priority => 3))
                     FROM generate_series(1, greatest(0, 20 - (SELECT count(*) FROM jq.jobs WHERE state = 'ready')::int))",
                )
                .unwrap();
                thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let claimers: Vec<_> = (0..2)
        .map(|w| {
            let name = db.name.clone();
            thread::spawn(move || {
                let mut c = Client::connect(&conninfo(&name), NoTls).unwrap();
                let mut started = None;
                while Instant::now() < stop {
                    for j in claim(&mut c, "q", &format!("w{w}"), 1, None) {
                        if j.id == low {
                            started = Some(t0.elapsed());
                        }
                        thread::sleep(Duration::from_millis(5));
                        complete(&mut c, &j);
                    }
                }
                started
            })
        })
        .collect();
    producer.join().unwrap();
    let started: Vec<Duration> = claimers.into_iter().filter_map(|h| h.join().unwrap()).collect();
    let done: i64 = c.query_one("SELECT count(*) FROM jq.jobs WHERE state = 'completed'", &[]).unwrap().get(0);
    eprintln!("low-priority job started after {started:?}; {done} stream jobs completed");
    assert!(done > 200, "the stream was not saturating the claimers ({done} jobs)");
    assert_eq!(started.len(), 1, "the low-priority job never started");
    assert!(started[0] < Duration::from_secs(8), "started after {:?}", started[0]);
}
