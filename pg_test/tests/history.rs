//! Where finished jobs live (docs/semantics.md, "Where finished jobs live"): a job that
//! finishes leaves the hot table `ONLY jq.jobs` in the statement that finishes it, for a history
//! table that inherits from `jq.jobs` (so `jq.jobs` still answers "what happened to job N");
//! history tables are emptied whole, by TRUNCATE, only once every job in them is past its
//! queue's retention, and never while another session uses them; the rings move on.
//!
//! Negative controls: `JQ_TEST_BREAK=<name>` breaks one piece in the test's own database (see
//! `jq_pg_test::sabotage`); the comment at each test records how the test then failed.

use jq_pg_test::{
    await_lock_wait, backend_pid, broken, claim, complete, hold_history, job_past_retention_in_history, sabotage, sqlstate,
    state, Client, TestDb,
};

fn one_i64(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).expect(sql).get(0)
}

fn one_text(c: &mut Client, sql: &str) -> String {
    c.query_one(sql, &[]).expect(sql).get(0)
}

/// The table holding job `id` (`jobs` for the hot table, else the history table), or None.
fn table_of(c: &mut Client, id: i64) -> Option<String> {
    c.query_opt("SELECT tableoid::regclass::text FROM jq.jobs WHERE id = $1", &[&id])
        .expect("table of a job")
        .map(|r| r.get(0))
}

/// Finished rows left in the hot table.
fn finished_in_hot_table(c: &mut Client) -> i64 {
    one_i64(c, "SELECT count(*) FROM ONLY jq.jobs WHERE state IN ('completed', 'dead', 'cancelled')")
}

// Negative control: JQ_TEST_BREAK=no_retire (the trigger jobs_retire dropped) made this test
// fail: the completed job stayed in the hot table (table "jq.jobs", not "jq.jobs_done_0").
#[test]
fn every_way_a_job_finishes_moves_it_out_of_the_hot_table() {
    let db = TestDb::new("history_moves");
    let mut c = db.connect();
    if broken("no_retire") {
        c.batch_execute("DROP TRIGGER jobs_retire ON jq.jobs").unwrap();
    }
    c.batch_execute(
        "SELECT jq.create_queue('h', max_lease_expiries => 0);
         SELECT jq.create_queue('one', max_attempts => 1)",
    )
    .unwrap();
    // jq.complete
    let done = one_i64(&mut c, "SELECT jq.enqueue('h', '{\"n\": 1}')");
    let j = claim(&mut c, "h", "w", 1, None).pop().unwrap();
    assert!(complete(&mut c, &j));
    assert_eq!(table_of(&mut c, done).as_deref(), Some("jq.jobs_done_0"));
    assert_eq!(state(&mut c, done).as_deref(), Some("completed"));
    // jq.complete_many
    let many: Vec<i64> = (0..3).map(|_| one_i64(&mut c, "SELECT jq.enqueue('h')")).collect();
    let js = claim(&mut c, "h", "w", 3, None);
    let ids: Vec<i64> = js.iter().map(|j| j.id).collect();
    let tokens: Vec<uuid::Uuid> = js.iter().map(|j| j.token).collect();
    let completed = c.query("SELECT jq.complete_many($1, $2)", &[&ids, &tokens]).unwrap();
    assert_eq!(completed.len(), 3);
    for id in &many {
        assert_eq!(table_of(&mut c, *id).as_deref(), Some("jq.jobs_done_0"), "job {id}");
    }
    // jq.fail with the last attempt: dead
    let dead = one_i64(&mut c, "SELECT jq.enqueue('one')");
    let j = claim(&mut c, "one", "w", 1, None).pop().unwrap();
    let s: String = c.query_one("SELECT jq.fail($1, $2, 'boom')::text", &[&j.id, &j.token]).unwrap().get(0);
    assert_eq!(s, "dead");
    assert_eq!(table_of(&mut c, dead).as_deref(), Some("jq.jobs_dead_0"));
    // jq.cancel of a ready job
    let cancelled = one_i64(&mut c, "SELECT jq.enqueue('h')");
    assert!(c.query_one("SELECT jq.cancel($1)", &[&cancelled]).unwrap().get::<_, bool>(0));
    assert_eq!(table_of(&mut c, cancelled).as_deref(), Some("jq.jobs_done_0"));
    // the reaper, with no lease expiry allowed: dead
    let reaped = one_i64(&mut c, "SELECT jq.enqueue('h')");
    claim(&mut c, "h", "w", 1, Some("1 second")).pop().unwrap();
    c.query_one("SELECT jq._reap(now() + interval '1 minute')", &[]).unwrap();
    assert_eq!(state(&mut c, reaped).as_deref(), Some("dead"));
    assert_eq!(table_of(&mut c, reaped).as_deref(), Some("jq.jobs_dead_0"));
    assert_eq!(finished_in_hot_table(&mut c), 0);
    // The job rows are kept whole: the completed job's payload and result survive the move.
    assert_eq!(one_text(&mut c, &format!("SELECT payload::text FROM jq.jobs WHERE id = {done}")), "{\"n\": 1}");
    // The execution history still sees the completions.
    let n = one_i64(&mut c, &format!("SELECT count(*) FROM jq.executions WHERE job_id = {done} AND outcome = 'completed'"));
    assert_eq!(n, 1);
}

