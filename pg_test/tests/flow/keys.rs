//! Per-key serialisation: one running job per key in enqueue order, slots passed on, blocked keys cost nothing.

use jq_pg_test::{broken, claim, complete, conninfo, sabotage, sqlstate, Client, NoTls, TestDb};
use std::thread;
use std::time::{Duration, Instant};

use super::{apply_breaks, enqueue_key, explain, index_scan, KEY_FILL};

/// 10 claimers drain 100 keys x 50 jobs (priorities mixed within each key). Checked afterwards
/// from the execution history: within a key no two executions overlap (a job's claim is stamped
/// after the previous job's completion was committed, so correct code gives finished < started)
/// and they started in id order (= enqueue order: all jobs share run_at), whatever the priority.
///
/// Negative control: JQ_TEST_BREAK=key_fill_ignores_limit (every blocked job of a key made
/// ready at once) fails with overlapping executions and jobs of a key started out of order.
#[test]
fn per_key_jobs_never_overlap_and_start_in_enqueue_order_under_ten_claimers() {
    let db = TestDb::new("flow_keys");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.batch_execute(
        "SELECT jq.create_queue('q');
         SELECT count(jq.enqueue('q', jsonb_build_object('g', g), priority => (g * 7) % 5,
                                 concurrency_key => 'k' || (g % 100)))
         FROM generate_series(1, 5000) g;",
    )
    .unwrap();
    let blocked: i64 = c.query_one("SELECT count(*) FROM jq.jobs WHERE state = 'blocked'", &[]).unwrap().get(0);
    if !broken("key_fill_ignores_limit") {
        assert_eq!(blocked, 4900, "one ready job per key, the rest blocked");
    }
    // Each claimer stops when the database says every job completed, never on a count of empty
    // claims: with one, a loaded machine once made all ten give up while a key's last job was
    // still to be made ready by a completion in flight ("4999 of 5000"). A job a claim cannot
    // see fails the deadline, naming the jobs left.
    let deadline = Instant::now() + Duration::from_secs(120);
    let workers: Vec<_> = (0..10)
        .map(|w| {
            let name = db.name.clone();
            thread::spawn(move || {
                let mut c = Client::connect(&conninfo(&name), NoTls).unwrap();
                let mut done = 0;
                loop {
                    let jobs = claim(&mut c, "q", &format!("w{w}"), 3, Some("5 minutes"));
                    if jobs.is_empty() {
                        let left: Vec<String> = c
                            .query("SELECT id || ':' || state FROM jq.jobs WHERE state <> 'completed' ORDER BY id LIMIT 10", &[])
                            .unwrap()
                            .iter()
                            .map(|r| r.get(0))
                            .collect();
                        if left.is_empty() {
                            break;
                        }
                        assert!(Instant::now() < deadline, "jobs left after 120 s (id:state): {left:?}");
                        thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    thread::sleep(Duration::from_millis(1)); // the "handler"
                    for j in &jobs {
                        assert!(complete(&mut c, j));
                        done += 1;
                    }
                }
                done
            })
        })
        .collect();
    let total: usize = workers.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, 5000);
    let overlaps: i64 = c
        .query_one(
            "SELECT count(*) FROM (
                 SELECT j.concurrency_key, e.started_at, e.finished_at,
                        lag(e.finished_at) OVER (PARTITION BY j.concurrency_key ORDER BY e.started_at) AS prev_end
                 FROM jq.executions e JOIN jq.jobs j ON j.id = e.job_id) x
             WHERE x.prev_end >= x.started_at",
            &[],
        )
        .unwrap()
        .get(0);
    let out_of_order: i64 = c
        .query_one(
            "SELECT count(*) FROM (
                 SELECT e.job_id,
                        lag(e.job_id) OVER (PARTITION BY j.concurrency_key ORDER BY e.started_at, e.job_id) AS prev
                 FROM jq.executions e JOIN jq.jobs j ON j.id = e.job_id) x
             WHERE x.prev > x.job_id",
            &[],
        )
        .unwrap()
        .get(0);
    let slots: i64 = c.query_one("SELECT count(*) FROM jq.key_slots", &[]).unwrap().get(0);
    eprintln!("overlapping executions within a key: {overlaps}; started out of order: {out_of_order}");
    assert_eq!(overlaps, 0, "two jobs of one key ran at the same time");
    assert_eq!(out_of_order, 0, "jobs of one key started out of enqueue order");
    assert_eq!(slots, 0, "slot rows left behind after the queue drained");
}

