//! Plans cached while jq.jobs was small still find jobs through an index condition after it grows.

use jq_pg_test::TestDb;
use serde_json::Value;

use super::plan_tree::{expect_no_disabled_cost, node_type, reads_jobs, Failures};
use super::traced::Traced;

/// Plans cached while jq.jobs held a few rows still find jobs through an index after it grows.
/// plpgsql keeps a statement's plan for the life of the connection (until ANALYZE of the table
/// invalidates it): jq.claim and jq.complete_many run generic plans from their first call
/// (above), the others after five calls. Made on a small table, those plans read the whole
/// table to find a job by id: a sequential scan, or (complete_many) a full scan of jobs_pkey
/// under a join. After a burst of 50,000–200,000 jobs every call of that connection then took
/// 17–40 ms until autovacuum analyzed the table (docs/BENCHMARKS.md). The functions that act on
/// jobs by id are planned by jq's planner hook, which tells the planner jq.jobs has at least
/// jq.plan_min_pages pages (src/planner.rs), and complete_many names its ids as an index
/// condition (sql/finish.sql). Two small tables: never analyzed (the planner assumes 10 pages) and
/// analyzed at 40 rows (it believes them). Autovacuum is off for jq.jobs here, so nothing
/// replans behind the test's back. Every scan of jq.jobs after the burst must be an index scan
/// with an index condition.
/// Negative controls: `JQ_TEST_BREAK=seqscan_after_growth` (`jq.plan_min_pages = 0` for the
/// test's database: the planner sees the real size): seen failing again with the hook, never
/// analyzed: the one-job claim (hinted), the batch claim, complete_many and
/// the keyed complete's _key_fill ("Seq Scan on jobs"); analyzed: also heartbeat, complete,
/// fail and release. (Until the hook, the control reset the functions' enable_seqscan = off
/// pin, and failed the same way.)
/// `JQ_TEST_BREAK=blocked_idx_after_growth` (_key_fill testing `j.state = 'blocked'`, which
/// implies jobs_blocked_idx's predicate): seen failing, never analyzed: the keyed complete's
/// _key_fill walked all of jobs_blocked_idx with no Index Cond.
#[test]
fn plans_made_on_a_small_table_stay_index_lookups() {
    let mut f = Failures::default();
    for analyzed in [false, true] {
        let db = TestDb::new(if analyzed { "plans_small_analyzed" } else { "plans_small" });
        let mut c = db.connect();
        c.batch_execute(
            "ALTER TABLE jq.jobs SET (autovacuum_enabled = false);
             SELECT jq.create_queue('small');
             SELECT count(*) FROM jq.enqueue_many('small', (SELECT jsonb_agg(g) FROM generate_series(1, 40) g));
             SELECT jq.create_queue('smallk');
             SELECT count(*) FROM jq.enqueue_many('smallk', (SELECT jsonb_agg(jsonb_build_object(
                 'payload', g, 'concurrency_key', 'k')) FROM generate_series(1, 40) g), specs => true);",
        )
        .unwrap();
        if jq_pg_test::broken("blocked_idx_after_growth") {
            jq_pg_test::sabotage(&mut c, "jq._key_fill(text,text,integer)", "j.state::text = 'blocked'",
                                 "j.state = 'blocked'", 1);
        }
        if analyzed {
            c.batch_execute("ANALYZE jq.jobs").unwrap();
        }
        if jq_pg_test::broken("seqscan_after_growth") {
            // the planner sees jq.jobs' real size (src/planner.rs off) in the traced connection
            c.batch_execute(&format!("ALTER DATABASE {} SET jq.plan_min_pages = 0", db.name)).unwrap();
        }
        let mut t = Traced::connect(&db);
        let calls = [
            "SELECT count(*) FROM (SELECT jq.heartbeat(id, lease_token), jq.complete(id, lease_token) \
             FROM jq.claim('small', 'plans-probe')) x",
            "SELECT count(*) FROM (SELECT jq.fail(id, lease_token, 'x', retry_in => '1 hour') \
             FROM jq.claim('small', 'plans-probe')) x",
            "SELECT count(*) FROM (SELECT jq.release(id, lease_token) FROM jq.claim('small', 'plans-probe')) x",
            "SELECT count(*) FROM (SELECT jq.complete_many(array_agg(id), array_agg(lease_token)) \
             FROM jq.claim('small', 'plans-probe', 3)) x",
            // a keyed job's completion passes its slot to the key's next blocked job (_key_fill)
            "SELECT count(*) FROM (SELECT jq.complete(id, lease_token) FROM jq.claim('smallk', 'plans-probe')) x",
            // a duplicate enqueue finds the unfinished job of its idempotency key (jobs_idempotency_idx)
            "SELECT jq.enqueue('small', '{}', idempotency_key => 'plans-dup')",
        ];
        // Seven rounds on the small table: the connection's plans are made and cached now.
        for _ in 1..=7 {
            for sql in calls {
                t.run(sql);
            }
        }
        // The burst, from another connection, with no ANALYZE after it.
        c.batch_execute(
            "SELECT count(*) FROM jq.enqueue_many('small', (SELECT jsonb_agg(g) FROM generate_series(1, 50000) g));
             SELECT count(*) FROM jq.enqueue_many('smallk', (SELECT jsonb_agg(jsonb_build_object(
                 'payload', g, 'concurrency_key', 'k')) FROM generate_series(1, 20000) g), specs => true);",
        )
        .unwrap();
        for sql in calls {
            let (_, plans) = t.run(sql);
            expect_no_disabled_cost(&mut f, &plans, sql);
            let mut scans = 0;
            for stmt in &plans {
                for n in stmt.nodes() {
                    let on_jobs = reads_jobs(n);
                    if !on_jobs || node_type(n) == "Bitmap Heap Scan" || node_type(n) == "ModifyTable" {
                        continue;
                    }
                    scans += 1;
                    // a lookup by id must walk the primary key, not a partial index ending in id
                    let cond = n.get("Index Cond").and_then(Value::as_str).unwrap_or("");
                    let by_id = cond.starts_with("(id = ") || cond.contains(" AND (id = ");
                    // or, for the one-job claim's UPDATE, straight to the row it locked (Tid Scan)
                    let by_ctid = node_type(n) == "Tid Scan" && n.get("TID Cond").is_some();
                    let indexed = by_ctid
                        || matches!(node_type(n), "Index Scan" | "Index Only Scan" | "Bitmap Index Scan")
                        && !cond.is_empty()
                        && (!by_id || n.get("Index Name").and_then(Value::as_str) == Some("jobs_pkey"));
                    f.expect(indexed, || {
                        stmt.fail(format!(
                            "{} ({}analyzed small table): {} on jobs{}, a plan made on the small table, kept after it grew",
                            sql, if analyzed { "" } else { "never " }, node_type(n),
                            if node_type(n) == "Seq Scan" { String::new() } else { format!(" ({}, Index Cond {cond:?})",
                                n.get("Index Name").and_then(Value::as_str).unwrap_or("?")) }))
                    });
                }
            }
            f.expect(scans > 0, || format!("{sql}: no scan of jq.jobs traced"));
        }
    }
    f.finish();
}