// Negative control: JQ_TEST_BREAK=retained_never (jq._history_retained always false) made this
// test fail: a pass at +15 minutes truncated the table with a job still within its retention.
#[test]
fn a_history_table_is_truncated_only_when_every_job_is_past_retention() {
    let db = TestDb::new("history_truncate");
    let mut c = db.connect();
    if broken("retained_never") {
        sabotage(&mut c, "jq._history_retained(text,text,timestamptz)", "RETURN v_retained;", "RETURN false;", 1);
    }
    // Two queues share the done ring, whose retention is the longer one, 1 hour: it moves on
    // every 10 minutes. Their jobs finish now, into table 0.
    c.batch_execute(
        "SELECT jq.create_queue('s', retention => '0', history_retention => '0');
         SELECT jq.create_queue('t', retention => '1 hour', history_retention => '0')",
    )
    .unwrap();
    let mut ids = Vec::new();
    for q in ["s", "t"] {
        ids.push(c.query_one("SELECT jq.enqueue($1)", &[&q]).unwrap().get::<_, i64>(0));
        let j = claim(&mut c, q, "w", 1, None).pop().unwrap();
        assert!(complete(&mut c, &j));
    }
    // At +15 minutes the first pass moves the ring on from table 0 and the next looks at it:
    // the job of 's' is past its retention, that of 't' is not, so the table is kept whole.
    for _ in 0..2 {
        assert_eq!(one_i64(&mut c, "SELECT jq._prune(now() + interval '15 minutes')::int8"), 0);
    }
    assert_eq!(one_i64(&mut c, "SELECT (current <> 0)::int::int8 FROM jq.history_rings WHERE ring = 'done'"), 1);
    assert_eq!(state(&mut c, ids[0]).as_deref(), Some("completed"));
    assert_eq!(state(&mut c, ids[1]).as_deref(), Some("completed"));
    // An hour and a minute later both are past retention: the table is truncated, both go.
    assert_eq!(one_i64(&mut c, "SELECT jq._prune(now() + interval '61 minutes')::int8"), 2);
    assert_eq!(state(&mut c, ids[0]), None);
    assert_eq!(state(&mut c, ids[1]), None);
    assert_eq!(one_i64(&mut c, "SELECT count(*) FROM jq.jobs_done_0"), 0);
}

// The current table of a ring is never truncated (completions write into it), even when all
// its jobs are past retention: it goes once the ring has moved on.
#[test]
fn the_current_table_is_left_alone() {
    let db = TestDb::new("history_current");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('k', retention => '0', history_retention => '0')").unwrap();
    let id = one_i64(&mut c, "SELECT jq.enqueue('k')");
    let j = claim(&mut c, "k", "w", 1, None).pop().unwrap();
    assert!(complete(&mut c, &j));
    // Not a minute yet since the ring's table became current: it stays current, and is kept.
    assert_eq!(one_i64(&mut c, "SELECT jq._prune(now() + interval '10 seconds')::int8"), 0);
    assert_eq!(state(&mut c, id).as_deref(), Some("completed"));
    // Two minutes on, the ring moves on; the table it left is truncated by the next pass.
    assert_eq!(one_i64(&mut c, "SELECT jq._prune(now() + interval '2 minutes')::int8"), 0);
    assert_eq!(state(&mut c, id).as_deref(), Some("completed"));
    assert_eq!(one_i64(&mut c, "SELECT jq._prune(now() + interval '2 minutes')::int8"), 1);
    assert_eq!(state(&mut c, id), None);
}

