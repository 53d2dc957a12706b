//! The worker's calls find their job by primary key, and jq.complete_many reads its input once.

use jq_pg_test::TestDb;
use serde_json::Value;

use super::plan_tree::{
    actual_rows, check_uses_index, expect_no_disabled_cost, node_type, reads_jobs, Explained, Failures,
};
use super::statements::{explain, HotPath, Mode};
use super::traced::Traced;

const COMPLETE_UPDATE: HotPath = HotPath {
    label: "jq.complete: the fenced delete by id",
    function: "jq.complete(bigint,uuid,jsonb)",
    source: "DELETE FROM ONLY jq.jobs j
    WHERE j.id OPERATOR(pg_catalog.=) complete.id
      AND j.lease_token OPERATOR(pg_catalog.=) complete.lease_token
      AND j.state::pg_catalog.text OPERATOR(pg_catalog.=) 'running'",
    subst: &[("complete.id", "$1"), ("complete.lease_token", "$2")],
    types: "bigint, uuid",
};

const HEARTBEAT_UPDATE: HotPath = HotPath {
    label: "jq.heartbeat: the fenced update by id",
    function: "jq.heartbeat(bigint,uuid,interval,jsonb)",
    source: "WHERE j.id = heartbeat.id AND j.lease_token = heartbeat.lease_token AND j.state::text = 'running'",
    subst: &[],
    types: "",
};

/// complete, fail, heartbeat, release and snooze find the job by primary key even when the
/// statistics were taken while nothing ran (the bench found `jq.complete_many` planned as a
/// scan of jobs_running_idx: 1 s per call). Negative control `JQ_TEST_BREAK=running_idx_lookup`
/// (jq.complete with the plain `state = 'running'`): seen failing, the plan read jobs_running_idx.
#[test]
fn worker_calls_find_the_job_by_primary_key_after_an_idle_analyze() {
    let db = TestDb::new("plans_pk");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('pk');
         SELECT count(*) FROM jq.enqueue_many('pk', (SELECT jsonb_agg(g) FROM generate_series(1, 20000) g));
         ANALYZE jq.jobs;",
    )
    .unwrap();
    COMPLETE_UPDATE.check_source(&mut c);
    HEARTBEAT_UPDATE.check_source(&mut c);
    if jq_pg_test::broken("running_idx_lookup") {
        jq_pg_test::sabotage(&mut c, "jq.complete(bigint,uuid,jsonb)", "j.state::pg_catalog.text OPERATOR(pg_catalog.=) 'running'",
                             "j.state OPERATOR(pg_catalog.=) 'running'", 1);
    }
    // Statistics say nothing runs; now 5,000 do.
    let jobs = jq_pg_test::claim(&mut c, "pk", "w", 1000, None);
    for _ in 0..4 {
        jq_pg_test::claim(&mut c, "pk", "w", 1000, None);
    }
    let mut f = Failures::default();
    let job = &jobs[0];
    for mode in [Mode::Custom, Mode::Generic] {
        let body: String = c
            .query_one("SELECT prosrc FROM pg_proc WHERE oid = 'jq.complete(bigint,uuid,jsonb)'::regprocedure", &[])
            .unwrap()
            .get(0);
        let live = HotPath {
            label: "jq.complete as installed",
            function: "jq.complete(bigint,uuid,jsonb)",
            source: if body.contains("j.state::pg_catalog.text OPERATOR(pg_catalog.=) 'running'") { COMPLETE_UPDATE.source } else {
                "DELETE FROM ONLY jq.jobs j
    WHERE j.id OPERATOR(pg_catalog.=) complete.id
      AND j.lease_token OPERATOR(pg_catalog.=) complete.lease_token
      AND j.state OPERATOR(pg_catalog.=) 'running'"
            },
            ..COMPLETE_UPDATE
        };
        let e = explain(&mut c, &live, &format!("{}, '{}'", job.id, job.token), mode);
        f.check(check_uses_index(&e, "jobs_pkey", "jobs"));
    }
    f.finish();
}

