//! One open transaction never stalls maintenance for everyone: each duty skips what another
//! session holds, does the rest, and leaves the held item for its next pass.
//!
//! Each test holds, in a second session, the lock a duty would need, and runs the duty on a
//! connection with `statement_timeout = '3s'`: a duty that waits fails with 57014 there instead
//! of hanging (a lock_timeout would raise 55P03, which a duty may catch as "locked, skip it").
//! The instants are explicit (maintenance of the future), except where the background worker
//! itself is under test.

use jq_pg_test::waiting::wait_until;
use jq_pg_test::{broken, sabotage, state, Client, TestDb};
use std::time::{Duration, Instant};

const PROMOTE: &str = "jq._promote(timestamptz,integer,integer)";
const END_LEASES: &str = "jq._end_leases(bigint[],timestamptz,timestamptz,boolean,text,boolean)";
const PRUNE: &str = "jq._prune(timestamptz,integer,integer)";
const MAINTAIN: &str = "jq._maintain(text,timestamptz)";

/// A connection whose statements are cancelled after 3 s (57014) instead of waiting on.
fn impatient(db: &TestDb) -> Client {
    let mut c = db.connect();
    c.batch_execute("SET statement_timeout = '3s'").unwrap();
    c
}

/// A database error as "SQLSTATE: message".
fn db_error(e: &postgres::Error) -> String {
    e.as_db_error().map(|d| format!("{}: {}", d.code().code(), d.message())).unwrap_or_else(|| e.to_string())
}

/// Runs duty `duty` at `now() + ahead`; panics saying what it waited for.
fn run_duty(c: &mut Client, duty: &str, ahead: &str, held: &str) -> i32 {
    let t = Instant::now();
    let r = c.query_one(&format!("SELECT jq._maintain('{duty}', now() + interval '{ahead}')"), &[]);
    match r {
        Ok(row) => row.get(0),
        Err(e) => panic!("the {duty} duty waited for {held} ({:?}): {}", t.elapsed(), db_error(&e)),
    }
}

fn enqueue(c: &mut Client, args: &str) -> i64 {
    c.query_one(&format!("SELECT jq.enqueue({args})"), &[]).unwrap().get(0)
}

/// Queues `a` and `b`, a delayed keyed job in `a` and a delayed job in `b`;
/// another session enqueues a job of the same key and keeps its transaction open. Promotion
/// moves `b`'s job and leaves `a`'s keyed one scheduled (its key's slot row is held) until the
/// holder ends; then it goes through its key.
///
/// Negative control `promote_waits_for_key` (the promotion takes the key as before, waiting for
/// it): seen failing with "the promote duty waited for the key row another transaction holds
/// … 57014".
#[test]
fn promotion_skips_a_key_another_transaction_holds() {
    let db = TestDb::new("held_promote");
    let mut c = impatient(&db);
    if broken("promote_waits_for_key") {
        sabotage(&mut c, PROMOTE, "OR jq._key_try_lock(j.queue, j.concurrency_key))", "OR true)", 1);
    }
    c.batch_execute("SELECT jq.create_queue('a'); SELECT jq.create_queue('b')").unwrap();
    let keyed = enqueue(&mut c, "'a', run_at => now() + interval '1 hour', concurrency_key => 'k'");
    let other = enqueue(&mut c, "'b', run_at => now() + interval '1 hour'");
    let mut holder = db.connect();
    holder.batch_execute("BEGIN; SELECT jq.enqueue('a', concurrency_key => 'k')").unwrap();

    assert_eq!(run_duty(&mut c, "promote", "2 hours", "the key row another transaction holds"), 1);
    assert_eq!(state(&mut c, other).as_deref(), Some("ready"), "queue b's due job was not promoted");
    assert_eq!(state(&mut c, keyed).as_deref(), Some("scheduled"), "the held key's job moved");

    holder.batch_execute("COMMIT").unwrap();
    assert_eq!(run_duty(&mut c, "promote", "2 hours", "nothing"), 1);
    // The holder's job holds the key's one slot: the promoted one waits behind it.
    assert_eq!(state(&mut c, keyed).as_deref(), Some("blocked"));
}