// Negative control: JQ_TEST_BREAK=truncate_waits (the NOWAIT taken out of the lock) made this
// test fail: jq._prune waited for the reader's lock and the statement_timeout of 5 s ended it
// (57014).
#[test]
fn a_history_table_in_use_is_left_for_the_next_pass_without_waiting() {
    let db = TestDb::new("history_in_use");
    let mut c = db.connect();
    if broken("truncate_waits") {
        sabotage(&mut c, "jq._truncate_history(timestamptz)", "ACCESS EXCLUSIVE MODE NOWAIT", "ACCESS EXCLUSIVE MODE", 1);
    }
    // The ring moves on from the job's table (the current table is never truncated).
    let id = job_past_retention_in_history(&mut c, "u");
    // A reporting query holds the history (its transaction keeps the tables' locks).
    let mut reader = db.connect();
    hold_history(&mut reader);
    c.batch_execute("SET statement_timeout = '5s'").unwrap();
    assert_eq!(one_i64(&mut c, "SELECT jq._prune(now() + interval '1 hour')::int8"), 0);
    assert_eq!(state(&mut c, id).as_deref(), Some("completed"));
    reader.batch_execute("COMMIT").unwrap();
    assert_eq!(one_i64(&mut c, "SELECT jq._prune(now() + interval '1 hour')::int8"), 1);
    assert_eq!(state(&mut c, id), None);
}

// An operator can see why the history does not shrink: jq.history_tables() says that a table is
// due and names the sessions whose locks keep it, prepared transactions included.
// Negative control: JQ_TEST_BREAK=due_never (truncation_due never set) made this test fail:
// "jobs_done_0 is past retention and not current, so it is due".
#[test]
fn history_tables_names_the_sessions_that_keep_a_due_table_from_truncation() {
    let db = TestDb::new("history_blocked_by");
    let mut c = db.connect();
    if broken("due_never") {
        sabotage(&mut c, "jq.history_tables(timestamptz)", "truncation_due := v_held AND", "truncation_due := false AND", 1);
    }
    c.batch_execute("SELECT jq.create_queue('v0', retention => '0', history_retention => '0'); SELECT jq.enqueue('v0')").unwrap();
    let j = claim(&mut c, "v0", "w", 1, None).pop().unwrap();
    assert!(complete(&mut c, &j));
    // Judged an hour on, as the maintenance passes below (the pass spares the table the ring
    // left for 10 s, which an instant an hour on is well past).
    let status = "SELECT truncation_due, truncation_blocked_by FROM jq.history_tables(now() + interval '1 hour') WHERE table_name = 'jobs_done_0'";
    // Table 0 is current: never due, whatever its jobs.
    let row = c.query_one(status, &[]).unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, Option<Vec<i32>>>(1)), (false, None), "the current table is never due");
    // The ring moves on; a reporting transaction then reads jq.jobs and holds every history table.
    let id = job_past_retention_in_history(&mut c, "v");
    let mut reader = db.connect();
    let reader_pid = hold_history(&mut reader);
    let row = c.query_one(status, &[]).unwrap();
    assert!(row.get::<_, bool>(0), "jobs_done_0 is past retention and not current, so it is due");
    assert_eq!(row.get::<_, Option<Vec<i32>>>(1), Some(vec![reader_pid]), "the reader's lock keeps it");
    // For 10 s after the ring moved on, the pass spares the table it left, and so does the call.
    let at = |after: &str| {
        format!("SELECT truncation_due FROM jq.history_tables((SELECT since FROM jq.history_rings WHERE ring = 'done') + interval '{after}')
                 WHERE table_name = 'jobs_done_0'")
    };
    assert!(!c.query_one(&at("9 seconds"), &[]).unwrap().get::<_, bool>(0), "the table the ring left is spared for 10 s");
    assert!(c.query_one(&at("11 seconds"), &[]).unwrap().get::<_, bool>(0), "and due after");
    // Each prepared transaction holding the table is named 0 (its locks have no pid).
    let mut preparer = db.connect();
    let gids: Vec<String> = (0..2).map(|i| format!("{}_prepared_{i}", db.name)).collect();
    for gid in &gids {
        hold_history(&mut preparer);
        preparer.batch_execute(&format!("PREPARE TRANSACTION '{gid}'")).unwrap();
    }
    let held: Option<Vec<i32>> = c.query_one(status, &[]).unwrap().get(1);
    for gid in &gids {
        preparer.batch_execute(&format!("ROLLBACK PREPARED '{gid}'")).unwrap();
    }
    assert_eq!(held, Some(vec![0, 0, reader_pid]), "two prepared transactions and the reader keep it");
    assert_eq!(sqlstate(c.query("SELECT * FROM jq.history_tables('infinity')", &[])), "22023", "at must be finite");
    // The pass leaves it; once the reader ends, nothing holds it and the next pass empties it.
    assert_eq!(one_i64(&mut c, "SELECT jq._prune(now() + interval '1 hour')::int8"), 0);
    reader.batch_execute("COMMIT").unwrap();
    let row = c.query_one(status, &[]).unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, Option<Vec<i32>>>(1)), (true, Some(vec![])), "due, and nothing holds it");
    assert_eq!(one_i64(&mut c, "SELECT jq._prune(now() + interval '1 hour')::int8"), 2);
    assert_eq!(state(&mut c, id), None);
    let row = c.query_one(status, &[]).unwrap();
    assert!(!row.get::<_, bool>(0), "an empty table is not due");
}

