//! A queue being dropped races enqueues, claims, fails, admin calls and another drop: no deadlock, no stray job.

use jq_pg_test::{broken, sabotage, sqlstate, TestDb};
use std::thread;
use std::time::Duration;

const ENQUEUE: &str = "jq.enqueue(text,jsonb,text,timestamptz,interval,integer,integer,text,text,bigint)";

/// A transaction under REPEATABLE READ whose snapshot predates a committed jq.drop_queue must
/// not enqueue into the dropped queue: 40001, and no job is left behind. A drop from such a
/// transaction is refused (25000). Broken variant `enqueue_no_snapshot_lock` (no FOR KEY SHARE
/// outside READ COMMITTED): the enqueue returned an id and an orphan job stayed in jq.jobs.
#[test]
fn enqueue_under_an_older_snapshot_never_leaves_a_job_in_a_dropped_queue() {
    let db = TestDb::new("rrdrop");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('gone')").unwrap();
    if broken("enqueue_no_snapshot_lock") {
        sabotage(&mut c, ENQUEUE, "        PERFORM 1 FROM jq.queues t WHERE t.name = enqueue.queue FOR KEY SHARE;\n", "", 1);
    }
    let mut a = db.connect();
    a.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM jq.queues").unwrap();
    c.batch_execute("SELECT jq.drop_queue('gone')").unwrap();
    let code = sqlstate(a.query_one("SELECT jq.enqueue('gone', '{\"orphan\":true}')", &[]));
    assert_eq!(code, "40001", "the enqueue must fail as a serialization failure");
    a.batch_execute("ROLLBACK").unwrap();
    let orphans: i64 = c.query_one("SELECT count(*) FROM jq.jobs WHERE queue = 'gone'", &[]).unwrap().get(0);
    assert_eq!(orphans, 0);

    c.batch_execute("SELECT jq.create_queue('kept')").unwrap();
    let mut b = db.connect();
    b.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
    assert_eq!(sqlstate(b.query_one("SELECT jq.drop_queue('kept')", &[])), "25000");
    b.batch_execute("ROLLBACK").unwrap();
}

/// jq.drop_queue takes the jobs table lock before the queue row, the order every other jq
/// function ends up in (a capped claim writes jq.jobs before it locks its queue row), so a
/// transaction that wrote jobs and then claims from a capped queue being dropped does not
/// deadlock with the drop: the drop waits, then goes on. Broken variant `drop_row_lock_first`
/// (queue row locked before the table lock): the drop failed with 40P01.
#[test]
fn dropping_a_capped_queue_does_not_deadlock_with_a_transaction_claiming_from_it() {
    let db = TestDb::new("dropdl");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('other'); SELECT jq.create_queue('capd', max_concurrency => 2);
         SELECT jq.enqueue('capd');",
    )
    .unwrap();
    if broken("drop_row_lock_first") {
        sabotage(
            &mut c,
            "jq.drop_queue(text,boolean,bigint)",
            "    PERFORM 1 FROM jq.queues t WHERE t.name = drop_queue.name;\n",
            "    PERFORM 1 FROM jq.queues t WHERE t.name = drop_queue.name FOR UPDATE;\n",
            1,
        );
    }
    let mut t1 = db.connect();
    t1.batch_execute("SET deadlock_timeout = '100ms'; BEGIN; SELECT jq.enqueue('other');").unwrap();
    let dropper = {
        let mut t2 = db.connect();
        thread::spawn(move || {
            t2.batch_execute("SET deadlock_timeout = '100ms'").unwrap();
            t2.query_one("SELECT jq.drop_queue('capd', force => true)", &[]).map(|r| r.get::<_, bool>(0))
        })
    };
    thread::sleep(Duration::from_millis(300)); // the drop is now waiting for t1
    let claimed = t1.query("SELECT id FROM jq.claim('capd', 'w')", &[]);
    let t1_result = match claimed {
        Ok(rows) => {
            t1.batch_execute("COMMIT").unwrap();
            Ok(rows.len())
        }
        Err(e) => {
            t1.batch_execute("ROLLBACK").unwrap();
            Err(e)
        }
    };
    let drop_result = dropper.join().unwrap();
    let t1_code = t1_result.as_ref().err().and_then(|e| e.code().map(|s| s.code().to_string()));
    let drop_code = drop_result.as_ref().err().and_then(|e| e.code().map(|s| s.code().to_string()));
    assert_eq!((t1_code, drop_code), (None, None), "claim {t1_result:?}, drop {drop_result:?}");
    assert_eq!(t1_result.unwrap(), 1);
    assert!(drop_result.unwrap());
}