/// A keyed job whose lease expired after a cancellation request ends (cancelled) when reaped,
/// which frees its key's slot and so needs the key's slot row. While another session holds that
/// row, the reaper ends the other queue's expired lease and leaves this one for its next pass.
///
/// Negative control `reap_waits_for_key`: seen failing with "the reap duty waited for the key
/// row another transaction holds … 57014".
#[test]
fn reaping_skips_a_key_another_transaction_holds() {
    let db = TestDb::new("held_reap");
    let mut c = impatient(&db);
    if broken("reap_waits_for_key") {
        sabotage(&mut c, END_LEASES, "OR jq._key_try_lock(j.queue, j.concurrency_key))", "OR true)", 1);
    }
    c.batch_execute("SELECT jq.create_queue('a'); SELECT jq.create_queue('b')").unwrap();
    let keyed = enqueue(&mut c, "'a', concurrency_key => 'k'");
    let other = enqueue(&mut c, "'b'");
    for q in ["a", "b"] {
        assert_eq!(jq_pg_test::claim(&mut c, q, "w", 1, Some("1 minute")).len(), 1);
    }
    c.batch_execute(&format!("SELECT jq.cancel({keyed})")).unwrap();
    let mut holder = db.connect();
    holder.batch_execute("BEGIN").unwrap();
    let next = enqueue(&mut holder, "'a', concurrency_key => 'k'");

    assert_eq!(run_duty(&mut c, "reap", "1 hour", "the key row another transaction holds"), 1);
    assert_eq!(state(&mut c, other).as_deref(), Some("ready"), "queue b's expired lease was not reaped");
    assert_eq!(state(&mut c, keyed).as_deref(), Some("running"), "the held key's job was reaped");

    holder.batch_execute("COMMIT").unwrap();
    assert_eq!(run_duty(&mut c, "reap", "1 hour", "nothing"), 1);
    assert_eq!(state(&mut c, keyed).as_deref(), Some("cancelled"));
    assert_eq!(state(&mut c, next).as_deref(), Some("ready"), "the freed slot went to the key's next job");
}

/// The same end of a keyed job frees the slot for the key's next blocked job, which the slot's
/// hand-off locks: while another session holds that job (an open jq.cancel of it), the reaper
/// leaves the key for its next pass instead of waiting; then the slot passes on.
///
/// Negative control `key_head_not_checked` (jq._key_try_lock without the look at the key's next
/// blocked jobs): seen failing with "the reap duty waited for the key's next blocked job …
/// 57014".
#[test]
fn reaping_skips_a_key_whose_next_blocked_job_another_transaction_holds() {
    let db = TestDb::new("held_reap_head");
    let mut c = impatient(&db);
    if broken("key_head_not_checked") {
        sabotage(&mut c, "jq._key_try_lock(text,text)", "RETURN pg_catalog.cardinality(v_head) = 0\n",
                 "RETURN true OR pg_catalog.cardinality(v_head) = 0\n", 1);
    }
    c.batch_execute("SELECT jq.create_queue('a'); SELECT jq.create_queue('b')").unwrap();
    let head = enqueue(&mut c, "'a', concurrency_key => 'k'");
    let next = enqueue(&mut c, "'a', concurrency_key => 'k'");
    let other = enqueue(&mut c, "'b'");
    for q in ["a", "b"] {
        assert_eq!(jq_pg_test::claim(&mut c, q, "w", 1, Some("1 minute")).len(), 1);
    }
    c.batch_execute(&format!("SELECT jq.cancel({head})")).unwrap();
    let mut holder = db.connect();
    holder.batch_execute(&format!("BEGIN; SELECT jq.cancel({next})")).unwrap();

    assert_eq!(run_duty(&mut c, "reap", "1 hour", "the key's next blocked job another transaction holds"), 1);
    assert_eq!(state(&mut c, other).as_deref(), Some("ready"), "queue b's expired lease was not reaped");
    assert_eq!(state(&mut c, head).as_deref(), Some("running"), "the key was reaped past its held job");

    holder.batch_execute("ROLLBACK").unwrap();
    assert_eq!(run_duty(&mut c, "reap", "1 hour", "nothing"), 1);
    assert_eq!(state(&mut c, head).as_deref(), Some("cancelled"));
    assert_eq!(state(&mut c, next).as_deref(), Some("ready"), "the freed slot went to the key's next job");
}