// Like the pass, jq.history_tables() never waits for a lock: with an exclusive lock queued behind
// a reader's (a TRUNCATE, a LOCK TABLE), the table is reported undecided, with the reader.
// Negative control: JQ_TEST_BREAK=history_waits (NOWAIT taken out) made this test fail: the call
// waited behind the queued lock until its statement_timeout of 5 s ended it (57014).
#[test]
fn history_tables_never_waits_for_a_lock() {
    let db = TestDb::new("history_no_wait");
    let mut c = db.connect();
    if broken("history_waits") {
        sabotage(&mut c, "jq.history_tables(timestamptz)", "IN ACCESS SHARE MODE NOWAIT", "IN ACCESS SHARE MODE", 1);
    }
    job_past_retention_in_history(&mut c, "n");
    let mut reader = db.connect();
    let reader_pid = hold_history(&mut reader);
    let mut locker = db.connect();
    let locker_pid = backend_pid(&mut locker);
    let queued = std::thread::spawn(move || {
        locker.batch_execute("SET lock_timeout = '60s'; BEGIN; LOCK TABLE jq.jobs_done_0 IN ACCESS EXCLUSIVE MODE; ROLLBACK")
    });
    await_lock_wait(&mut c, locker_pid, "the LOCK TABLE never queued behind the reader", || queued.is_finished());
    if queued.is_finished() {
        panic!("the LOCK TABLE ended instead of queueing: {:?}", queued.join());
    }
    c.batch_execute("SET statement_timeout = '5s'").unwrap();
    let row = c
        .query_one("SELECT truncation_due, truncation_blocked_by FROM jq.history_tables(now() + interval '1 hour')
                    WHERE table_name = 'jobs_done_0'", &[])
        .expect("jq.history_tables() answers without waiting");
    assert_eq!((row.get::<_, Option<bool>>(0), row.get::<_, Option<Vec<i32>>>(1)), (None, Some(vec![reader_pid])),
               "undecided, and the reader holds it");
    reader.batch_execute("COMMIT").unwrap();
    queued.join().unwrap().expect("the queued lock is granted once the reader ends");
}

// Negative control: JQ_TEST_BREAK=truncate_in_block (the transaction-block check taken out)
// made this test fail: the pass inside BEGIN truncated the table (it returned 1, not 0), and
// would have held it, and every reader of jq.jobs such as the jq.fail below, until COMMIT.
#[test]
fn a_maintenance_pass_in_an_open_transaction_truncates_nothing() {
    let db = TestDb::new("history_in_block");
    let mut c = db.connect();
    if broken("truncate_in_block") {
        sabotage(&mut c, "jq._truncate_history(timestamptz)", " OR jq._in_transaction_block()", "", 1);
    }
    c.batch_execute("SELECT jq.create_queue('b', retention => '0', history_retention => '0', max_attempts => 1)").unwrap();
    let id = one_i64(&mut c, "SELECT jq.enqueue('b')");
    let j = claim(&mut c, "b", "w", 1, None).pop().unwrap();
    assert!(complete(&mut c, &j));
    // The ring moves on, outside any block (the current table is never truncated).
    assert_eq!(one_i64(&mut c, "SELECT jq._prune(now() + interval '1 hour')::int8"), 0);
    let mut open = db.connect();
    open.batch_execute("BEGIN").unwrap();
    assert_eq!(one_i64(&mut open, "SELECT jq._prune(now() + interval '1 hour')::int8"), 0);
    // Meanwhile another session's failure reads jq.jobs (and so every history table).
    one_i64(&mut c, "SELECT jq.enqueue('b')");
    let j = claim(&mut c, "b", "w", 1, None).pop().unwrap();
    c.batch_execute("SET statement_timeout = '5s'").unwrap();
    let s: String = c.query_one("SELECT jq.fail($1, $2, 'x')::text", &[&j.id, &j.token]).unwrap().get(0);
    assert_eq!(s, "dead");
    open.batch_execute("COMMIT").unwrap();
    assert_eq!(state(&mut c, id).as_deref(), Some("completed"));
    // Out of the block, the pass truncates (it also prunes the failure's execution row).
    c.query_one("SELECT jq._prune(now() + interval '1 hour')", &[]).unwrap();
    assert_eq!(state(&mut c, id), None);
}

// Negative control: JQ_TEST_BREAK=rotate_into_full (the emptiness check of the next table
// dropped) made this test fail: the done ring moved on into table 1, which still held a job.
#[test]
fn a_ring_moves_on_only_into_an_empty_table() {
    let db = TestDb::new("history_rotate");
    let mut c = db.connect();
    if broken("rotate_into_full") {
        sabotage(&mut c, "jq._rotate_history(timestamptz)", "CONTINUE WHEN NOT v_empty;", "", 1);
    }
    // A ring's span is its longest retention: 6 minutes here, so it moves on every minute.
    c.batch_execute("SELECT jq.create_queue('r', retention => '6 minutes', history_retention => '0')").unwrap();
    let current = |c: &mut Client| -> i64 {
        one_i64(c, "SELECT coalesce((SELECT current::int8 FROM jq.history_rings WHERE ring = 'done'), 0)")
    };
    assert_eq!(current(&mut c), 0);
    c.query_one("SELECT jq._prune(now() + interval '2 minutes')", &[]).unwrap();
    assert_eq!(current(&mut c), 1, "table 1 is empty and table 0 was written for over a minute");
    let id = one_i64(&mut c, "SELECT jq.enqueue('r')");
    let j = claim(&mut c, "r", "w", 1, None).pop().unwrap();
    assert!(complete(&mut c, &j));
    assert_eq!(table_of(&mut c, id).as_deref(), Some("jq.jobs_done_1"));
    // A reporting transaction reads the history and stays open: table 1 cannot be truncated
    // while it does, long after its job is past retention.
    let mut reader = db.connect();
    reader.batch_execute("BEGIN; SELECT count(*) FROM jq.jobs").unwrap();
    // The ring goes round, a table a pass, and comes back to table 1 still holding its job.
    for minutes in 2..=8 {
        c.query_one(&format!("SELECT jq._prune(now() + interval '{}0 minutes')", minutes), &[]).unwrap();
    }
    assert_eq!(current(&mut c), 0, "the ring went round to the table before table 1");
    c.query_one("SELECT jq._prune(now() + interval '90 minutes')", &[]).unwrap();
    assert_eq!(current(&mut c), 0, "table 1 still holds a job");
    reader.batch_execute("COMMIT").unwrap();
    assert_eq!(state(&mut c, id).as_deref(), Some("completed"));
}

// Negative control: JQ_TEST_BREAK=retry_keeps_history (jq.retry's delete from the history
// limited to ONLY jq.jobs) made this test fail: jq.retry returned false for the dead job.
#[test]
fn a_retried_dead_job_comes_back_to_the_hot_table_once() {
    let db = TestDb::new("history_retry");
    let mut c = db.connect();
    if broken("retry_keeps_history") {
        sabotage(&mut c, "jq.retry(bigint,bigint)", "DELETE FROM jq.jobs j", "DELETE FROM ONLY jq.jobs j", 1);
    }
    c.batch_execute("SELECT jq.create_queue('d', max_attempts => 1)").unwrap();
    let id = one_i64(&mut c, "SELECT jq.enqueue('d')");
    let j = claim(&mut c, "d", "w", 1, None).pop().unwrap();
    c.query_one("SELECT jq.fail($1, $2, 'no')", &[&j.id, &j.token]).unwrap();
    assert_eq!(table_of(&mut c, id).as_deref(), Some("jq.jobs_dead_0"));
    assert!(c.query_one("SELECT jq.retry($1)", &[&id]).unwrap().get::<_, bool>(0));
    assert_eq!(table_of(&mut c, id).as_deref(), Some("jq.jobs"));
    assert_eq!(state(&mut c, id).as_deref(), Some("ready"));
    assert!(!c.query_one("SELECT jq.retry($1)", &[&id]).unwrap().get::<_, bool>(0));
    let j = claim(&mut c, "d", "w", 1, None).pop().expect("the retried job is claimable");
    assert_eq!(j.id, id);
}

// The enqueue, the claim and the heartbeat read the hot table alone, never the history tables
// (ONLY jq.jobs: a query of jq.jobs would lock every history table on every call, past the
// 16 fast-path locks of a backend). Negative control: JQ_TEST_BREAK=claim_reads_history (the
// claim's selection of jobs from jq.jobs instead of ONLY jq.jobs) made this test fail: the
// claim locked the history tables.
#[test]
fn hot_paths_read_only_the_hot_table() {
    let db = TestDb::new("history_plans");
    let mut c = db.connect();
    if broken("claim_reads_history") {
        sabotage(&mut c, "jq.claim(text,text,integer,interval,interval,bigint)", "FROM ONLY jq.jobs p", "FROM jq.jobs p", 2);
    }
    c.batch_execute("SELECT jq.create_queue('p')").unwrap();
    // The relations the hot statements lock: after a claim and a completion in one
    // transaction, no history table is locked.
    c.batch_execute("BEGIN").unwrap();
    one_i64(&mut c, "SELECT jq.enqueue('p')");
    let j = claim(&mut c, "p", "w", 1, None).pop().unwrap();
    c.query_one("SELECT jq.heartbeat($1, $2)", &[&j.id, &j.token]).unwrap();
    let locked = one_i64(
        &mut c,
        "SELECT count(*) FROM pg_locks l JOIN pg_class r ON r.oid = l.relation
         WHERE l.pid = pg_backend_pid() AND r.relname ~ '^jobs_(done|dead)_[0-9]'",
    );
    c.batch_execute("COMMIT").unwrap();
    assert_eq!(locked, 0, "a hot path locked history tables");
}

// Negative control: JQ_TEST_BREAK=cancel_dead_hot_only (jq.cancel_dead's delete limited to ONLY
// jq.jobs, where no dead job is) made this test fail: it cancelled 0 of the 2 dead jobs.
#[test]
fn cancelling_dead_jobs_moves_them_to_the_done_ring() {
    let db = TestDb::new("history_cancel_dead");
    let mut c = db.connect();
    if broken("cancel_dead_hot_only") {
        sabotage(&mut c, "jq.cancel_dead(text,text,text,text,integer,bigint)", "DELETE FROM jq.jobs j", "DELETE FROM ONLY jq.jobs j", 1);
    }
    c.batch_execute("SELECT jq.create_queue('cd', max_attempts => 1)").unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(one_i64(&mut c, "SELECT jq.enqueue('cd', '{\"keep\": true}')"));
        let j = claim(&mut c, "cd", "w", 1, None).pop().unwrap();
        c.query_one("SELECT jq.fail($1, $2, 'broken')", &[&j.id, &j.token]).unwrap();
    }
    assert_eq!(one_i64(&mut c, "SELECT jq.cancel_dead('cd')::int8"), 2);
    for id in ids {
        assert_eq!(table_of(&mut c, id).as_deref(), Some("jq.jobs_done_0"), "job {id}");
        assert_eq!(state(&mut c, id).as_deref(), Some("cancelled"));
        assert_eq!(one_text(&mut c, &format!("SELECT last_error FROM jq.jobs WHERE id = {id}")), "broken");
    }
    assert_eq!(finished_in_hot_table(&mut c), 0);
}