/// jq.fail row-locks its job before it writes: a forced drop must wait for it rather than take
/// a table lock that jq.fail's row lock does not conflict with, then wait for that row while
/// jq.fail waits for the table. Another drop held open lines the three up deterministically.
/// Broken variant `drop_share_row_exclusive` (the table lock that ignores row locks): the
/// fail or the drop died with 40P01.
#[test]
fn a_forced_drop_does_not_deadlock_with_a_worker_failing_its_job() {
    let db = TestDb::new("faildrop");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('qa'); SELECT jq.create_queue('qb');
         SELECT jq.enqueue('qb');",
    )
    .unwrap();
    if broken("drop_share_row_exclusive") {
        sabotage(&mut c, "jq.drop_queue(text,boolean,bigint)", "LOCK TABLE jq.jobs IN EXCLUSIVE MODE", "LOCK TABLE jq.jobs IN SHARE ROW EXCLUSIVE MODE", 1);
    }
    let row = c.query_one("SELECT id, lease_token FROM jq.claim('qb', 'w')", &[]).unwrap();
    let (id, token): (i64, uuid::Uuid) = (row.get(0), row.get(1));

    let mut holder = db.connect();
    holder.batch_execute("BEGIN; SELECT jq.drop_queue('qa');").unwrap();
    let spawn = |sql: String| {
        let mut conn = db.connect();
        thread::spawn(move || {
            conn.batch_execute("SET deadlock_timeout = '100ms'").unwrap();
            conn.simple_query(&sql).map(|_| ()).map_err(|e| e.code().map(|s| s.code().to_string()))
        })
    };
    let dropper = spawn("SELECT jq.drop_queue('qb', force => true)".into());
    thread::sleep(Duration::from_millis(300));
    let failer = spawn(format!("SELECT jq.fail({id}, '{token}', 'boom')"));
    thread::sleep(Duration::from_millis(300));
    holder.batch_execute("COMMIT").unwrap();
    let (d, f) = (dropper.join().unwrap(), failer.join().unwrap());
    assert_eq!((d, f), (Ok(()), Ok(())), "drop and fail must both finish, without 40P01");
    let left: i64 = c.query_one("SELECT count(*) FROM jq.jobs", &[]).unwrap().get(0);
    assert_eq!(left, 0);
}

/// An admin transaction that pauses a queue and then writes its jobs must not deadlock with a
/// drop of that queue: jq.pause locks jq.jobs before the queue row, as the drop does. Broken
/// variant `pause_row_first` (pause without its table lock): one of the two died with 40P01.
#[test]
fn pausing_then_cancelling_does_not_deadlock_with_a_drop() {
    let db = TestDb::new("pausedrop");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('p1')").unwrap();
    let id: i64 = c.query_one("SELECT jq.enqueue('p1')", &[]).unwrap().get(0);
    if broken("pause_row_first") {
        sabotage(&mut c, "jq.pause(text,bigint)", "    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;\n", "", 1);
    }
    let mut admin = db.connect();
    admin.batch_execute("SET deadlock_timeout = '100ms'; BEGIN; SELECT jq.pause('p1');").unwrap();
    let dropper = {
        let mut d = db.connect();
        thread::spawn(move || {
            d.batch_execute("SET deadlock_timeout = '100ms'").unwrap();
            d.simple_query("SELECT jq.drop_queue('p1', force => true)")
                .map(|_| ())
                .map_err(|e| e.code().map(|s| s.code().to_string()))
        })
    };
    thread::sleep(Duration::from_millis(300));
    let cancel = admin
        .simple_query(&format!("SELECT jq.cancel({id})"))
        .map(|_| ())
        .map_err(|e| e.code().map(|s| s.code().to_string()));
    admin.batch_execute(if cancel.is_ok() { "COMMIT" } else { "ROLLBACK" }).unwrap();
    let dropped = dropper.join().unwrap();
    assert_eq!((cancel, dropped), (Ok(()), Ok(())), "no 40P01 on either side");
}

