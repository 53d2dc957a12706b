//! The dashboard's read API (sql/observe.sql) as it runs: a page of jq.list_jobs reads its
//! state's partial index in order and about one page of it (no Sort, no count of the queue),
//! with or without a cursor; a filtered page reads at most its scan limit; jq.overview's capped
//! counts read at most depth_cap + 1 rows each, and the oldest claimable job is found by one
//! descent per priority.

use super::data::{drain, enqueue_plain, Then};
use super::plan_tree::{actual_rows, check_bounded_reads, check_indexed, check_ordered_pick, expect_no_disabled_cost, node_type,
                       reads_jobs, Failures};
use super::statements::Mode;
use super::traced::{statements, Traced};
use jq_pg_test::TestDb;

/// The marker of jq.list_jobs' statement (sql/observe.sql, jq._list_jobs_sql).
const LISTING: &str = "AS matches FROM jq.jobs j WHERE";

#[test]
fn dashboard_listings_read_one_page_of_their_state_index() {
    let db = TestDb::new("plans_observe");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('obs', max_attempts => 1); SELECT jq.create_queue('noise')").unwrap();
    // 3,000 completed and 3,000 dead jobs in obs, then 120,000 ready ones in each queue (of
    // three priorities in obs), so that reading a whole state would show in the row counts.
    enqueue_plain(&mut c, "obs", 3000, None);
    drain(&mut c, "obs", "5 minutes", Then::Complete);
    enqueue_plain(&mut c, "obs", 3000, None);
    drain(&mut c, "obs", "5 minutes", Then::Fail(None, "dead"));
    c.batch_execute(
        "SELECT count(*) FROM jq.enqueue_many('obs',
             (SELECT jsonb_agg(jsonb_build_object('payload', g, 'priority', g % 3)) FROM generate_series(1, 120000) g),
             specs => true);
         SELECT count(*) FROM jq.enqueue_many('noise', (SELECT jsonb_agg(g) FROM generate_series(1, 120000) g));
         SELECT count(*) FROM jq.enqueue_many('obs',
             (SELECT jsonb_agg(jsonb_build_object('payload', g, 'delay', '1 day')) FROM generate_series(1, 3000) g),
             specs => true);
         SELECT count(*) FROM jq.enqueue_many('noise',
             (SELECT jsonb_agg(jsonb_build_object('payload', g, 'delay', (g % 3600) || ' seconds')) FROM generate_series(1, 120000) g),
             specs => true);
         ANALYZE;",
    )
    .unwrap();
    let mid: i64 = c
        .query_one("SELECT id FROM jq.jobs WHERE queue = 'obs' AND state = 'ready' AND priority = 1
                    ORDER BY run_at, id OFFSET 20000 LIMIT 1", &[])
        .unwrap()
        .get(0);
    let dead_mid: i64 = c
        .query_one("SELECT id FROM jq.jobs WHERE queue = 'obs' AND state = 'dead' ORDER BY id OFFSET 1500 LIMIT 1", &[])
        .unwrap()
        .get(0);

    let mut t = Traced::connect(&db);
    let mut f = Failures::default();
    t.begin(Mode::Auto);
    let cases: Vec<(String, &str, i64)> = vec![
        ("SELECT * FROM jq.list_jobs('obs', 'ready')".into(), "jobs_claim_idx", 50),
        (format!("SELECT * FROM jq.list_jobs('obs', 'ready', after_id => {mid})"), "jobs_claim_idx", 50),
        // Finished jobs are in the history tables (sql/schema.sql), here the first of each ring.
        ("SELECT * FROM jq.list_jobs('obs', 'dead', n => 20)".into(), "jobs_dead_0_queue_idx", 20),
        (format!("SELECT * FROM jq.list_jobs('obs', 'dead', after_id => {dead_mid})"), "jobs_dead_0_queue_idx", 50),
        ("SELECT * FROM jq.list_jobs('obs', 'completed')".into(), "jobs_done_0_queue_idx", 50),
        // obs's scheduled jobs are due after all 120,000 of noise's: read by the queue's hash.
        ("SELECT * FROM jq.list_jobs('obs', 'scheduled')".into(), "jobs_scheduled_queue_idx", 50),
        // A filter nothing matches: the page stops at its scan limit.
        ("SELECT * FROM jq.list_jobs('obs', 'ready', error => 'nothing like it', scan_limit => 500)".into(),
         "jobs_claim_idx", 500),
    ];
    for (call, index, bound) in &cases {
        let (rows, plans) = t.run(call);
        f.expect(!rows.is_empty(), || format!("{call}: no rows"));
        let found = statements(&plans, LISTING);
        f.expect(found.len() == 1, || format!("{call}: {} traced listing statements", found.len()));
        for e in found {
            f.check(check_ordered_pick(e, index, Some(*bound)));
            // Every entry read is one of the page's: nothing read and filtered away. Seen
            // failing with jobs_scheduled_idx, keyed by due time alone ("119967 rows removed by
            // a filter": noise's scheduled jobs), and with the ready keyset as one condition,
            // "priority <= $5 AND (priority < $5 OR (run_at, id) > ...)" ("20001 rows removed":
            // the cursor's priority up to the cursor).
            let removed: f64 = e.nodes().iter().filter_map(|n| n.get("Rows Removed by Filter")?.as_f64()).sum();
            f.expect(removed == 0.0, || e.fail(format!("{removed} rows removed by a filter")));
        }
        expect_no_disabled_cost(&mut f, &plans, call);
    }
    // The overview: each capped count reads at most depth_cap + 1 rows, the oldest claimable
    // job one index entry per priority; nothing reads the 240,000 ready jobs or the 123,000
    // scheduled ones (the scheduled counts, once one walk of jobs_scheduled_idx for all queues,
    // read 100 x depth_cap entries: seen failing, "returned 100000 rows"), and nothing
    // scans jq.jobs sequentially (a Seq Scan filtering for one queue's ready jobs read up to the
    // whole table before the counts were ordered along their indexes). Two queues: two loops.
    for mode in [Mode::Custom, Mode::Generic] {
        t.rollback();
        t.begin(mode);
        let call = "SELECT * FROM jq.overview(depth_cap => 1000)";
        let (rows, plans) = t.run(call);
        f.expect(rows.len() == 2, || format!("{call}: {} rows", rows.len()));
        f.expect(!plans.is_empty(), || format!("{call}: nothing traced"));
        // (Statements that read no jq.jobs row, such as the collation check, are left out.)
        for e in plans.iter().filter(|e| e.nodes().into_iter().any(reads_jobs)) {
            f.check(check_indexed(e));
            f.check(check_bounded_reads(e, 2 * 1001));
        }
    }
    t.rollback();
    // The throughput: with 3,000 failed executions, 3,000 dead and 3,000 completed jobs in obs,
    // each of its three reads returns at most max_rows over its loops (one per queue), the failed
    // executions from execution_log_failed_idx (a Seq Scan or the BRIN index read every failure
    // of the hour: the overview's cost grew with the failures). Seen failing with the index
    // dropped (a Seq Scan on execution_log returning 3,000 rows).
    for mode in [Mode::Custom, Mode::Generic] {
        t.begin(mode);
        let call = "SELECT * FROM jq.throughput(max_rows => 1000)";
        let (rows, plans) = t.run(call);
        f.expect(!rows.is_empty(), || format!("{call}: no rows"));
        let log_scans: Vec<_> = plans
            .iter()
            .flat_map(|e| e.nodes().into_iter().map(move |n| (e, n)))
            .filter(|(_, n)| n.get("Relation Name").and_then(|v| v.as_str()) == Some("execution_log"))
            .collect();
        f.expect(!log_scans.is_empty(), || format!("{call}: execution_log not read"));
        for (e, n) in log_scans {
            let index = n.get("Index Name").and_then(|v| v.as_str());
            f.expect(index == Some("execution_log_failed_idx"),
                     || e.fail(format!("reads execution_log by {} {index:?}, not execution_log_failed_idx", node_type(n))));
            let rows = actual_rows(n).unwrap_or(i64::MAX);
            f.expect(rows <= 2 * 1001, || e.fail(format!("its execution_log scan returned {rows} rows for max_rows 1000")));
        }
        for e in plans.iter().filter(|e| e.nodes().into_iter().any(reads_jobs)) {
            f.check(check_bounded_reads(e, 2 * 1001));
        }
        t.rollback();
    }
    // And the counts are the failures' (all 3,000 when max_rows covers them), not flagged partial.
    let (failed, partial): (i64, bool) = {
        let r = c
            .query_one("SELECT sum(failed)::bigint, bool_or(partial) FROM jq.throughput('obs', max_rows => 5000)", &[])
            .unwrap();
        (r.get(0), r.get(1))
    };
    f.expect(failed == 3000 && !partial, || format!("throughput of obs: failed {failed}, partial {partial}; expected 3000, false"));
    let partial: bool = c
        .query_one("SELECT bool_or(partial) FROM jq.throughput('obs', max_rows => 1000)", &[])
        .unwrap()
        .get(0);
    f.expect(partial, || "throughput of obs with max_rows 1000 under 3,000 failures: not flagged partial".into());
    f.finish();
}