// Negative control: JQ_TEST_BREAK=complete_wrong_slot (jq.complete's branch for table 5 of the
// done ring writing to table 4) made this test fail: at slot 5 the completed job was in
// "jq.jobs_done_4". Each table of each ring is named by hand in an IF chain (jq.complete,
// jq._archive): this test sends jobs down every branch.
#[test]
fn every_table_of_both_rings_gets_the_jobs_finished_while_it_is_current() {
    let db = TestDb::new("history_every_slot");
    let mut c = db.connect();
    if broken("complete_wrong_slot") {
        sabotage(&mut c, "jq.complete(bigint,uuid,jsonb)", "INSERT INTO jq.jobs_done_5 VALUES", "INSERT INTO jq.jobs_done_4 VALUES", 1);
    }
    // Both rings span 6 minutes, so each moves on once its table was written for a minute.
    c.batch_execute(
        "SELECT jq.create_queue('s', max_attempts => 1, retention => '6 minutes',
                                dead_retention => '6 minutes', history_retention => '0')",
    )
    .unwrap();
    let current = |c: &mut Client, ring: &str| -> i64 {
        c.query_one("SELECT coalesce((SELECT current::int8 FROM jq.history_rings WHERE ring = $1), 0)", &[&ring])
            .unwrap()
            .get(0)
    };
    for slot in 0..8i64 {
        assert_eq!((current(&mut c, "done"), current(&mut c, "dead")), (slot, slot));
        let ids: Vec<i64> = (0..4).map(|_| one_i64(&mut c, "SELECT jq.enqueue('s')")).collect();
        let js = claim(&mut c, "s", "w", 4, None);
        assert_eq!(js.len(), 4);
        // jq.complete, jq.complete_many, jq.fail (dead: one attempt), and jq.cancel of a job
        // released back to ready (the retire trigger's path).
        assert!(complete(&mut c, &js[0]));
        let done_many = c.query("SELECT jq.complete_many($1, $2)", &[&vec![js[1].id], &vec![js[1].token]]).unwrap();
        assert_eq!(done_many.len(), 1);
        c.query_one("SELECT jq.fail($1, $2, 'boom')", &[&js[2].id, &js[2].token]).unwrap();
        c.query_one("SELECT jq.release($1, $2)", &[&js[3].id, &js[3].token]).unwrap();
        c.query_one("SELECT jq.cancel($1)", &[&js[3].id]).unwrap();
        let expect = [("done", "completed"), ("done", "completed"), ("dead", "dead"), ("done", "cancelled")];
        for (j, (ring, st)) in js.iter().zip(expect) {
            assert_eq!(table_of(&mut c, j.id), Some(format!("jq.jobs_{ring}_{slot}")), "job {} ({st}) at slot {slot}", j.id);
            assert_eq!(state(&mut c, j.id).as_deref(), Some(st));
        }
        assert!(ids.iter().all(|id| js.iter().any(|j| j.id == *id)));
        c.query_one(&format!("SELECT jq._prune(now() + interval '{}0 minutes')", slot + 1), &[]).unwrap();
    }
    assert_eq!(finished_in_hot_table(&mut c), 0);
}