/// The same for every other admin call that locks a row jq.drop_queue locks or deletes:
/// jq.schedule and jq.alter_schedule(queue => ...) (the queue row, FOR KEY SHARE),
/// jq.alter_schedule and jq.unschedule (the schedule row, which a forced drop deletes), jq.grant
/// (the queue row) and jq.revoke (the grant row, which the drop deletes). Each locks jq.jobs
/// first, as the drop does. Broken variants, one per function, each without its table lock:
/// `schedule_row_first` (jq._lock_schedule_queue), `alter_schedule_row_first`,
/// `unschedule_row_first`, `grant_row_first`, `revoke_row_first`: the enqueue that follows in
/// the admin's transaction and the drop each waited for the other, and one died with 40P01.
#[test]
fn admin_calls_then_enqueuing_do_not_deadlock_with_a_drop() {
    let db = TestDb::new("admindrop");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('other'); SELECT jq.schedule('moved', '0 0 1 1 *', 'other');")
        .unwrap();
    if broken("schedule_row_first") {
        sabotage(&mut c, "jq._lock_schedule_queue(text)",
                 "    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;  -- before the queue row, as jq.drop_queue\n", "", 1);
    }
    if broken("alter_schedule_row_first") {
        sabotage(&mut c, "jq.alter_schedule(text,text,text,jsonb,text,text,integer,integer,text,text,boolean,bigint)",
                 "    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;\n    IF alter_schedule.queue IS NOT NULL THEN",
                 "    IF alter_schedule.queue IS NOT NULL THEN", 1);
    }
    if broken("unschedule_row_first") {
        sabotage(&mut c, "jq.unschedule(text,boolean,bigint)",
                 "    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;  -- before the schedule row, as jq.drop_queue (see jq.alter_schedule)\n",
                 "", 1);
    }
    if broken("grant_row_first") {
        sabotage(&mut c, "jq.grant(text,regrole,text,bigint)",
                 "    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;\n    -- Then one grant or revoke at a time",
                 "    -- Then one grant or revoke at a time", 1);
    }
    if broken("revoke_row_first") {
        sabotage(&mut c, "jq.revoke(text,regrole,text)",
                 "    LOCK TABLE ONLY jq.jobs IN ROW EXCLUSIVE MODE;\n    LOCK TABLE jq.queue_grants",
                 "    LOCK TABLE jq.queue_grants", 1);
    }
    let cases = [
        ("s1", "", "SELECT jq.schedule('daily', '0 0 * * *', 's1')"),
        ("s2", "", "SELECT jq.alter_schedule('moved', queue => 's2')"),
        ("s3", "SELECT jq.schedule('s3_daily', '0 0 * * *', 's3')", "SELECT jq.alter_schedule('s3_daily', cron => '0 1 * * *')"),
        ("s4", "SELECT jq.schedule('s4_daily', '0 0 * * *', 's4')", "SELECT jq.unschedule('s4_daily')"),
        ("s5", "", "SELECT jq.grant('s5', 'jq_worker', 'work')"),
        ("s6", "SELECT jq.grant('s6', 'jq_worker', 'work')", "SELECT jq.revoke('s6', 'jq_worker', 'work')"),
    ];
    let mut failures = Vec::new();
    for (q, setup, call) in cases {
        c.batch_execute(&format!("SELECT jq.create_queue('{q}'); {setup}")).unwrap();
        let mut admin = db.connect();
        admin.batch_execute(&format!("SET deadlock_timeout = '100ms'; BEGIN; {call};")).unwrap();
        let mut d = db.connect();
        let dropper_pid = jq_pg_test::backend_pid(&mut d);
        let dropper = {
            let q = q.to_string();
            thread::spawn(move || {
                d.batch_execute("SET deadlock_timeout = '100ms'").unwrap();
                d.simple_query(&format!("SELECT jq.drop_queue('{q}', force => true)"))
                    .map(|_| ())
                    .map_err(|e| e.code().map(|s| s.code().to_string()))
            })
        };
        // The drop waits (for the table with the fix, for a row without it) before the enqueue.
        jq_pg_test::await_lock_wait(&mut c, dropper_pid, &format!("{call}: the drop never waited"), || false);
        let enqueue = admin
            .simple_query(&format!("SELECT jq.enqueue('{q}')"))
            .map(|_| ())
            .map_err(|e| e.code().map(|s| s.code().to_string()));
        admin.batch_execute(if enqueue.is_ok() { "COMMIT" } else { "ROLLBACK" }).unwrap();
        let dropped = dropper.join().unwrap();
        let left: i64 = c.query_one("SELECT count(*) FROM jq.queues WHERE name = $1", &[&q]).unwrap().get(0);
        if (&enqueue, &dropped, left) != (&Ok(()), &Ok(()), 0) {
            failures.push(format!("{call}: enqueue {enqueue:?}, drop {dropped:?}, queue rows left {left}"));
        }
    }
    assert!(failures.is_empty(), "no 40P01 on either side, and the drop goes through after the transaction:\n{}",
            failures.join("\n"));
}