/// A held key with more due jobs than one call reads (here 2,500 against a read bound of
/// 2 x budget = 2,000) does not keep other queues' due jobs behind it: once its jobs are left
/// for the holder, the call's later passes pick none of them and reach queue b's job.
///
/// Negative control `busy_keys_picked_again` (the pick without the filter on held keys): seen
/// failing with "queue b's due job was left behind the held key's backlog: left: 0".
#[test]
fn a_held_key_with_a_long_backlog_delays_no_other_queue() {
    let db = TestDb::new("held_backlog");
    let mut c = impatient(&db);
    if broken("busy_keys_picked_again") {
        sabotage(&mut c, PROMOTE, "= ANY (v_busy)))", "= ANY ('{}'::text[])))", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('hot'); SELECT jq.create_queue('b');
         SELECT count(jq.enqueue('hot', run_at => now() + interval '1 hour', concurrency_key => 'h'))
         FROM generate_series(1, 2500);",
    )
    .unwrap();
    let other = enqueue(&mut c, "'b', run_at => now() + interval '90 minutes'");
    let mut holder = db.connect();
    holder.batch_execute("BEGIN; SELECT jq.enqueue('hot', concurrency_key => 'h')").unwrap();
    let moved: i32 = c
        .query_one("SELECT jq._promote(now() + interval '2 hours', 100, 1000)", &[])
        .unwrap()
        .get(0);
    assert_eq!(moved, 1, "queue b's due job was left behind the held key's backlog");
    assert_eq!(state(&mut c, other).as_deref(), Some("ready"));
    holder.batch_execute("ROLLBACK").unwrap();
}

/// A schedule another session is altering (its row locked until that transaction ends) is left
/// for the next pass; the other schedules fire.
///
/// Negative control `cron_waits_for_schedule` (the due schedules locked without SKIP LOCKED):
/// seen failing with "the cron duty waited for a schedule row another transaction holds …
/// 57014".
#[test]
fn cron_fires_the_schedules_nobody_holds() {
    let db = TestDb::new("held_cron");
    let mut c = impatient(&db);
    if broken("cron_waits_for_schedule") {
        sabotage(&mut c, "jq.cron_tick(timestamptz)", "SKIP LOCKED))", "))", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('q');
         SELECT jq.schedule('held', '* * * * *', 'q');
         SELECT jq.schedule('free', '* * * * *', 'q');",
    )
    .unwrap();
    let mut holder = db.connect();
    holder.batch_execute("BEGIN; SELECT jq.alter_schedule('held', priority => 5)").unwrap();

    let fired = run_duty(&mut c, "cron", "2 minutes", "a schedule row another transaction holds");
    let kinds = |c: &mut Client| -> Vec<String> {
        c.query("SELECT kind FROM jq.jobs ORDER BY kind", &[]).unwrap().iter().map(|r| r.get(0)).collect()
    };
    assert_eq!((fired, kinds(&mut c)), (1, vec!["free".to_string()]));

    holder.batch_execute("COMMIT").unwrap();
    assert_eq!(run_duty(&mut c, "cron", "2 minutes", "nothing"), 1);
    assert_eq!(kinds(&mut c), vec!["free".to_string(), "held".to_string()]);
}

/// An open jq.grant holds jq.queue_grants against the pruning of grants to dropped roles: the
/// prune duty still deletes the jobs past retention and leaves the grants for its next pass.
///
/// Negative control `prune_waits_for_grants` (the grants' table lock taken without NOWAIT):
/// seen failing with "the prune duty waited for jq.queue_grants, held by an open jq.grant …
/// 57014".
#[test]
fn pruning_goes_on_while_a_grant_is_open() {
    let db = TestDb::new("held_prune");
    let mut c = impatient(&db);
    if broken("prune_waits_for_grants") {
        sabotage(&mut c, PRUNE, "IN ROW EXCLUSIVE MODE NOWAIT;", "IN ROW EXCLUSIVE MODE;", 1);
    }
    c.batch_execute("SELECT jq.create_queue('q', retention => '1 minute')").unwrap();
    enqueue(&mut c, "'q'");
    let job = jq_pg_test::claim(&mut c, "q", "w", 1, None).remove(0);
    assert!(jq_pg_test::complete(&mut c, &job));
    let mut holder = db.connect();
    holder.batch_execute("BEGIN; SELECT jq.grant('q', 'jq_worker', 'work')").unwrap();

    // The first pass moves the history ring on; the next truncates the table the job is in.
    run_duty(&mut c, "prune", "1 day", "jq.queue_grants, held by an open jq.grant");
    assert!(run_duty(&mut c, "prune", "1 day", "jq.queue_grants, held by an open jq.grant") >= 1);
    assert_eq!(state(&mut c, job.id), None, "the completed job past retention was not pruned");
    holder.batch_execute("COMMIT").unwrap();
}

/// A session holding jq.jobs against writers (an open jq.drop_queue) fails a duty within 200 ms
/// with 55P03, recorded by jq._maintain_guarded, instead of making it wait.
///
/// Negative control `maintain_waits_for_jobs` (the bounded table lock left out): seen failing with
/// "the duty waited … 57014" (the statement timeout of this test).
#[test]
fn a_duty_fails_within_200_ms_while_jq_jobs_is_held() {
    let db = TestDb::new("held_table");
    let mut c = db.connect();
    if broken("maintain_waits_for_jobs") {
        sabotage(&mut c, MAINTAIN, "LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;", "", 1);
    }
    c.batch_execute("SET statement_timeout = '3s'; SELECT jq.create_queue('q'); SELECT jq.create_queue('gone')")
        .unwrap();
    let mut holder = db.connect();
    holder.batch_execute("BEGIN; SELECT jq.drop_queue('gone')").unwrap();
    for duty in ["promote", "reap", "cron", "prune"] {
        let t = Instant::now();
        let error: Option<String> = c
            .query_one("SELECT error FROM jq._maintain_guarded($1, now())", &[&duty])
            .unwrap_or_else(|e| panic!("the duty waited ({:?}): {}", t.elapsed(), db_error(&e)))
            .get(0);
        let error = error.unwrap_or_default();
        assert!(error.starts_with("55P03"), "{duty}: {error:?}");
    }
    holder.batch_execute("ROLLBACK").unwrap();
}

/// The same with the background worker: while another session holds a key's slot
/// row, the worker's passes keep promoting the due jobs of other queues within a pass or two and
/// record no error. (Before, every pass waited out its 5-s lock_timeout on the key and rolled
/// back every promotion: queue b's job stayed scheduled for as long as the key was held.)
///
/// Negative control `promote_waits_for_key`: seen failing with "timed out after 10s waiting for:
/// queue b's due job promoted by the background worker".
#[test]
fn the_background_worker_promotes_other_queues_while_a_key_is_held() {
    let db = TestDb::new("bgw_held_promote");
    let mut c = db.connect();
    if broken("promote_waits_for_key") {
        sabotage(&mut c, PROMOTE, "OR jq._key_try_lock(j.queue, j.concurrency_key))", "OR true)", 1);
    }
    c.batch_execute("SELECT jq.create_queue('a'); SELECT jq.create_queue('b')").unwrap();
    let keyed = enqueue(&mut c, "'a', run_at => now() + interval '1 second', concurrency_key => 'k'");
    let other = enqueue(&mut c, "'b', run_at => now() + interval '1 second'");
    let mut holder = db.connect();
    holder.batch_execute("BEGIN; SELECT jq.enqueue('a', concurrency_key => 'k')").unwrap();
    wait_until(Duration::from_secs(10), "queue b's due job promoted by the background worker", || {
        state(&mut c, other).as_deref() == Some("ready")
    });
    assert_eq!(state(&mut c, keyed).as_deref(), Some("scheduled"));
    let error: Option<String> = c
        .query_one("SELECT last_error FROM jq.status() WHERE database = current_database()", &[])
        .unwrap()
        .get(0);
    assert_eq!(error, None, "a maintenance pass failed while the key was held");
    holder.batch_execute("COMMIT").unwrap();
    wait_until(Duration::from_secs(10), "the held key's job promoted once the key is free", || {
        state(&mut c, keyed).as_deref() == Some("blocked")
    });
}
