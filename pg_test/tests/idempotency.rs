//! Idempotency keys with real connections: concurrent enqueues of one key make one job; an
//! uncommitted holder of the key makes the second enqueue wait, and its rollback or commit
//! decides what the second one gets; finished jobs free their key; keys in
//! jq.enqueue_many.
//!
//! Negative controls: `JQ_TEST_BREAK=<name>` makes a test replace one jq function in its own
//! database with a broken copy (see `jq_pg_test::sabotage`), and the test must then fail. The
//! comment at each test records what was broken and how the test failed.

use jq_pg_test::{backend_pid, broken, claim, complete, sabotage, sqlstate, waiting_on_lock, Client, TestDb};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const ENQUEUE: &str = "jq.enqueue(text,jsonb,text,timestamptz,interval,integer,integer,text,text,bigint)";
const KEYED_LOOP: &str = "        LOOP\n            INSERT INTO jq.jobs";

/// The broken variants of jq.enqueue shared by several tests.
fn apply_breaks(c: &mut Client) {
    if broken("enqueue_check_then_insert") {
        // Look for the key, insert if absent: no arbiter index, no ON CONFLICT.
        c.batch_execute("DROP INDEX jq.jobs_idempotency_idx").expect("drop the arbiter index");
        sabotage(
            c,
            ENQUEUE,
            KEYED_LOOP,
            "    SELECT j.id INTO v_id FROM jq.jobs j
      WHERE j.queue = enqueue.queue AND j.idempotency_key = enqueue.idempotency_key
        AND j.state IN ('scheduled', 'ready', 'running');
    IF v_id IS NOT NULL THEN RETURN v_id; END IF;
    INSERT INTO jq.jobs (queue, kind, state, priority, max_attempts, run_at, created_at, payload,
                         idempotency_key)
    SELECT t.name, coalesce(enqueue.kind, t.name), v_state, coalesce(enqueue.priority, 0),
           coalesce(enqueue.max_attempts, t.max_attempts), v_run_at, v_now, enqueue.payload,
           enqueue.idempotency_key
    FROM jq.queues t WHERE t.name = enqueue.queue
    RETURNING id INTO v_id;
    RETURN v_id;
    LOOP\n        INSERT INTO jq.jobs",
            1,
        );
    }
    if broken("enqueue_advisory_dedupe") {
        // Oban #1087: whoever cannot take the key's advisory lock assumes the holder inserts and
        // reports the duplicate it can see (none while the holder is uncommitted).
        sabotage(
            c,
            ENQUEUE,
            KEYED_LOOP,
            "    IF NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext(enqueue.queue || '/' || enqueue.idempotency_key)) THEN
        SELECT j.id INTO v_id FROM jq.jobs j
        WHERE j.queue = enqueue.queue AND j.idempotency_key = enqueue.idempotency_key;
        RETURN v_id;
    END IF;
    LOOP\n        INSERT INTO jq.jobs",
            1,
        );
    }
    if broken("enqueue_key_forever") {
        // The key stays taken by finished jobs too.
        sabotage(
            c,
            ENQUEUE,
            KEYED_LOOP,
            "    SELECT j.id INTO v_id FROM jq.jobs j
      WHERE j.queue = enqueue.queue AND j.idempotency_key = enqueue.idempotency_key
      ORDER BY j.id LIMIT 1;
    IF v_id IS NOT NULL THEN RETURN v_id; END IF;
    LOOP\n        INSERT INTO jq.jobs",
            1,
        );
    }
}

/// jq.enqueue with a key; the id it returned (None for a NULL) or the SQLSTATE and message.
fn enqueue_key(c: &mut Client, queue: &str, key: &str) -> Result<Option<i64>, (String, String)> {
    c.query_one("SELECT jq.enqueue($1, '{}', idempotency_key => $2)", &[&queue, &key])
        .map(|r| r.get(0))
        .map_err(|e| match e.as_db_error() {
            Some(d) => (d.code().code().to_string(), d.message().to_string()),
            None => (String::new(), e.to_string()),
        })
}