/// jq.drop_queue deletes the queue's history before it locks jq.jobs. A transaction that holds
/// jq.jobs already (here an earlier drop) and then drops a queue that another session is
/// dropping: that drop holds the history rows and waits for jq.jobs, and this one waited for the
/// history rows: a deadlock, one of them 40P01 (the earlier drop rolled back with it). The
/// history delete now skips rows another transaction holds (FOR UPDATE SKIP LOCKED; the other
/// drop deletes them, or jq._prune does as orphans). Negative control
/// JQ_TEST_BREAK=drop_history_waits (the plain DELETE): seen failing with 40P01.
#[test]
fn a_drop_does_not_deadlock_with_another_drop_of_the_same_queue() {
    let db = TestDb::new("dropdrop");
    let mut c = db.connect();
    if broken("drop_history_waits") {
        sabotage(&mut c, "jq.drop_queue(text,boolean,bigint)",
                 "    DELETE FROM jq.execution_log e\n    WHERE e.ctid = ANY (ARRAY(SELECT h.ctid FROM jq.execution_log h WHERE h.queue = drop_queue.name\n                              FOR UPDATE SKIP LOCKED));",
                 "    DELETE FROM jq.execution_log e WHERE e.queue = drop_queue.name;", 1);
    }
    c.batch_execute("SELECT jq.create_queue('a'); SELECT jq.create_queue('b'); SELECT jq.enqueue('b');").unwrap();
    // A history row for b: a failed attempt.
    let job = &jq_pg_test::claim(&mut c, "b", "w", 1, None)[0];
    c.execute("SELECT jq.fail($1, $2, 'boom')", &[&job.id, &job.token]).unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM jq.execution_log WHERE queue = 'b'", &[]).unwrap().get(0);
    assert_eq!(n, 1);
    let mut t1 = db.connect();
    t1.batch_execute("SET deadlock_timeout = '100ms'; BEGIN; SELECT jq.drop_queue('a', force => true);").unwrap();
    let mut t2 = db.connect();
    let pid = jq_pg_test::backend_pid(&mut t2);
    let other = thread::spawn(move || {
        t2.batch_execute("SET deadlock_timeout = '100ms'").unwrap();
        t2.simple_query("SELECT jq.drop_queue('b', force => true)")
            .map(|_| ())
            .map_err(|e| e.code().map(|s| s.code().to_string()))
    });
    // The other drop has deleted b's history and waits for jq.jobs.
    jq_pg_test::await_lock_wait(&mut c, pid, "the other drop never waited", || false);
    let mine = t1
        .simple_query("SELECT jq.drop_queue('b', force => true)")
        .map(|_| ())
        .map_err(|e| e.code().map(|s| s.code().to_string()));
    let committed = mine.is_ok() && t1.batch_execute("COMMIT").is_ok();
    if !committed {
        let _ = t1.batch_execute("ROLLBACK");
    }
    let theirs = other.join().unwrap();
    // Mine drops both queues; theirs then finds b gone (42704) or timed out on the lock (55P03).
    assert!(committed, "the transaction's second drop: {mine:?} (the other drop: {theirs:?})");
    assert!(matches!(theirs.as_ref().map_err(|e| e.as_deref()), Err(Some("42704")) | Err(Some("55P03"))),
            "the other drop: {theirs:?}");
    let left: i64 = c.query_one("SELECT count(*) FROM jq.queues WHERE name IN ('a', 'b')", &[]).unwrap().get(0);
    assert_eq!(left, 0);
}
