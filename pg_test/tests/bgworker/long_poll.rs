//! The long-poll: a waiting claim is woken by the commit that makes a job claimable, and only then.

use jq_pg_test::*;
use std::time::{Duration, Instant};
use postgres::fallible_iterator::FallibleIterator;

use super::waiting_claim;

/// Waits (at most 10 s) until `n` waiting claims of `db` sleep on their latch (wait event
/// `Extension`: registered and past their first look), rather than sleeping a fixed time that a
/// loaded machine may need more of.
fn await_sleepers(db: &TestDb, n: i64) {
    let mut c = db.connect();
    let asleep = super::eventually(Duration::from_secs(10), || {
        let k: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Extension'",
                &[],
            )
            .unwrap()
            .get(0);
        k == n
    });
    assert!(asleep.is_some(), "the {n} waiting claims did not all fall asleep");
}


/// How soon after its commit a woken claim must have returned: far below the waits of these
/// tests (10 s) and far above a woken claim's latency on a loaded machine (milliseconds).
const WOKEN_WITHIN: Duration = Duration::from_secs(3);

#[test]
fn a_waiting_claim_returns_right_after_the_enqueue_commits_and_not_before() {
    // A database no maintenance worker serves ("bgw_" is the served prefix): its once-a-second
    // pass would also wake the claim, so the negative control JQ_TEST_BREAK=no_wake (enqueue
    // wakes nobody) failed only when the pass came more than 500 ms after the commit (seen
    // once: "woken 546ms after the commit"). Here only the enqueue's own wakeup can end the
    // wait early.
    let db = super::unwoken_db("longpoll");
    let mut c = db.connect();
    if broken("no_wake") {
        sabotage(&mut c, "jq.enqueue(text,jsonb,text,timestamptz,interval,integer,integer,text,text,bigint)",
                 "jq._wake_ready(t.name, coalesce(enqueue.priority, 0), v_run_at)", "true", 2);
    }
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let waiter = waiting_claim(&db, "SELECT id FROM jq.claim('q', 'w', wait => '10 s')");
    await_sleepers(&db, 1);
    // The producer's transaction stays open for 1 s after the enqueue: nothing may be claimed
    // before its commit.
    let mut p = db.connect();
    let mut tx = p.transaction().unwrap();
    tx.execute("SELECT jq.enqueue('q', '{}')", &[]).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert!(!waiter.is_finished(), "the claim returned before the enqueue committed");
    tx.commit().unwrap();
    let committed = Instant::now();
    let (returned, n) = waiter.join().unwrap();
    assert_eq!(n, 1);
    let lag = returned.saturating_duration_since(committed);
    eprintln!("long-poll returned {lag:?} after the commit");
    assert!(lag < WOKEN_WITHIN, "woken {lag:?} after the commit");
}