/// k1's head fails permanently; k1#2, k1#3 (higher priority), k2#1..5 and
/// plain jobs are enqueued; repeated claims of 10 drain everything: k2 and the plain jobs flow,
/// within k1 #2 starts before #3 although #3 has the higher priority, and across keys priority
/// order holds.
///
/// Negative control: JQ_TEST_BREAK=key_fill_ignores_limit fails (k1#3 is claimed in the same
/// batch as k1#2, ahead of it by priority).
#[test]
fn a_dead_head_blocks_no_other_key_and_priority_does_not_reorder_a_key() {
    let db = TestDb::new("flow_q09");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let head = enqueue_key(&mut c, Some("k1"), 0, 1);
    let h = claim(&mut c, "q", "w", 1, None);
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].id, head);
    let st: String = c
        .query_one("SELECT jq.fail($1, $2, 'boom')::text", &[&h[0].id, &h[0].token])
        .unwrap()
        .get(0);
    assert_eq!(st, "dead");
    let k1_2 = enqueue_key(&mut c, Some("k1"), 0, 25);
    let k1_3 = enqueue_key(&mut c, Some("k1"), 10, 25);
    let k2: Vec<i64> = (0..5).map(|_| enqueue_key(&mut c, Some("k2"), 5, 25)).collect();
    let plain0 = enqueue_key(&mut c, None, 0, 25);
    let plain5 = enqueue_key(&mut c, None, 5, 25);

    let mut order = Vec::new();
    for _ in 0..20 {
        let jobs = claim(&mut c, "q", "w", 10, Some("30 s"));
        if jobs.is_empty() {
            break;
        }
        order.push(jobs.iter().map(|j| j.id).collect::<Vec<_>>());
        for j in &jobs {
            assert!(complete(&mut c, j));
        }
    }
    eprintln!("claim batches: {order:?}");
    let flat: Vec<i64> = order.concat();
    assert_eq!(flat.len(), 9, "everything but the dead head ran");
    // First batch: one job per key (the keys' heads), by priority: k2#1 and plain5 (5) before
    // k1#2 and plain0 (0).
    assert_eq!(order[0], vec![k2[0], plain5, k1_2, plain0]);
    let pos = |id: i64| flat.iter().position(|&x| x == id).unwrap();
    assert!(pos(k1_2) < pos(k1_3), "k1#3 (priority 10) started before k1#2");
    for w in k2.windows(2) {
        assert!(pos(w[0]) < pos(w[1]));
    }
}