/// Ids of the unfinished jobs holding `key` in `queue`.
fn unfinished_with_key(c: &mut Client, queue: &str, key: &str) -> Vec<i64> {
    c.query(
        "SELECT id FROM jq.jobs WHERE queue = $1 AND idempotency_key = $2
           AND state IN ('scheduled', 'ready', 'running') ORDER BY id",
        &[&queue, &key],
    )
    .expect("jobs with key")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn job_exists(c: &mut Client, id: i64) -> bool {
    c.query_one("SELECT EXISTS (SELECT 1 FROM jq.jobs WHERE id = $1)", &[&id]).unwrap().get(0)
}

type EnqueueResult = Result<Option<i64>, (String, String)>;

/// S2: runs jq.enqueue(queue, key) on `s2` in a new thread (statement_timeout 30 s, so a
/// wait or loop that never ends fails the test instead of hanging it). Returns the thread,
/// which gives back the connection, and the result channel.
fn enqueue_in_thread(
    mut s2: Client,
    queue: &str,
    key: &str,
) -> (Receiver<EnqueueResult>, thread::JoinHandle<Client>) {
    let (tx, rx) = mpsc::channel();
    let (queue, key) = (queue.to_string(), key.to_string());
    let h = thread::spawn(move || {
        let _ = tx.send(enqueue_key(&mut s2, &queue, &key));
        s2
    });
    (rx, h)
}

/// Waits (bounded) until S2 (backend `pid`) waits for a lock; panics if it finishes first.
fn assert_blocked(rx: &Receiver<EnqueueResult>, admin: &mut Client, pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(r) => panic!("S2's enqueue did not wait for S1's uncommitted job with the key; it returned {r:?}"),
            Err(RecvTimeoutError::Timeout) => {
                if waiting_on_lock(admin, pid) {
                    return;
                }
            }
            Err(RecvTimeoutError::Disconnected) => panic!("S2's thread died"),
        }
        assert!(Instant::now() < deadline, "S2 neither finished nor waited for a lock within 30 s");
    }
}

/// S1 enqueues key `k` of queue `q` in a transaction it keeps open; S2 (`s2`, backend `pid2`)
/// enqueues the same key and must wait for S1 ([`assert_blocked`]); then S1 ends its transaction
/// with `end` (`COMMIT` or `ROLLBACK`). Returns S1's id, S2's result and S2's connection.
fn s2_waits_for_s1(s1: &mut Client, s2: Client, pid2: i32, admin: &mut Client, end: &str) -> (i64, EnqueueResult, Client) {
    s1.batch_execute("BEGIN").unwrap();
    let id1 = enqueue_key(s1, "q", "k").unwrap().expect("S1's id");
    let (rx, h) = enqueue_in_thread(s2, "q", "k");
    assert_blocked(&rx, admin, pid2);
    s1.batch_execute(end).unwrap();
    let got = rx.recv().expect("S2's result");
    (id1, got, h.join().unwrap())
}

fn session(db: &TestDb) -> (Client, i32) {
    let mut c = db.connect();
    c.batch_execute("SET statement_timeout = '30s'").unwrap();
    let pid = backend_pid(&mut c);
    (c, pid)
}