#[test]
fn a_rolled_back_enqueue_wakes_nobody_into_a_claim() {
    let db = TestDb::new("bgw_rollback");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let name = db.name.clone();
    let waiter = std::thread::spawn(move || {
        let mut w = Client::connect(&conninfo(&name), NoTls).unwrap();
        let t = Instant::now();
        let rows = w.query("SELECT id FROM jq.claim('q', 'w', wait => '2 s')", &[]).unwrap();
        (t.elapsed(), rows.len())
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut p = db.connect();
    p.batch_execute("BEGIN; SELECT jq.enqueue('q', '{}'); ROLLBACK;").unwrap();
    let (took, n) = waiter.join().unwrap();
    assert_eq!(n, 0);
    assert!(took >= Duration::from_millis(1900), "returned after {took:?}");
}

/// `jq.wakeups = off` in the producer's session: its transactions note nothing for the wakeup
/// path, so neither a waiting claim's latch nor the maintenance worker's `NOTIFY jq_ready` hears
/// of its job (the NOTIFY is the deterministic witness: a latch can also be set by PostgreSQL
/// itself, and a woken claim looks again). The job is not lost: the next look claims it. The
/// same enqueue with the setting back on is NOTIFYed (the channel works in this database).
/// Negative control `JQ_TEST_BREAK=nowake_ignored` (the SET left out, as if the GUC were
/// ignored): seen failing with "a job enqueued with jq.wakeups = off was announced".
#[test]
fn a_session_with_wakeups_off_wakes_nobody_and_loses_nothing() {
    let db = TestDb::new("bgw_nowake");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let mut l = db.connect();
    l.batch_execute("LISTEN jq_ready").unwrap();
    let mut p = db.connect();
    if !jq_pg_test::broken("nowake_ignored") {
        p.batch_execute("SET jq.wakeups = off").unwrap();
    }
    p.batch_execute("SELECT jq.enqueue('q', '{}')").unwrap();
    {
        let mut n = l.notifications();
        let mut it = n.timeout_iter(Duration::from_millis(2500));  // two maintenance passes
        assert!(
            matches!(it.next(), Ok(None)),
            "a job enqueued with jq.wakeups = off was announced"
        );
    }
    p.batch_execute("SET jq.wakeups = on; SELECT jq.enqueue('q', '{}')").unwrap();
    {
        let mut n = l.notifications();
        let mut it = n.timeout_iter(Duration::from_secs(4));
        assert!(matches!(it.next(), Ok(Some(_))), "no NOTIFY with jq.wakeups = on");
    }
    assert_eq!(c.query("SELECT id FROM jq.claim('q', 'w', 10)", &[]).unwrap().len(), 2);
}

#[test]
fn a_waiting_multi_queue_claim_is_woken_by_any_of_its_queues() {
    let db = super::unwoken_db("multi");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('a'); SELECT jq.create_queue('b')").unwrap();
    let name = db.name.clone();
    let waiter = std::thread::spawn(move || {
        let mut w = Client::connect(&conninfo(&name), NoTls).unwrap();
        let rows = w
            .query("SELECT queue FROM jq.claim(ARRAY['a', 'b'], 'w', wait => '10 s')", &[])
            .unwrap();
        (Instant::now(), rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>())
    });
    await_sleepers(&db, 1);
    c.batch_execute("SELECT jq.enqueue('b', '{}')").unwrap();
    let committed = Instant::now();
    let (returned, queues) = waiter.join().unwrap();
    assert_eq!(queues, vec!["b".to_string()]);
    assert!(returned.saturating_duration_since(committed) < WOKEN_WITHIN);
}

#[test]
fn a_waiting_claim_on_a_full_capped_queue_is_woken_when_a_job_completes() {
    let db = super::unwoken_db("capped");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q', max_concurrency => 1)").unwrap();
    c.batch_execute("SELECT jq.enqueue('q', '{}'); SELECT jq.enqueue('q', '{}')").unwrap();
    let first = claim(&mut c, "q", "w1", 1, None).pop().unwrap();
    let waiter = waiting_claim(&db, "SELECT id FROM jq.claim('q', 'w2', wait => '10 s')");
    await_sleepers(&db, 1);
    // The waiter holds no lock on the queue row while it waits: pausing does not block.
    c.batch_execute("SET lock_timeout = '1s'; SELECT jq.pause('q'); SELECT jq.resume('q')").unwrap();
    assert!(complete(&mut c, &first));
    let done = Instant::now();
    let (returned, n) = waiter.join().unwrap();
    assert_eq!(n, 1);
    assert!(returned.saturating_duration_since(done) < WOKEN_WITHIN);
}

#[test]
fn waiting_validates_its_arguments() {
    let db = TestDb::new("bgw_args");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    assert_eq!(sqlstate(c.query("SELECT * FROM jq.claim('q', 'w', wait => '-1 s')", &[])), "22023");
    assert_eq!(sqlstate(c.query("SELECT * FROM jq.claim('q', 'w', wait => '2 hours')", &[])), "22023");
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
    assert_eq!(sqlstate(c.query("SELECT * FROM jq.claim('q', 'w', wait => '1 s')", &[])), "25000");
    c.batch_execute("ROLLBACK").unwrap();
    // wait => 0 returns at once; a query cancel interrupts a wait.
    assert!(c.query("SELECT * FROM jq.claim('q', 'w', wait => '0')", &[]).unwrap().is_empty());
    c.batch_execute("SET statement_timeout = '300ms'").unwrap();
    let t = Instant::now();
    assert_eq!(sqlstate(c.query("SELECT * FROM jq.claim('q', 'w', wait => '10 s')", &[])), "57014");
    assert!(t.elapsed() < Duration::from_secs(2));
    // The registration ended with the cancelled transaction; a later enqueue commits normally.
    c.batch_execute("RESET statement_timeout; SELECT jq.enqueue('q', '{}')").unwrap();
}

#[test]
fn a_waiting_claim_on_an_empty_capped_queue_waits() {
    let db = super::unwoken_db("capidle");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q', max_concurrency => 5)").unwrap();
    let t = Instant::now();
    let n = c.query("SELECT id FROM jq.claim('q', 'w', wait => '1500 ms')", &[]).unwrap().len();
    assert_eq!(n, 0);
    assert!(t.elapsed() >= Duration::from_millis(1400), "returned after {:?}", t.elapsed());
    // And it is woken by an enqueue.
    let waiter = waiting_claim(&db, "SELECT id FROM jq.claim('q', 'w', wait => '10 s')");
    await_sleepers(&db, 1);
    c.batch_execute("SELECT jq.enqueue('q', '{}')").unwrap();
    let committed = Instant::now();
    let (returned, n) = waiter.join().unwrap();
    assert_eq!(n, 1);
    assert!(returned.saturating_duration_since(committed) < WOKEN_WITHIN);
}

/// No thundering herd: one job wakes one of many waiters, not all of them. Broken variant
/// `JQ_TEST_BREAK=wake_all` (enqueue wakes every waiter): seen failing.
#[test]
fn one_job_wakes_one_of_many_waiters() {
    let _counting = super::wakeup_counting();
    let db = TestDb::new("bgw_herd");
    let mut c = db.connect();
    if broken("wake_all") {
        sabotage(&mut c, "jq.enqueue(text,jsonb,text,timestamptz,interval,integer,integer,text,text,bigint)",
                 "jq._wake_ready(t.name, coalesce(enqueue.priority, 0), v_run_at)", "jq._wake_n(t.name, 1000)", 2);
    }
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let waiters: Vec<_> = (0..12)
        .map(|_| {
            let name = db.name.clone();
            std::thread::spawn(move || {
                let mut w = Client::connect(&conninfo(&name), NoTls).unwrap();
                w.query("SELECT id FROM jq.claim('q', 'w', wait => '3 s')", &[]).unwrap().len()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    let before: i64 = c.query_one("SELECT jq._wakeups()", &[]).unwrap().get(0);
    c.batch_execute("SELECT jq.enqueue('q', '{}')").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let after: i64 = c.query_one("SELECT jq._wakeups()", &[]).unwrap().get(0);
    let claimed: usize = waiters.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(claimed, 1);
    // Other tests run in parallel and wake their own waiters: allow a little slack.
    assert!(after - before <= 3, "one job woke {} waiters", after - before);
}

/// `n` waiting claims of up to 10 jobs each (`wait` as given) on queue `q` of `db`, each on its
/// own connection in a thread that returns how many jobs it got; returns once all of them are
/// asleep on their latch (wait event `Extension`: registered and past their first look).
fn batch_waiters(db: &TestDb, n: usize, wait: &'static str) -> Vec<std::thread::JoinHandle<usize>> {
    let waiters: Vec<_> = (0..n)
        .map(|i| {
            let name = db.name.clone();
            std::thread::spawn(move || {
                let mut w = Client::connect(&conninfo(&name), NoTls).unwrap();
                let sql = format!("SELECT id FROM jq.claim('q', 'w{i}', n => 10, wait => '{wait}')");
                w.query(sql.as_str(), &[]).unwrap().len()
            })
        })
        .collect();
    await_sleepers(db, n as i64);
    waiters
}

/// The batch a long-poll registers, in jq._claim_wait_start.
const WAIT_BATCH: &str = "CASE WHEN v_limited THEN 1 ELSE _claim_wait_start.n END";

/// The negative controls of the two batch tests below break the batch a long-poll registers
/// (jq._claim_wait_start): `wake_per_job` registers 1 (each job wakes a waiter, as before
/// waiters registered their n), `wake_too_few` twice n (a commit wakes too few waiters). Both
/// also keep jq.claim from bringing the registration back to n before it sleeps
/// (`jq._wait_rebatch`, [`REBATCH`]), which otherwise undoes the broken batch.
fn break_wait_batch(c: &mut Client) {
    let batch = if broken("wake_per_job") {
        "1"
    } else if broken("wake_too_few") {
        "2 * _claim_wait_start.n"
    } else {
        return;
    };
    sabotage(c, "jq._claim_wait_start(text,interval,integer)", WAIT_BATCH, batch, 1);
    sabotage(c, "jq.claim(text,text,integer,interval,interval,bigint)", REBATCH, "false", 1);
}

/// No herd of batch claims: an enqueue_many of 10 jobs wakes one of twelve waiters that each
/// claim up to 10 (src/wakeup.rs, set_latches counts each woken waiter's n against the jobs).
/// Before waiters registered their n, it woke ten of them and nine
/// found nothing. Negative control `JQ_TEST_BREAK=wake_per_job` (each waiter registers a batch
/// of 1): seen failing ("10 jobs woke 10 waiters").
#[test]
fn a_batch_wakes_one_waiter_per_n_jobs() {
    let _counting = super::wakeup_counting();
    // Not served by a maintenance worker ("bgw_" is the served prefix): only the commit wakes.
    let db = TestDb::new("batchwake");
    let mut c = db.connect();
    break_wait_batch(&mut c);
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let waiters = batch_waiters(&db, 12, "3 s");
    let before: i64 = c.query_one("SELECT jq._wakeups()", &[]).unwrap().get(0);
    // The commit sets the latches before the statement returns: the counter is final here.
    c.batch_execute("SELECT jq.enqueue_many('q', (SELECT jsonb_agg('{}'::jsonb) FROM generate_series(1, 10)))")
        .unwrap();
    let after: i64 = c.query_one("SELECT jq._wakeups()", &[]).unwrap().get(0);
    let got: Vec<usize> = waiters.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got.iter().sum::<usize>(), 10);
    // Other tests run in parallel and wake their own waiters: allow a little slack.
    assert!(after - before <= 3, "10 jobs woke {} waiters (jobs per waiter: {got:?})", after - before);
}

/// No job of a batch is left behind by the waiters' batches: 25 jobs committed at once with
/// six waiters of up to 10 each wake three (10 + 10 + 5), and all 25 are claimed within
/// seconds, not when the 20-s waits run out; then each of three single jobs wakes one of the
/// other three within seconds; ten rounds. Rounds, because any backend's latch is
/// also set by PostgreSQL itself now and then (a DROP DATABASE of a test running in parallel
/// signals every backend), which lets a stranded job be found by chance; a stranded job is
/// caught by the first round with no such wake. The database runs without claim-start hints,
/// so no waiter is the queue's watcher, whose look once a second would find a stranded job
/// (with it, the negative control below passed). Negative control `JQ_TEST_BREAK=wake_too_few`
/// (waiters register twice their n, so the commit wakes two): seen failing ("round 1: 20 of 25
/// jobs claimed" with a 3-s limit; with 10 s, "round 9: single job 3 was not claimed within 10 s
/// of its commit", the rounds before saved by such wakes).
#[test]
fn every_job_of_a_batch_is_claimed_without_waiting_out_the_wait() {
    // Its wakeups (six a round) would land in the counts of the tests that count them.
    let _counting = super::wakeup_counting();
    // Without claim-start hints no sleeping long-poll is the queue's watcher (src/claim_hint.rs),
    // whose timed look finds a job left behind within a second: only the wakeups are tested.
    let db = super::unwoken_db("batchall");
    let mut c = db.connect();
    break_wait_batch(&mut c);
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    for round in 1..=10i64 {
        let waiters = batch_waiters(&db, 6, "20 s");
        c.batch_execute("SELECT jq.enqueue_many('q', (SELECT jsonb_agg('{}'::jsonb) FROM generate_series(1, 25)))")
            .unwrap();
        let (mut running, want) = (0i64, 28 * (round - 1) + 25);
        // Well below the 20-s waits a stranded job would sit out.
        super::eventually(Duration::from_secs(10), || {
            running = c.query_one("SELECT count(*) FROM jq.jobs WHERE state = 'running'", &[]).unwrap().get(0);
            running == want
        });
        assert_eq!(running, want, "round {round}: {} of 25 jobs claimed", running - 28 * (round - 1));
        // The three woken waiters returned with their jobs; three commits of one job each wake
        // one of the other three, each committed once the one before is claimed. Committed back
        // to back, a waiter woken for the first job could claim the second too, and the waiter
        // woken for the second found nothing and slept out its 20 s: every round took 20 s.
        for k in 1..=3i64 {
            c.batch_execute("SELECT jq.enqueue('q', '{}')").unwrap();
            super::eventually(Duration::from_secs(10), || {
                running = c.query_one("SELECT count(*) FROM jq.jobs WHERE state = 'running'", &[]).unwrap().get(0);
                running == want + k
            });
            assert_eq!(running, want + k, "round {round}: single job {k} was not claimed within 10 s of its commit");
        }
        let got: usize = waiters.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(got, 28, "round {round}");
    }
}

/// A claim rolled back to a savepoint hands its job back at once. Before the subtransaction
/// callback existed the waiter only got the job when its wait ran out (seen with the same
/// sequence in psql against that build: 8.0 s for an 8 s wait).
#[test]
fn a_claim_rolled_back_to_a_savepoint_wakes_a_waiter() {
    let db = super::unwoken_db("savepoint");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q'); SELECT jq.enqueue('q', '{}')").unwrap();
    c.batch_execute("BEGIN; SAVEPOINT s").unwrap();
    assert_eq!(claim(&mut c, "q", "s", 1, None).len(), 1);
    let waiter = waiting_claim(&db, "SELECT id FROM jq.claim('q', 'w', wait => '8 s')");
    await_sleepers(&db, 1);
    assert!(!waiter.is_finished(), "the waiter got a job that is claimed");
    let rolled_back = Instant::now();
    c.batch_execute("ROLLBACK TO SAVEPOINT s").unwrap();
    let (returned, n) = waiter.join().unwrap();
    c.batch_execute("COMMIT").unwrap();
    assert_eq!(n, 1);
    let lag = returned.duration_since(rolled_back);
    assert!(lag < WOKEN_WITHIN, "got it {lag:?} after the rollback");
}

/// A multi-queue waiting claim whose look sees a ready job locked by an unfinished claim
/// sleeps instead of returning empty at once (which made callers spin).
#[test]
fn a_multi_queue_waiting_claim_does_not_spin_on_a_locked_job() {
    let db = TestDb::new("bgw_spin");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('a'); SELECT jq.create_queue('b'); SELECT jq.enqueue('a', '{}')").unwrap();
    let mut holder = db.connect();
    holder.batch_execute("BEGIN; SELECT * FROM jq.claim('a', 'slow')").unwrap();
    let t = Instant::now();
    let n = c.query("SELECT id FROM jq.claim(ARRAY['a', 'b'], 'w', wait => '1500 ms')", &[]).unwrap().len();
    assert_eq!(n, 0);
    assert!(t.elapsed() >= Duration::from_millis(1400), "returned after {:?}", t.elapsed());
    holder.batch_execute("ROLLBACK").unwrap();
}

/// The rebatch call of a long-poll about to sleep, in jq.claim (its negative control removes it).
const REBATCH: &str =
    "jq._wait_rebatch(v_cap IS NOT NULL, CASE WHEN v_cap IS NOT NULL OR v_rate IS NOT NULL THEN 1 ELSE claim.n END)";

/// A queue rate-limited while its long-polls sleep still wakes a waiter per job. Two long-polls
/// of up to 10 jobs sleep on an unlimited queue, each counted for 10 jobs per wakeup; jq.alter_queue
/// sets a rate limit of one job a second (burst 1), which wakes them: they look and sleep again,
/// now counted for one job each and the rate-limited queue's next token (`jq._wait_rebatch`,
/// src/wakeup.rs). An enqueue of 2 jobs must then have both claimed within 4 s: one at once with
/// the token, the other when the next token is due a second later. Before, each waiter kept the
/// batch it registered: the commit woke one waiter (its 10 covered both jobs), which took the one
/// token and returned, and the other slept on with no timer.
///
/// The woken waiter that loses the race for the token under the queue row lock returns empty, as
/// documented for capped and rate-limited queues, and its caller calls again (as workers do): the
/// waiters here loop until they get a job ([`waiters_until_a_job`]).
///
/// Negative control `JQ_TEST_BREAK=no_rebatch` (jq.claim does not update its registration before
/// sleeping, the behaviour before): seen failing ("1 of the 2 jobs claimed within 4 s of their
/// commit").
#[test]
fn a_queue_rate_limited_mid_wait_wakes_a_waiter_per_job() {
    let _counting = super::wakeup_counting();
    // Not served by a maintenance worker ("bgw_" is the served prefix): only commits wake.
    let db = TestDb::new("ratewake");
    let mut c = db.connect();
    if broken("no_rebatch") {
        sabotage(&mut c, "jq.claim(text,text,integer,interval,interval,bigint)", REBATCH, "false", 1);
    }
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let waiters = waiters_until_a_job(&db, 2);
    c.batch_execute("SELECT jq.alter_queue('q', rate_limit => 1, rate_period => '1 second', burst => 1)").unwrap();
    // Both consumed the alter's wakeup (woken 0), then both sleep again: their looks are done.
    let settled = super::eventually(Duration::from_secs(10), || {
        let unwoken: i64 = c.query_one("SELECT count(*) FROM jq._waiters() WHERE woken = 0", &[]).unwrap().get(0);
        unwoken == 2
            && c.query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Extension'",
                &[],
            )
            .unwrap()
            .get::<_, i64>(0)
                == 2
    });
    assert!(settled.is_some(), "the waiters did not look again and sleep after the alter");
    c.batch_execute("SELECT jq.enqueue_many('q', (SELECT jsonb_agg('{}'::jsonb) FROM generate_series(1, 2)))").unwrap();
    let mut running = 0;
    super::eventually(Duration::from_secs(4), || {
        running = c.query_one("SELECT count(*) FROM jq.jobs WHERE state = 'running'", &[]).unwrap().get::<_, i64>(0);
        running == 2
    });
    assert_eq!(running, 2, "{running} of the 2 jobs claimed within 4 s of their commit");
    drop(waiters); // each returned with a job, or returned empty (below) and is waiting again
}

/// `n` workers of queue `q` of `db`, each on its own connection in a thread: each calls
/// `jq.claim('q', …, n => 10, wait => '20 s')` until a call returns a job (a call may return
/// empty early on a rate-limited queue), at most 30 s. Returns once all of them are asleep.
fn waiters_until_a_job(db: &TestDb, n: usize) -> Vec<std::thread::JoinHandle<usize>> {
    let waiters: Vec<_> = (0..n)
        .map(|i| {
            let name = db.name.clone();
            std::thread::spawn(move || {
                let mut w = Client::connect(&conninfo(&name), NoTls).unwrap();
                let sql = format!("SELECT id FROM jq.claim('q', 'w{i}', n => 10, wait => '20 s')");
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(30) {
                    let Ok(rows) = w.query(sql.as_str(), &[]) else { return 0 };  // the test ended
                    if !rows.is_empty() {
                        return rows.len();
                    }
                }
                0
            })
        })
        .collect();
    await_sleepers(db, n as i64);
    waiters
}