/// Thousands of blocked keys cost the claim nothing: 3,000 keys each with a running head and
/// 5 blocked jobs behind it, and 20 plain ready jobs. EXPLAIN ANALYZE of the claim's selection
/// (as jq.claim runs it, copied and checked in pg_test/tests/plans/statements.rs) reads only the ready
/// jobs it returns from jobs_claim_idx; the fill's selection reads one key's blocked jobs from
/// jobs_blocked_idx. The blocked jobs are in no index the claim walks, by construction (state
/// 'blocked'), so there is no broken variant that keeps the function and loses this; the
/// negative control is JQ_TEST_BREAK=key_fill_ignores_limit, under which the 15,000 blocked
/// jobs are ready and the count check fails.
#[test]
fn claim_reads_no_job_of_a_blocked_key() {
    let db = TestDb::new("flow_blocked");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.batch_execute(
        "SELECT jq.create_queue('q');
         SELECT count(jq.enqueue('q', '{}', concurrency_key => 'k' || (g % 3000)))
         FROM generate_series(0, 17999) g;",
    )
    .unwrap();
    // The heads run (claimed through jq.claim, 1,000 at a time).
    for _ in 0..3 {
        claim(&mut c, "q", "w", 1000, Some("1 hour"));
    }
    c.batch_execute("SELECT count(jq.enqueue('q', '{}')) FROM generate_series(1, 20); ANALYZE jq.jobs;").unwrap();
    let counts: Vec<(String, i64)> = c
        .query("SELECT state::text, count(*) FROM jq.jobs GROUP BY 1 ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    eprintln!("{counts:?}");
    assert_eq!(
        counts,
        vec![("blocked".into(), 15000), ("ready".into(), 20), ("running".into(), 3000)],
        "heads running, the rest blocked"
    );
    let plan = explain(
        &mut c,
        "SELECT p.id FROM jq.jobs p
         WHERE hashtextextended(p.queue, 0) = hashtextextended('q', 0) AND p.state = 'ready'
           AND EXISTS (SELECT FROM jq.queues g WHERE g.name = 'q' AND NOT g.paused
                       AND ((g.max_concurrency IS NULL AND g.rate_limit IS NULL) OR false))
         ORDER BY p.priority DESC, p.run_at, p.id LIMIT 10 FOR UPDATE OF p SKIP LOCKED",
    );
    let (index, rows) = index_scan(&plan);
    assert_eq!(index, "jobs_claim_idx", "{plan}");
    assert!(rows <= 12, "the claim read {rows} index rows: {plan}");
    let plan = explain(
        &mut c,
        "SELECT b.id FROM jq.jobs b
         WHERE b.queue = 'q' AND b.concurrency_key = 'k7' AND b.state = 'blocked'
         ORDER BY b.run_at, b.id LIMIT 1 FOR UPDATE",
    );
    let def: String = c
        .query_one("SELECT prosrc FROM pg_proc WHERE oid = $1::text::regprocedure", &[&KEY_FILL])
        .unwrap()
        .get(0);
    assert!(def.contains("WHERE b.queue = _key_fill.queue AND b.concurrency_key = _key_fill.concurrency_key"));
    let (index, rows) = index_scan(&plan);
    assert_eq!(index, "jobs_blocked_idx", "{plan}");
    assert!(rows <= 2, "{plan}");
    // And a claim through the function takes the plain jobs, quickly.
    let t = Instant::now();
    let got = claim(&mut c, "q", "w", 10, None);
    eprintln!("claim of 10 beside 3,000 blocked keys: {:?}", t.elapsed());
    assert_eq!(got.len(), 10);
}

/// A long-polling claim is woken when a running job of a key ends and hands the slot to the
/// key's next job (nothing else became claimable).
///
/// Negative control: JQ_TEST_BREAK=key_fill_no_wake fails (the waiter sleeps its full 10 s).
#[test]
fn a_key_slot_freeing_wakes_a_waiting_claim() {
    let db = TestDb::new("flow_wake");
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let a = enqueue_key(&mut c, Some("k"), 0, 25);
    let b = enqueue_key(&mut c, Some("k"), 0, 25);
    let ja = claim(&mut c, "q", "w", 1, None);
    assert_eq!(ja[0].id, a);
    let name = db.name.clone();
    let waiter = thread::spawn(move || {
        let mut w = Client::connect(&conninfo(&name), NoTls).unwrap();
        let rows = w.query("SELECT id FROM jq.claim('q', 'w2', wait => '10 s')", &[]).unwrap();
        (Instant::now(), rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>())
    });
    thread::sleep(Duration::from_millis(500));
    assert!(!waiter.is_finished(), "claimed while the key's slot was taken");
    assert!(complete(&mut c, &ja[0]));
    let done = Instant::now();
    let (returned, ids) = waiter.join().unwrap();
    let lag = returned.saturating_duration_since(done);
    eprintln!("woken {lag:?} after the key's job completed");
    assert_eq!(ids, vec![b]);
    assert!(lag < Duration::from_secs(2), "woken {lag:?} after the slot freed");
}

/// A batch completion (jq.complete_many) passes each completed job's key slot to the key's next
/// blocked job, as jq.complete does: the statement must read the CTE that calls
/// jq._key_fill_many, or PostgreSQL never runs it (sql/finish.sql, jq._keys_passed_on).
///
/// Negative control: JQ_TEST_BREAK=complete_many_keys_unread (the final SELECT no longer reads
/// that CTE) fails: the keys' next jobs stay blocked.
#[test]
fn a_batch_completion_passes_each_keys_slot_on() {
    let db = TestDb::new("flow_many");
    let mut c = db.connect();
    if broken("complete_many_keys_unread") {
        sabotage(&mut c, "jq.complete_many(bigint[],uuid[],jsonb[])", "(SELECT jq._keys_passed_on(k.moved) FROM keyed k)", "true", 1);
    }
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let heads = [enqueue_key(&mut c, Some("k1"), 0, 25), enqueue_key(&mut c, Some("k2"), 0, 25)];
    let next = [enqueue_key(&mut c, Some("k1"), 0, 25), enqueue_key(&mut c, Some("k2"), 0, 25)];
    let plain = enqueue_key(&mut c, None, 0, 25);
    let jobs = claim(&mut c, "q", "w", 10, None);
    let mut claimed: Vec<i64> = jobs.iter().map(|j| j.id).collect();
    claimed.sort();
    assert_eq!(claimed, vec![heads[0], heads[1], plain], "only the keys' heads and the plain job are ready");
    let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
    let tokens: Vec<uuid::Uuid> = jobs.iter().map(|j| j.token).collect();
    let done = c.query("SELECT * FROM jq.complete_many($1, $2)", &[&ids, &tokens]).unwrap().len();
    assert_eq!(done, 3);
    let states: Vec<String> = next
        .iter()
        .map(|id| c.query_one("SELECT state::text FROM jq.jobs WHERE id = $1", &[id]).unwrap().get(0))
        .collect();
    assert_eq!(states, vec!["ready", "ready"], "the keys' next jobs after their heads completed in one batch");
}

/// key_concurrency 2: at most two jobs of a key hold slots; raising it admits blocked jobs at
/// once; cancelling a ready job frees its slot; a retrying head keeps it.
#[test]
fn key_concurrency_slots_follow_cancel_retry_and_alter() {
    let db = TestDb::new("flow_slots");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q', key_concurrency => 2)").unwrap();
    let ids: Vec<i64> = (0..6).map(|_| enqueue_key(&mut c, Some("k"), 0, 25)).collect();
    let states = |c: &mut Client| -> Vec<String> {
        ids.iter().map(|&id| jq_pg_test::state(c, id).unwrap()).collect()
    };
    assert_eq!(states(&mut c), ["ready", "ready", "blocked", "blocked", "blocked", "blocked"]);
    // Cancel a ready job: its slot goes to the next one.
    assert!(c.query_one("SELECT jq.cancel($1)", &[&ids[0]]).unwrap().get::<_, bool>(0));
    assert_eq!(states(&mut c), ["cancelled", "ready", "ready", "blocked", "blocked", "blocked"]);
    // A failing head retries later and keeps its slot.
    let j = claim(&mut c, "q", "w", 1, None);
    assert_eq!(j[0].id, ids[1]);
    let st: String = c.query_one("SELECT jq.fail($1, $2, 'x', '1 hour')::text", &[&j[0].id, &j[0].token]).unwrap().get(0);
    assert_eq!(st, "scheduled");
    assert_eq!(states(&mut c), ["cancelled", "scheduled", "ready", "blocked", "blocked", "blocked"]);
    // Raising the limit admits blocked jobs at once.
    c.batch_execute("SELECT jq.alter_queue('q', key_concurrency => 4)").unwrap();
    assert_eq!(states(&mut c), ["cancelled", "scheduled", "ready", "ready", "ready", "blocked"]);
    // A retried (cancelled) job goes through its key: blocked behind the full key.
    assert!(c.query_one("SELECT jq.retry($1)", &[&ids[0]]).unwrap().get::<_, bool>(0));
    assert_eq!(states(&mut c)[0], "blocked");
    let used: i32 = c.query_one("SELECT used FROM jq.key_slots WHERE concurrency_key = 'k'", &[]).unwrap().get(0);
    assert_eq!(used, 4);
    let stats: i64 = c.query_one("SELECT blocked FROM jq.queue_stats WHERE queue = 'q'", &[]).unwrap().get(0);
    assert_eq!(stats, 2);
}

/// `jq.enqueue_many` takes `concurrency_key` as a spec field: keyed elements go through the key
/// slots like `jq.enqueue`, and a bad key is refused by position before anything is written.
#[test]
fn enqueue_many_takes_concurrency_keys() {
    let db = TestDb::new("flow_many");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let ids = c
        .query(
            "SELECT * FROM jq.enqueue_many('q', '[{\"concurrency_key\": \"b\"}, {\"concurrency_key\": \"a\"},
                                               {\"concurrency_key\": \"a\"}, {\"payload\": 4}]', specs => true)",
            &[],
        )
        .unwrap();
    assert_eq!(ids.len(), 4);
    let ids: Vec<i64> = ids.iter().map(|r| r.get(0)).collect();
    let states: Vec<String> = ids
        .iter()
        .map(|id| c.query_one("SELECT state::text FROM jq.jobs WHERE id = $1", &[id]).unwrap().get(0))
        .collect();
    // key_concurrency 1: the first job of each key is ready, the second of key a waits.
    assert_eq!(states, ["ready", "ready", "blocked", "ready"]);
    let err = c.query(
        "SELECT * FROM jq.enqueue_many('q', '[{\"payload\": 1}, {\"concurrency_key\": \"\"}]', specs => true)",
        &[],
    );
    assert_eq!(sqlstate(err), "22023");
    let n: i64 = c.query_one("SELECT count(*) FROM jq.jobs", &[]).unwrap().get(0);
    assert_eq!(n, 4, "a refused batch wrote nothing");
}
