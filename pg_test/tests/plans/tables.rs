//! No CHECK constraints on the tables every execution writes, and history reads through indexes.

use jq_pg_test::{Client, TestDb};
use serde_json::Value;

use super::data::build_base;
use super::plan_tree::{actual_rows, check_indexed, check_uses_index, ANY_INDEX_SCAN, Explained, Failures};
use super::statements::norm;
use super::traced::Traced;

/// The tables the ends of executions write (jq.jobs, jq.execution_log) carry no CHECK
/// constraints. PostgreSQL keeps a CHECK as node text and, in every INSERT or UPDATE statement,
/// parses it (stringToNode) and compiles it again (ExecRelCheck); jq.jobs' one CHECK
/// (max_attempts between 1 and 1000000) was about 4% of a backend's CPU in the batch-1 drain
/// (perf, docs/BENCHMARKS.md). Ranges are checked where values enter instead (jq._job_problem:
/// 22023; tests/retries.rs). NOT NULL is checked from the tuple descriptor and costs nothing
/// comparable. Negative control `JQ_TEST_BREAK=jobs_check` (the old CHECK added back): seen
/// failing, "jq.jobs has CHECK constraints: jobs_max_attempts_check".
#[test]
fn hot_tables_have_no_check_constraints() {
    let db = TestDb::new("plans_checks");
    let mut c = db.connect();
    if jq_pg_test::broken("jobs_check") {
        c.batch_execute(
            "ALTER TABLE jq.jobs ADD CONSTRAINT jobs_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 1000000)",
        )
        .unwrap();
    }
    for table in ["jq.jobs", "jq.execution_log"] {
        let names: Vec<String> = c
            .query(
                "SELECT conname::text FROM pg_catalog.pg_constraint
                 WHERE conrelid = $1::text::regclass AND contype = 'c' ORDER BY conname",
                &[&table],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(names.is_empty(), "{table} has CHECK constraints: {}", names.join(", "));
    }
}

/// EXPLAIN (ANALYZE, FORMAT JSON) of a plain query, in a transaction that is rolled back.
fn explain_query(c: &mut Client, label: &str, sql: &str) -> Explained {
    let mut tx = c.transaction().expect("BEGIN");
    let plan: Value = tx
        .query_one(&format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}"), &[])
        .unwrap_or_else(|e| panic!("{label}: EXPLAIN failed: {e}"))
        .get(0);
    tx.rollback().expect("ROLLBACK");
    Explained { label: format!("{label}\n  SQL: {}", norm(sql)), root: plan[0]["Plan"].clone() }
}

/// A completed execution lives in its job row (sql/schema.sql), so the history view
/// jq.executions reads jq.jobs too: one job's history by id, and a queue's recent completions
/// (also in jq.queue_stats) through the (queue, finished_at, id) index of the history tables
/// (completed jobs live there: sql/schema.sql), never a scan of the 100,000 jobs (40,000 of
/// them completed). Negative control `JQ_TEST_BREAK=history_view_unindexed` (the view's job branch
/// reads `j.state::text = 'completed'`, which no partial index predicate is implied by): seen
/// failing, "has a Seq Scan on jobs".
#[test]
fn history_reads_use_indexes_on_the_job_table() {
    let db = TestDb::new("plans_history");
    let mut c = build_base(&db);
    if jq_pg_test::broken("history_view_unindexed") {
        c.batch_execute(
            "CREATE OR REPLACE VIEW jq.executions AS
             SELECT l.job_id, l.seq, l.attempt, l.outcome, l.started_at, l.lease_expires_at,
                    l.finished_at, l.queue, l.worker, l.error FROM jq.execution_log l
             UNION ALL
             SELECT j.id, j.claims, j.attempt, 'completed'::jq.execution_outcome, j.started_at,
                    j.lease_expires_at, j.finished_at, j.queue, j.worker, NULL::text
             FROM jq.jobs j WHERE j.state::text = 'completed'",
        )
        .unwrap();
    }
    let id: i64 = c
        .query_one("SELECT min(id) FROM jq.jobs WHERE queue = 'plan.1' AND state = 'completed'", &[])
        .unwrap()
        .get(0);
    let mut f = Failures::default();
    let e = explain_query(&mut c, "one job's history", &format!("SELECT * FROM jq.executions WHERE job_id = {id}"));
    f.check(check_indexed(&e));
    f.expect(actual_rows(&e.root) == Some(1), || e.fail("expected the one completed execution"));
    let e = explain_query(
        &mut c,
        "a queue's recent completions",
        "SELECT count(*) FROM jq.executions
         WHERE queue = 'plan.1' AND outcome = 'completed' AND finished_at > now() - interval '5 minutes'",
    );
    f.check(check_uses_index(&e, "jobs_done_0_queue_idx", "jobs_done_0"));
    // jq.queue_stats reads completions twice (completed_5m, wait_p95_5m), both through
    // the history tables' (queue, finished_at, id) index. (Its counts of all finished jobs within
    // retention read them all, by design: the planner may well scan the history tables for those.)
    // Negative control `JQ_TEST_BREAK=finished_in_list` (the counts of dead, completed and
    // cancelled jobs in one IN list again, which matches no partial index of the live table):
    // seen failing, "has a Seq Scan on jobs".
    if jq_pg_test::broken("finished_in_list") {
        jq_pg_test::sabotage(&mut c, "jq._queue_figures(text,bigint)", "(j.state = 'dead' OR j.state IN ('completed', 'cancelled'))",
                             "j.state IN ('completed', 'dead', 'cancelled')", 1);
    }
    let e = queue_stats_plan(&db, "SELECT * FROM jq.queue_stats WHERE queue = 'plan.1'");
    // The live table's finished jobs through its partial indexes, never by scanning it; its
    // scheduled jobs through jobs_scheduled_queue_idx, this queue's only (jobs_scheduled_idx
    // holds every queue's: 38,000 here). (Its running count may scan the running jobs of every
    // queue: jobs_running_idx does not lead with the queue, and a queue's running jobs are
    // bounded by its workers.)
    let scanned = e.nodes().into_iter().any(|n| {
        n["Node Type"] == "Seq Scan" && n["Relation Name"] == "jobs"
            && n["Filter"].as_str().is_some_and(|x| x.contains("dead") || x.contains("cancelled"))
    });
    f.expect(!scanned, || e.fail("has a Seq Scan on jobs for its finished jobs"));
    f.expect(!e.scans_of("jobs_scheduled_queue_idx", ANY_INDEX_SCAN).is_empty() && e.scans_of("jobs_scheduled_idx", ANY_INDEX_SCAN).is_empty(),
             || e.fail("counts its scheduled jobs without jobs_scheduled_queue_idx"));
    let finished = e.scans_of("jobs_done_0_queue_idx", ANY_INDEX_SCAN).len();
    f.expect(finished >= 2, || e.fail(format!("reads jobs_done_0_queue_idx {finished} times; expected the \
                                               recent completions of completed_5m and wait_p95_5m")));
    // Once vacuum has set the visibility map, its claimable count is an index-only scan of
    // jobs_claim_idx: the index is keyed by the queue's hash and INCLUDEs the name, without
    // which the planner cannot compute the hash expression from the index alone.
    // Negative control `JQ_TEST_BREAK=claim_idx_without_include`: seen failing,
    // "reads jobs_claim_idx with 0 index-only scans" (an Index Scan reading every ready job's row).
    if jq_pg_test::broken("claim_idx_without_include") {
        c.batch_execute(
            "DROP INDEX jq.jobs_claim_idx;
             CREATE INDEX jobs_claim_idx ON jq.jobs (pg_catalog.hashtextextended(queue, 0), priority DESC, run_at, id)
                 WHERE state = 'ready';",
        )
        .unwrap();
    }
    c.batch_execute("VACUUM ANALYZE jq.jobs").unwrap();
    let e = queue_stats_plan(&db, "SELECT claimable FROM jq.queue_stats WHERE queue = 'plan.1'");
    let ios = e.scans_of("jobs_claim_idx", &["Index Only Scan"]).len();
    f.expect(ios == 1, || e.fail(format!("reads jobs_claim_idx with {ios} index-only scans; expected the \
                                          claimable count's")));
    f.finish();
}

/// The plan of jq._queue_figures' statement (the figures of jq.queue_stats, computed in a function
/// with JIT off) as `sql`, a read of the view, runs it: auto_explain's, with actual rows.
fn queue_stats_plan(db: &TestDb, sql: &str) -> Explained {
    let mut t = Traced::connect(db);
    let (_, plans) = t.run(sql);
    plans
        .into_iter()
        .find(|p| p.label.split("statement:").nth(1).is_some_and(|s| s.contains("hc.completed_5m")))
        .unwrap_or_else(|| panic!("{sql}: no plan of jq._queue_figures' statement"))
}

/// The monitoring views stay below jit_above_cost, so reading them never compiles their plan
/// with LLVM first (a view cannot turn JIT off for itself). jq.queue_stats, whose joins over
/// jq.jobs and the 16 history tables used to be in the view itself, was estimated at 2,036,753
/// with one queue on a fresh installation and spent about 4 s of each read in JIT compilation;
/// it now calls jq._queue_figures (JIT off) per queue. Seen failing on that view: "SELECT * FROM
/// jq.queue_stats: costs 1737921". 50 queues, never analyzed, as on a new installation.
#[test]
fn monitoring_views_stay_below_the_jit_threshold() {
    let db = TestDb::new("plans_jit");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('jit.' || i) FROM generate_series(1, 50) i;
                     SELECT jq.enqueue('jit.1')").unwrap();
    let limit: f64 = c.query_one("SELECT current_setting('jit_above_cost')::float8", &[]).unwrap().get(0);
    for sql in ["SELECT * FROM jq.queue_stats", "SELECT * FROM jq.queue_stats WHERE queue = 'jit.1'",
                "SELECT * FROM jq.table_health", "SELECT * FROM jq.kind_policies", "SELECT * FROM jq.fleet"] {
        let plan: Value = c.query_one(&format!("EXPLAIN (FORMAT JSON) {sql}"), &[]).unwrap().get(0);
        let cost = plan[0]["Plan"]["Total Cost"].as_f64().unwrap();
        assert!(cost < limit, "{sql}: costs {cost:.0}, at or above jit_above_cost ({limit})");
    }
    let depth: i64 = c.query_one("SELECT depth FROM jq.queue_stats WHERE queue = 'jit.1'", &[]).unwrap().get(0);
    assert_eq!(depth, 1);
}