/// jq.complete_many reads its input and its jobs once. It finds the jobs by `j.id = ANY (ids)`
/// and joins them to the unnested input arrays; the generic plan estimates one job, and the
/// planner joined them with a nested loop that ran the input's unnest again for every job:
/// 100 jobs, 10,000 input rows made and 9,900 thrown away per call (at batch 100 the bench
/// drained measurably faster without it, docs/BENCHMARKS.md). 100 jobs completed in one call on a table of 20,000,
/// seven times: no node of its UPDATE may produce more than 2 rows per job over all its loops
/// or throw away more than one per job in a join filter, and the scans of jq.jobs may read at
/// most 10 buffers per job.
/// No statement may carry a disabled node's cost (expect_no_disabled_cost).
/// Negative control `JQ_TEST_BREAK=complete_many_nestloop` (enable_nestloop reset on
/// complete_many): seen failing, "Function Scan on u: 100 rows x 100 loops".
#[test]
fn complete_many_reads_its_input_once() {
    let db = TestDb::new("plans_cm_once");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('cm');
         SELECT count(*) FROM jq.enqueue_many('cm', (SELECT jsonb_agg(g) FROM generate_series(1, 20000) g));
         ANALYZE jq.jobs;",
    )
    .unwrap();
    if jq_pg_test::broken("complete_many_nestloop") {
        c.batch_execute("ALTER FUNCTION jq.complete_many(bigint[], uuid[], jsonb[]) RESET enable_nestloop").unwrap();
    }
    let mut t = Traced::connect(&db);
    let mut f = Failures::default();
    for round in 1..=7 {
        let rows = c.query("SELECT id, lease_token FROM jq.claim('cm', 'plans-probe', 100)", &[]).unwrap();
        assert_eq!(rows.len(), 100);
        let ids: Vec<String> = rows.iter().map(|r| r.get::<_, i64>(0).to_string()).collect();
        let tokens: Vec<String> = rows.iter().map(|r| format!("'{}'", r.get::<_, uuid::Uuid>(1))).collect();
        let sql = format!("SELECT count(*) FROM jq.complete_many(ARRAY[{}]::bigint[], ARRAY[{}]::uuid[])",
                          ids.join(","), tokens.join(","));
        let (done, plans) = t.run(&sql);
        assert_eq!(done[0].get::<_, i64>(0), 100, "round {round}: every claimed job completes");
        expect_no_disabled_cost(&mut f, &plans, &format!("complete_many, round {round}"));
        let updates: Vec<&Explained> = plans.iter().filter(|e| e.label.contains("DELETE FROM ONLY jq.jobs")).collect();
        f.expect(updates.len() == 1, || format!("round {round}: {} traced DELETEs of jq.jobs", updates.len()));
        let mut buffers = 0;
        for stmt in updates {
            for n in stmt.nodes() {
                let num = |k: &str| n.get(k).and_then(Value::as_i64).unwrap_or(0);
                let made = actual_rows(n).unwrap_or(0);
                let what = format!("{}{}", node_type(n),
                                   n.get("Alias").and_then(Value::as_str).map(|a| format!(" on {a}")).unwrap_or_default());
                f.expect(made <= 200, || stmt.fail(format!(
                    "round {round}: {what}: {} rows x {} loops for 100 jobs", num("Actual Rows"), num("Actual Loops"))));
                f.expect(num("Rows Removed by Join Filter") <= 100, || stmt.fail(format!(
                    "round {round}: {what} threw away {} rows in its join filter", num("Rows Removed by Join Filter"))));
                let on_jobs = reads_jobs(n);
                if on_jobs && node_type(n) != "ModifyTable" && node_type(n) != "Bitmap Heap Scan" {
                    buffers += num("Shared Hit Blocks") + num("Shared Read Blocks");
                }
            }
        }
        f.expect(buffers <= 1000, || format!("round {round}: the scans of jq.jobs read {buffers} buffers for 100 jobs"));
    }
    f.finish();
}