/// The background worker's duties keep their plans for the life of its connection too (one
/// backend per database, for days), and a plan made while jq.jobs was small must not walk a
/// whole index after a burst: the rows of a batch are picked through a partial index
/// (jobs_scheduled_idx, jobs_running_idx, jobs_aging_idx, jobs_finished_idx) and then written
/// by id, and that second lookup must go through jobs_pkey. Written with the plain state test
/// (`j.state = 'scheduled'`), it implies the partial index's predicate, and a plan made on a
/// small table found the batch's rows through that index with the ids as a mere filter: every
/// batch of promotion, reaping or aging walked every due row. The duties run as the worker runs
/// them (jq._maintain_guarded at a given instant), seven times on a small table (plans made and
/// cached), then once after a burst of 50,000 scheduled, 20,000 aging, 5,000 expired and 2,500
/// completed jobs made from another connection with no ANALYZE; never analyzed and analyzed at
/// 40 rows of each kind. The cron duty checks a skip_if_running schedule's last job by id: no
/// partial index to stray into, and at this table size the pkey in every variant seen, but on
/// a table of a page or two a sequential scan costs less than the pkey lookup; the planner hook
/// (src/planner.rs) covers it as it covers the others. Every scan of jq.jobs must be an index
/// scan with an index condition, and none may filter on id (a lookup by id that walks another
/// index).
/// Negative control `JQ_TEST_BREAK=maintenance_seqscan_after_growth` (`jq.plan_min_pages = 0`
/// for the test's database, and the duties' by-id rechecks written as plain state tests, as
/// they were): seen failing in both variants, again with the hook. Never analyzed: promote's and reap's rechecks walked
/// jobs_scheduled_idx / jobs_running_idx with the ids as a filter, aging walked all of
/// jobs_claim_idx, prune deleted by id with a Seq Scan; analyzed: Seq Scans in all four.
#[test]
fn maintenance_plans_made_on_a_small_table_stay_index_lookups() {
    let mut f = Failures::default();
    for analyzed in [false, true] {
        let db = TestDb::new(if analyzed { "plans_maint_analyzed" } else { "plans_maint" });
        let mut c = db.connect();
        c.batch_execute(
            "ALTER TABLE jq.jobs SET (autovacuum_enabled = false);
             SELECT jq.create_queue('mt', retention => '1 minute', history_retention => '1 minute');
             SELECT jq.alter_queue('mt', priority_aging => '1 minute');
             SELECT count(*) FROM jq.enqueue_many('mt', (SELECT jsonb_agg(g) FROM generate_series(1, 40) g), delay => '1 hour');
             SELECT count(*) FROM jq.enqueue_many('mt', (SELECT jsonb_agg(g) FROM generate_series(1, 80) g));
             SELECT count(*) FROM (SELECT jq.complete(id, lease_token) FROM jq.claim('mt', 'plans-probe', 20)) x;
             SELECT count(*) FROM jq.claim('mt', 'plans-probe', 20, lease => '1 hour');
             SELECT name FROM jq.schedule('mt-every-minute', '* * * * *', 'mt', overlap => 'skip_if_running');
             CREATE TABLE t0 AS SELECT now() AS t0;",
        )
        .unwrap();
        if jq_pg_test::broken("maintenance_seqscan_after_growth") {
            c.batch_execute(&format!("ALTER DATABASE {} SET jq.plan_min_pages = 0", db.name)).unwrap();
            jq_pg_test::sabotage(&mut c, "jq._promote(timestamptz,integer,integer)",
                                 "AND j.state::text = 'scheduled' AND j.run_at <= _promote.now",
                                 "AND j.state = 'scheduled' AND j.run_at <= _promote.now", 1);
            jq_pg_test::sabotage(&mut c, "jq._end_leases(bigint[],timestamptz,timestamptz,boolean,text,boolean)",
                                 "AND j.state::text = 'running'", "AND j.state = 'running'", 1);
            jq_pg_test::sabotage(&mut c, "jq._age(timestamptz,integer)", "AND j.state::text = 'ready'",
                                 "AND j.state = 'ready'", 1);
        }
        if analyzed {
            c.batch_execute("ANALYZE jq.jobs").unwrap();
        }
        let mut t = Traced::connect(&db);
        // A minute apart: the schedule fires (or skips, its last job still waits) every time;
        // little else is due on the small table, and the plans are made all the same.
        let duty = |d: &str, after: &str| {
            format!("SELECT done, error FROM jq._maintain_guarded('{d}', (SELECT t0 + interval '{after}' FROM t0))")
        };
        for minute in 1..=7 {
            for d in ["promote", "reap", "prune", "cron"] {
                let (rows, _) = t.run(&duty(d, &format!("{minute} minutes")));
                let error: Option<String> = rows[0].get(1);
                assert!(error.is_none(), "{d} on the small table: {error:?}");
            }
        }
        // The burst, from another connection, with no ANALYZE after it: due at t0 + 30 minutes.
        c.batch_execute(
            "SELECT count(*) FROM jq.enqueue_many('mt', (SELECT jsonb_agg(g) FROM generate_series(1, 50000) g), delay => '2 minutes');
             SELECT count(*) FROM jq.enqueue_many('mt', (SELECT jsonb_agg(g) FROM generate_series(1, 20000) g));
             SELECT count(*) FROM (SELECT jq.complete(id, lease_token) FROM jq.claim('mt', 'plans-probe', 1000) x
                                   UNION ALL SELECT jq.complete(id, lease_token) FROM jq.claim('mt', 'plans-probe', 1000) x
                                   UNION ALL SELECT jq.complete(id, lease_token) FROM jq.claim('mt', 'plans-probe', 500) x) y;
             SELECT count(*) FROM (SELECT * FROM jq.claim('mt', 'plans-probe', 1000, lease => '1 minute')
                                   UNION ALL SELECT * FROM jq.claim('mt', 'plans-probe', 1000, lease => '1 minute')
                                   UNION ALL SELECT * FROM jq.claim('mt', 'plans-probe', 1000, lease => '1 minute')
                                   UNION ALL SELECT * FROM jq.claim('mt', 'plans-probe', 1000, lease => '1 minute')
                                   UNION ALL SELECT * FROM jq.claim('mt', 'plans-probe', 1000, lease => '1 minute')) x;",
        )
        .unwrap();
        for d in ["promote", "reap", "prune", "cron"] {
            let sql = duty(d, "30 minutes");
            let (rows, plans) = t.run(&sql);
            let (done, error): (i32, Option<String>) = (rows[0].get(0), rows[0].get(1));
            // prune: the completed jobs are in the current history table, which is truncated
            // only once the ring has moved on (sql/history.sql): nothing to do here yet.
            assert!(error.is_none() && (done > 0 || d == "cron" || d == "prune"), "{d} after the burst: done {done}, error {error:?}");
            expect_no_disabled_cost(&mut f, &plans, &format!("{d} ({}analyzed small table)", if analyzed { "" } else { "never " }));
            let mut scans = 0;
            for stmt in &plans {
                for n in stmt.nodes() {
                    let on_jobs = reads_jobs(n);
                    let filter = n.get("Filter").and_then(Value::as_str).unwrap_or("");
                    if on_jobs && node_type(n) == "Bitmap Heap Scan" {
                        // its index is the Bitmap Index Scan below; the ids must be a condition there
                        f.expect(!filter.contains("(id = "), || {
                            stmt.fail(format!("{d}: Bitmap Heap Scan on jobs with the ids as a filter {filter:?}"))
                        });
                        continue;
                    }
                    if !on_jobs || node_type(n) == "ModifyTable" {
                        continue;
                    }
                    scans += 1;
                    let cond = n.get("Index Cond").and_then(Value::as_str).unwrap_or("");
                    let indexed = matches!(node_type(n), "Index Scan" | "Index Only Scan" | "Bitmap Index Scan")
                        && !cond.is_empty()
                        && !filter.contains("(id = ");
                    f.expect(indexed, || {
                        stmt.fail(format!(
                            "{d} ({}analyzed small table): {} on jobs ({}, Index Cond {cond:?}, Filter {filter:?}), \
                             a plan made on the small table, kept after it grew",
                            if analyzed { "" } else { "never " }, node_type(n),
                            n.get("Index Name").and_then(Value::as_str).unwrap_or("no index")))
                    });
                }
            }
            f.expect(scans > 0 || d == "prune", || format!("{d}: no scan of jq.jobs traced"));
        }
    }
    f.finish();
}