// Negative control: JQ_TEST_BREAK=enqueue_check_then_insert (arbiter index dropped, enqueue
// looks the key up and inserts when absent) made this test fail within its first three rounds
// (keys k0..k2) in each of eight runs: some of the 10 concurrent enqueues returned another id,
// so two or more jobs had the key. JQ_TEST_BREAK=enqueue_advisory_dedupe made it fail within
// its first two rounds in each of eight runs: 1 to 9 of the enqueues returned NULL.
#[test]
fn ten_connections_enqueueing_one_key_at_once_get_the_same_id_and_make_one_job() {
    let db = TestDb::new("idem_conc");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    const ROUNDS: usize = 20;
    let start = Arc::new(Barrier::new(10));
    let handles: Vec<_> = (0..10)
        .map(|_| {
            let mut s = db.connect();
            let start = start.clone();
            thread::spawn(move || {
                (0..ROUNDS)
                    .map(|round| {
                        start.wait();
                        enqueue_key(&mut s, "q", &format!("k{round}"))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<Vec<EnqueueResult>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for round in 0..ROUNDS {
        let ids: Vec<&EnqueueResult> = results.iter().map(|r| &r[round]).collect();
        let first = match ids[0] {
            Ok(Some(id)) => *id,
            _ => panic!("round {round}: concurrent enqueues of one key returned {ids:?}"),
        };
        assert!(
            ids.iter().all(|r| **r == Ok(Some(first))),
            "round {round}: concurrent enqueues of one key returned {ids:?}"
        );
        let key = format!("k{round}");
        assert_eq!(unfinished_with_key(&mut c, "q", &key), vec![first], "round {round}");
        let rows: i64 = c
            .query_one("SELECT count(*) FROM jq.jobs WHERE idempotency_key = $1", &[&key])
            .unwrap()
            .get(0);
        assert_eq!(rows, 1, "round {round}: rows with the key");
    }
}

// Scenario (the dedupe lock holder rolled back, so no job existed). Negative controls:
// JQ_TEST_BREAK=enqueue_advisory_dedupe (Oban's advisory-lock dedupe) made this test fail: S2
// did not wait and returned NULL while S1 was uncommitted, so after S1's rollback no job had
// the key. JQ_TEST_BREAK=enqueue_check_then_insert made it fail the same way it fails the
// commit variant below: S2 did not wait (it inserted a second job at once).
#[test]
fn enqueue_waiting_on_an_uncommitted_key_that_rolls_back_inserts_a_new_job() {
    let db = TestDb::new("q06_rb");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    let (mut s1, _) = session(&db);
    let (s2, pid2) = session(&db);

    let (id1, got, _) = s2_waits_for_s1(&mut s1, s2, pid2, &mut c, "ROLLBACK");

    let id2 = got.expect("S2's enqueue after S1's rollback").expect("S2 must get an id, not NULL");
    assert_ne!(id2, id1, "S2 returned the rolled-back job's id");
    assert!(!job_exists(&mut c, id1), "the rolled-back job exists");
    assert_eq!(unfinished_with_key(&mut c, "q", "k"), vec![id2], "exactly one unfinished job with the key");
}

// Scenario, commit variant. Negative control: JQ_TEST_BREAK=enqueue_check_then_insert
// made this test fail: S2 did not wait for S1 and inserted a second job with the key.
#[test]
fn enqueue_waiting_on_an_uncommitted_key_that_commits_returns_the_committed_id() {
    let db = TestDb::new("q06_commit");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    let (mut s1, _) = session(&db);
    let (s2, pid2) = session(&db);

    let (id1, got, _) = s2_waits_for_s1(&mut s1, s2, pid2, &mut c, "COMMIT");

    assert_eq!(got, Ok(Some(id1)), "S2 must return S1's committed id");
    assert_eq!(unfinished_with_key(&mut c, "q", "k"), vec![id1]);
}

/// S2 in REPEATABLE READ gets `key`: either `want` or a retryable 40001, never another id or
/// NULL. After a 40001 it retries in a new transaction, as a client should. Commits S2's
/// transaction and returns what its first attempt got.
fn repeatable_read_outcome(s2: &mut Client, got: EnqueueResult, want: i64) -> EnqueueResult {
    match &got {
        Ok(id) => {
            assert_eq!(*id, Some(want), "S2 under REPEATABLE READ must return S1's id or raise 40001");
            s2.batch_execute("COMMIT").unwrap();
        }
        Err((code, msg)) => {
            assert_eq!(code, "40001", "S2 under REPEATABLE READ failed with something not retryable: {msg}");
            s2.batch_execute("ROLLBACK").unwrap();
            s2.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
            let retried = enqueue_key(s2, "q", "k");
            assert_eq!(retried, Ok(Some(want)), "S2's retry after 40001");
            s2.batch_execute("COMMIT").unwrap();
        }
    }
    got
}

// Scenario, REPEATABLE READ variant (a snapshot that cannot see the conflicting row).
// Negative control: JQ_TEST_BREAK=enqueue_advisory_dedupe made this test fail: S2 did not wait
// for S1 and returned NULL (a "duplicate" pointing to no row it could see).
// JQ_TEST_BREAK=enqueue_check_then_insert made it fail: S2 did not wait and inserted a second
// job with the key.
#[test]
fn enqueue_under_repeatable_read_with_a_snapshot_older_than_the_keys_commit_returns_its_id_or_40001() {
    let db = TestDb::new("q06_rr");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    let (mut s1, _) = session(&db);
    let (mut s2, pid2) = session(&db);

    // a) S2's snapshot is taken, S1 enqueues the key, S2 enqueues it and waits, S1 commits.
    s2.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM jq.jobs").unwrap();
    let (id1, got, mut s2) = s2_waits_for_s1(&mut s1, s2, pid2, &mut c, "COMMIT");
    let first = repeatable_read_outcome(&mut s2, got, id1);
    eprintln!("REPEATABLE READ, waited for S1's commit: {first:?}");
    assert_eq!(unfinished_with_key(&mut c, "q", "k"), vec![id1]);

    // b) S1 commits after S2's snapshot but before S2's enqueue (no wait).
    c.execute("SELECT jq.cancel($1)", &[&id1]).unwrap();
    s2.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM jq.jobs").unwrap();
    let id1 = enqueue_key(&mut s1, "q", "k").unwrap().expect("S1's id");
    let got = enqueue_key(&mut s2, "q", "k");
    let second = repeatable_read_outcome(&mut s2, got, id1);
    eprintln!("REPEATABLE READ, S1 committed before: {second:?}");
    assert_eq!(unfinished_with_key(&mut c, "q", "k"), vec![id1]);

    // c) S1 rolls back: S2 (REPEATABLE READ) inserts its own job, no error.
    c.execute("SELECT jq.cancel($1)", &[&id1]).unwrap();
    s2.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM jq.jobs").unwrap();
    let (gone, got, mut s2) = s2_waits_for_s1(&mut s1, s2, pid2, &mut c, "ROLLBACK");
    let id2 = got.expect("S2 after S1's rollback").expect("an id, not NULL");
    s2.batch_execute("COMMIT").unwrap();
    assert_ne!(id2, gone);
    assert!(job_exists(&mut c, id2), "S2's id points to no row");
    assert_eq!(unfinished_with_key(&mut c, "q", "k"), vec![id2]);
}

// Negative control: JQ_TEST_BREAK=enqueue_key_forever (the key lookup also matches finished
// jobs) made this test fail: the enqueue after completion returned the completed job's id.
#[test]
fn key_of_a_finished_job_is_free_again() {
    let db = TestDb::new("idem_free");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    let id1 = enqueue_key(&mut c, "q", "k").unwrap().unwrap();
    assert_eq!(enqueue_key(&mut c, "q", "k"), Ok(Some(id1)), "the key is taken while the job is unfinished");
    let mut w = db.connect();
    let j = claim(&mut w, "q", "w", 1, None).pop().unwrap();
    assert_eq!(j.id, id1);
    assert_eq!(enqueue_key(&mut c, "q", "k"), Ok(Some(id1)), "the key is taken while the job runs");
    assert!(complete(&mut w, &j));

    let id2 = enqueue_key(&mut c, "q", "k").unwrap().unwrap();
    assert_ne!(id2, id1, "the key of a completed job must be free again");
    assert_eq!(unfinished_with_key(&mut c, "q", "k"), vec![id2]);

    // Cancelled and dead jobs free their key too.
    let cancelled: bool = c.query_one("SELECT jq.cancel($1)", &[&id2]).unwrap().get(0);
    assert!(cancelled);
    let id3 = enqueue_key(&mut c, "q", "k").unwrap().unwrap();
    assert!(id3 != id1 && id3 != id2, "the key of a cancelled job must be free again");
    c.execute("SELECT jq.create_queue('once', max_attempts => 1)", &[]).unwrap();
    let d1 = enqueue_key(&mut c, "once", "k").unwrap().unwrap();
    let j = claim(&mut w, "once", "w", 1, None).pop().unwrap();
    let st: String = w.query_one("SELECT jq.fail($1, $2, 'x')::text", &[&j.id, &j.token]).unwrap().get(0);
    assert_eq!(st, "dead");
    let d2 = enqueue_key(&mut c, "once", "k").unwrap().unwrap();
    assert_ne!(d2, d1, "the key of a dead job must be free again");
    // Retrying the dead job while a new job holds its key would make two unfinished jobs with
    // one key: refused with 23505.
    assert_eq!(sqlstate(c.query_one("SELECT jq.retry($1)", &[&d1])), "23505");
    assert_eq!(unfinished_with_key(&mut c, "once", "k"), vec![d2]);
}

// Negative control: JQ_TEST_BREAK=enqueue_many_drops_keys (jq.enqueue_many passes NULL keys to
// jq.enqueue) made this test fail: the duplicate key in the batch got an id of its own.
#[test]
fn enqueue_many_with_keys_returns_one_id_per_element_and_the_same_id_for_a_repeated_key() {
    let db = TestDb::new("idem_many");
    let mut c = db.connect();
    if broken("enqueue_many_drops_keys") {
        sabotage(
            &mut c,
            "jq.enqueue_many(text,jsonb,text,timestamptz,interval,integer,integer,boolean,bigint)",
            "r.priority, r.max_attempts, r.idempotency_key,",
            "r.priority, r.max_attempts, NULL,",
            1,
        );
    }
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    let existing = enqueue_key(&mut c, "q", "old").unwrap().unwrap();
    let specs = r#"[{"payload": 1, "idempotency_key": "a"},
                    {"payload": 2, "idempotency_key": "b"},
                    {"payload": 3, "idempotency_key": "a"},
                    {"payload": 4},
                    {"payload": 5, "idempotency_key": "old"},
                    {"payload": 6}]"#;
    let ids: Vec<i64> = c
        .query("SELECT jq.enqueue_many('q', $1::text::jsonb, specs => true)", &[&specs])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len(), 6, "one id per element: {ids:?}");
    assert_eq!(ids[2], ids[0], "a key repeated in the batch returns the first element's id: {ids:?}");
    assert_eq!(ids[4], existing, "a key held by an earlier job returns that job's id: {ids:?}");
    let distinct: std::collections::HashSet<i64> = [ids[0], ids[1], ids[3], ids[5], existing].into_iter().collect();
    assert_eq!(distinct.len(), 5, "the other elements are jobs of their own: {ids:?}");
    let rows: i64 = c.query_one("SELECT count(*) FROM jq.jobs WHERE queue = 'q'", &[]).unwrap().get(0);
    assert_eq!(rows, 5, "jobs in the queue: the earlier one and four new ones");
    let payload: String = c
        .query_one("SELECT payload::text FROM jq.jobs WHERE id = $1", &[&ids[0]])
        .unwrap()
        .get(0);
    assert_eq!(payload, "1", "the first element with the key wins");
    for (key, id) in [("a", ids[0]), ("b", ids[1]), ("old", existing)] {
        assert_eq!(unfinished_with_key(&mut c, "q", key), vec![id], "key {key}");
    }
}
