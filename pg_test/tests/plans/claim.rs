//! The claim walks jobs_claim_idx in order and reads about n rows; a one-job claim updates its row by ctid.

use jq_pg_test::{Client, TestDb};

use super::data::{build_base, counts, drain, enqueue_plain, enqueue_specs, Then};
use super::plan_tree::{
    actual_rows, check_bounded_reads, check_indexed, check_ordered_pick, node_type, Explained, Failures, ORDERED_SCANS,
    SORTS,
};
use super::statements::{explain, CLAIM_PICK, CLAIM_PICK_ONE, CLAIM_RUNNING_COUNT, Mode};
use super::traced::{one_statement, picking_statement, statements, Traced};

/// The claim's inner selection walks jobs_claim_idx in ORDER BY order and stops after n rows,
/// for n = 1, 10, 100, with the custom and the generic plan; so does the claim statement inside
/// jq.claim as it really runs (seven calls in a row under each session plan_cache_mode; the
/// batch calls run jq._claim_batch's pinned generic plan whatever the session says, see
/// batch_claims_reuse_one_generic_plan), and its UPDATE
/// reads only the n picked rows. The max_concurrency
/// running count reads an index, never the table.
///
/// Seen failing (development run, not kept): with jq.claim replaced in this test's database by
/// a variant whose selection says `j.state::text = 'ready'` (a predicate that no longer implies
/// the index predicate), the traced checks failed for every call in every plan_cache_mode: a
/// Seq Scan on jobs, a Sort, and 1,109..1,250 rows read for batches of 1..100. The permanent
/// negative control for the index side is the NULLS LAST test below.
#[test]
fn claim_selection_walks_claim_index_in_order_and_reads_n_rows() {
    let db = TestDb::new("plans_claim");
    let mut c = build_base(&db);
    CLAIM_PICK.check_source(&mut c);
    CLAIM_PICK_ONE.check_source(&mut c);
    CLAIM_RUNNING_COUNT.check_source(&mut c);
    let mut f = Failures::default();

    for mode in [Mode::Custom, Mode::Generic] {
        for n in [1i64, 10, 100] {
            let e = explain(&mut c, &CLAIM_PICK, &format!("'plan.1', {n}"), mode);
            f.check(check_ordered_pick(&e, "jobs_claim_idx", Some(n)));
            f.expect(actual_rows(&e.root) == Some(n), || e.fail(format!("expected {n} jobs")));
        }
        for q in ["plan.3", "no-such-queue"] {
            let e = explain(&mut c, &CLAIM_RUNNING_COUNT, &format!("'{q}'"), mode);
            f.check(check_indexed(&e));
        }
    }

    // The function itself. Seven calls in one transaction cover plpgsql's switch to a cached
    // generic plan after five custom ones under plan_cache_mode = auto.
    let mut t = Traced::connect(&db);
    for mode in [Mode::Custom, Mode::Generic, Mode::Auto] {
        t.begin(mode);
        for (call, n) in [1i64, 10, 100, 10, 10, 10, 10].into_iter().enumerate() {
            let sql = format!("SELECT id FROM jq.claim('plan.2', 'plans-probe', {n}, '1 minute')");
            let (rows, plans) = t.run(&sql);
            assert_eq!(rows.len() as i64, n, "{sql}");
            let (stmt, picked) = picking_statement(&plans, &sql);
            let picked = Explained { label: format!("{} (call {} in {mode:?})", picked.label, call + 1),
                                     root: picked.root };
            f.check(check_ordered_pick(&picked, "jobs_claim_idx", Some(n)));
            // The UPDATE finds each picked row by primary key: n rows in all, no scan.
            f.check(check_indexed(stmt));
            f.check(check_bounded_reads(stmt, n));
        }
        t.rollback();
    }

    // The running count as jq.claim runs it, on a queue with a cap (set in the rolled-back
    // transaction through jq.alter_queue).
    for mode in [Mode::Custom, Mode::Generic] {
        t.begin(mode);
        t.run("SELECT (jq.alter_queue('plan.3', max_concurrency => 100000)).name");
        let sql = "SELECT id FROM jq.claim('plan.3', 'plans-probe', 10, '1 minute')";
        let (rows, plans) = t.run(sql);
        assert_eq!(rows.len(), 10);
        // (plpgsql strips the INTO clause from the statement it runs.)
        f.check(check_indexed(one_statement(&plans, "SELECT pg_catalog.count(*) FROM ONLY jq.jobs j", sql)));
        t.rollback();
    }
    f.finish();
}

/// A claim that gets slow as running,
/// finished and unclaimable rows pile up, because its plan scans or sorts them. Here: 200,000
/// running jobs with live leases spread over 50 polled queues, 1,000 ready jobs over those 50
/// queues (20 each), 300,000 ready jobs of higher priority in a queue no worker polls; ANALYZE.
/// Claiming from one small queue still walks jobs_claim_idx without a Sort and reads about n
/// rows, and jq.claim returns exactly that queue's best jobs in priority DESC, run_at, id order.
///
/// Full scale, not scaled down: the whole test takes about 7 s on the 2-core development machine,
/// far below the ~60 s of building after which scaling the data down by 4 would have been
/// acceptable. (The scenario's 1,000,000 finished and 500,000 scheduled rows are left out: they
/// are outside jobs_claim_idx just like the running rows, and the base data set of the other
/// tests covers finished and scheduled rows.)
#[test]
fn claim_from_small_queue_stays_on_claim_index_beside_deep_queue_and_many_leases() {
    let db = TestDb::new("plans_q10");
    let mut c = db.connect();
    let small: Vec<String> = (0..50).map(|i| format!("q{i}")).collect();
    for q in &small {
        c.execute("SELECT jq.create_queue($1)", &[q]).unwrap();
    }
    c.execute("SELECT jq.create_queue('unpolled')", &[]).unwrap();
    for q in &small {
        enqueue_plain(&mut c, q, 4_000, None);
        assert_eq!(drain(&mut c, q, "1 day", Then::KeepRunning), 4_000);
    }
    enqueue_specs(&mut c, "unpolled", 300_000, "jsonb_build_object('priority', 9)");
    // The small queues' jobs: priorities 0..2 and run_at a few minutes in the past, so the order
    // depends on all three sort keys; ids come back in array order (g order).
    let spec = "jsonb_build_object('priority', g % 3,
                                   'run_at', now() - make_interval(mins => (g * 7) % 5),
                                   'payload', jsonb_build_object('g', g))";
    let mut q7_ids = Vec::new();
    for q in &small {
        let ids = enqueue_specs(&mut c, q, 20, spec);
        if q == "q7" {
            q7_ids = ids;
        }
    }
    c.batch_execute("ANALYZE jq.jobs; ANALYZE jq.queues").unwrap();
    assert_eq!(counts(&mut c), "ready=301000 running=200000");

    CLAIM_PICK.check_source(&mut c);
    let mut f = Failures::default();
    for mode in [Mode::Custom, Mode::Generic] {
        for n in [1i64, 10, 20] {
            let e = explain(&mut c, &CLAIM_PICK, &format!("'q7', {n}"), mode);
            f.check(check_ordered_pick(&e, "jobs_claim_idx", Some(n)));
            f.expect(actual_rows(&e.root) == Some(n), || e.fail(format!("expected {n} jobs")));
        }
    }
    // The full claim as it runs. With a claim-start hint (src/claim_hint.rs; the first call
    // leaves one) a claim first reads the hint's priority level, then the full claim takes the
    // rest: two picking statements. The hinted range is tested in tests/claim_hint.rs.
    let mut t = Traced::connect(&db);
    t.client.batch_execute("SET jq.claim_hints = off").unwrap();
    for mode in [Mode::Custom, Mode::Generic] {
        t.begin(mode);
        let sql = "SELECT id FROM jq.claim('q7', 'plans-probe', 10, '30 seconds')";
        let (rows, plans) = t.run(sql);
        assert_eq!(rows.len(), 10);
        let (stmt, picked) = picking_statement(&plans, sql);
        f.check(check_ordered_pick(&picked, "jobs_claim_idx", Some(10)));
        f.check(check_bounded_reads(stmt, 10));
        t.rollback();
    }
    f.finish();

    // What jq.claim hands out: q7's 20 jobs by priority DESC, run_at (earlier first), id.
    let mut expected: Vec<(i32, i32, i64)> = q7_ids
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let g = i as i32 + 1;
            (g % 3, (g * 7) % 5, id)
        })
        .collect();
    expected.sort_by_key(|&(prio, mins_ago, id)| {
        (std::cmp::Reverse(prio), std::cmp::Reverse(mins_ago), id)
    });
    let expected_ids: Vec<i64> = expected.iter().map(|e| e.2).collect();
    let mut got = Vec::new();
    for _ in 0..2 {
        let rows = c
            .query("SELECT id, queue FROM jq.claim('q7', 'plans-worker', 10, '30 seconds')", &[])
            .unwrap();
        assert_eq!(rows.len(), 10);
        for r in &rows {
            assert_eq!(r.get::<_, String>(1), "q7");
        }
        got.extend(rows.iter().map(|r| r.get::<_, i64>(0)));
    }
    assert_eq!(got, expected_ids,
               "jq.claim must return q7's jobs in priority DESC, run_at, id order");
    assert!(c.query("SELECT id FROM jq.claim('q7', 'plans-worker', 10)", &[]).unwrap().is_empty(),
            "q7 is empty now; the unpolled queue's jobs must never be handed out for q7");
}

/// Every descending column of jq's indexes is DESC NULLS FIRST, the placement a plain
/// ORDER BY ... DESC asks for; for jobs_claim_idx that is read straight from pg_indexes and
/// pg_index (the index's shape as the catalog has it, not as the SQL source says).
fn check_index_shape(c: &mut Client) -> Result<(), String> {
    let def: String = c
        .query_one("SELECT indexdef FROM pg_catalog.pg_indexes
                    WHERE schemaname = 'jq' AND indexname = 'jobs_claim_idx'", &[])
        .map_err(|e| format!("jobs_claim_idx missing from pg_indexes: {e}"))?
        .get(0);
    let want = "CREATE INDEX jobs_claim_idx ON jq.jobs USING btree (hashtextextended(queue, (0)::bigint), priority DESC, run_at, id) \
                INCLUDE (queue) WHERE (state = 'ready'::jq.job_state)";
    if def != want {
        return Err(format!("jobs_claim_idx is\n  {def}\nexpected\n  {want}"));
    }
    // indoption bit 0 = DESC, bit 1 = NULLS FIRST.
    let bad: Vec<String> = c
        .query("SELECT c.relname || '.' || pg_catalog.pg_get_indexdef(i.indexrelid, k.n, true)
                       || ' indoption=' || i.indoption[k.n - 1]
                FROM pg_catalog.pg_index i
                JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
                JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace
                CROSS JOIN LATERAL generate_series(1, i.indnkeyatts::int) AS k(n)
                WHERE s.nspname = 'jq' AND (i.indoption[k.n - 1] & 1) = 1
                  AND (i.indoption[k.n - 1] & 2) = 0", &[])
        .map_err(|e| e.to_string())?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !bad.is_empty() {
        return Err(format!("descending index columns with NULLS LAST: {bad:?}"));
    }
    Ok(())
}

/// The claim index keeps priority DESC NULLS FIRST, and the plan check notices when it does not.
///
/// Negative control: in this test's own database the claim index is recreated with
/// priority DESC NULLS LAST (DROP INDEX + CREATE INDEX). That is a schema change made to show the
/// checks can fail, not a change of any job's state, and nothing else sees that database. Both
/// the catalogue check and the plan check must then fail: the claim sorts the queue (or leaves
/// the index), which is exactly the silent regression this test exists for.
#[test]
fn claim_index_keeps_nulls_first_and_nulls_last_loses_the_ordered_claim() {
    let db = TestDb::new("plans_nulls");
    let mut c = db.connect();
    for q in ["plan.0", "plan.1"] {
        c.execute("SELECT jq.create_queue($1)", &[&q]).unwrap();
        enqueue_plain(&mut c, q, 2_000, None);
        assert_eq!(drain(&mut c, q, "5 minutes", Then::Complete), 2_000);
        enqueue_specs(&mut c, q, 5_000, "jsonb_build_object('priority', g % 5)");
    }
    c.batch_execute("ANALYZE jq.jobs").unwrap();
    CLAIM_PICK.check_source(&mut c);

    let mut f = Failures::default();
    f.check(check_index_shape(&mut c));
    for mode in [Mode::Custom, Mode::Generic] {
        let e = explain(&mut c, &CLAIM_PICK, "'plan.1', 10", mode);
        f.check(check_ordered_pick(&e, "jobs_claim_idx", Some(10)));
    }
    f.finish();

    // The negative control (see the doc comment): same columns, NULLS LAST on priority.
    c.batch_execute(
        "DROP INDEX jq.jobs_claim_idx;
         CREATE INDEX jobs_claim_idx ON jq.jobs (hashtextextended(queue, 0), priority DESC NULLS LAST, run_at, id)
             INCLUDE (queue) WHERE state = 'ready';
         ANALYZE jq.jobs;")
        .unwrap();
    let shape = check_index_shape(&mut c);
    assert!(shape.is_err(), "the catalogue check must reject priority DESC NULLS LAST");
    for mode in [Mode::Custom, Mode::Generic] {
        let e = explain(&mut c, &CLAIM_PICK, "'plan.1', 10", mode);
        let verdict = check_ordered_pick(&e, "jobs_claim_idx", Some(10));
        assert!(verdict.is_err(), "the plan check must fail with a NULLS LAST claim index:\n{}",
                e.text());
        assert!(e.find(SORTS).is_some() || e.scans_of("jobs_claim_idx", ORDERED_SCANS).is_empty(),
                "expected a Sort or no ordered scan of jobs_claim_idx:\n{}", e.text());
    }
    // And jq.claim as it runs (fresh session, so no plan cached from before the change), its
    // full claim: a claim-start hint (src/claim_hint.rs) fixes the priority, and that range
    // stays ordered with either NULLS placement.
    let mut t = Traced::connect(&db);
    t.client.batch_execute("SET jq.claim_hints = off").unwrap();
    for mode in [Mode::Custom, Mode::Generic] {
        t.begin(mode);
        let sql = "SELECT id FROM jq.claim('plan.1', 'plans-probe', 10, '1 minute')";
        let (rows, plans) = t.run(sql);
        assert_eq!(rows.len(), 10);
        let (_, picked) = picking_statement(&plans, sql);
        assert!(check_ordered_pick(&picked, "jobs_claim_idx", Some(10)).is_err(),
                "jq.claim must lose its ordered index walk with a NULLS LAST index ({mode:?}):\n{}",
                picked.text());
        t.rollback();
    }
}

/// A one-job claim updates its row by ctid (a Tid Scan, no index lookup), and looks again by id
/// (jq._claim_batch) only when it claimed nothing but may have locked a row: its transaction
/// then has a transaction id. An empty claim in a transaction without one runs no second
/// statement, with claim-start hints on (hinted and full copies) or off; inside a transaction
/// that already wrote, it does look again (sql/claim.sql, jq.claim).
/// Negative control: `JQ_TEST_BREAK=fallback_without_xid_test` (the fallbacks run on every empty
/// claim): seen failing, "hints on: empty claim in a fresh transaction ran the look
/// by id" (and the same with hints off).
#[test]
fn one_job_claims_update_by_ctid_and_look_again_only_after_a_lock() {
    const FALLBACK: &str = "FROM jq._claim_batch(claim.queue, claim.worker, 1,";
    let db = TestDb::new("plans_ctid");
    let mut c = db.connect();
    if jq_pg_test::broken("fallback_without_xid_test") {
        jq_pg_test::sabotage(&mut c, "jq.claim(text,text,integer,interval,interval,bigint)",
                             " AND pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN", " THEN", 2);
    }
    c.batch_execute(
        "SELECT jq.create_queue('tid');
         SELECT jq.create_queue('other');
         SELECT count(*) FROM jq.enqueue_many('tid', (SELECT jsonb_agg(g) FROM generate_series(1, 6) g));",
    )
    .unwrap();
    let mut t = Traced::connect(&db);
    let mut f = Failures::default();
    for hints in ["on", "off"] {
        t.client.batch_execute(&format!("SET jq.claim_hints = {hints}")).unwrap();
        // Three claims that get a job: by ctid, one statement.
        for call in 1..=3 {
            let sql = "SELECT id FROM jq.claim('tid', 'plans-probe')";
            let (rows, plans) = t.run(sql);
            assert_eq!(rows.len(), 1, "hints {hints}, call {call}: {sql}");
            let claims = statements(&plans, "UPDATE ONLY jq.jobs j SET state = 'running'");
            f.expect(claims.len() == 1, || format!("hints {hints}, call {call}: {} claim statements ran", claims.len()));
            for stmt in claims {
                let tid = stmt.nodes().iter().any(|n| node_type(n) == "Tid Scan");
                f.expect(tid, || stmt.fail(format!("hints {hints}, call {call}: the claimed row was not reached by a Tid Scan")));
            }
            f.expect(statements(&plans, FALLBACK).is_empty(),
                     || format!("hints {hints}, call {call}: a claim that got a job ran the look by id"));
        }
    }
    // The queue is empty now.
    for hints in ["on", "off"] {
        t.client.batch_execute(&format!("SET jq.claim_hints = {hints}")).unwrap();
        let mut hinted = 0;
        for _ in 1..=3 {
            let (rows, plans) = t.run("SELECT id FROM jq.claim('tid', 'plans-probe')");
            assert!(rows.is_empty());
            f.expect(statements(&plans, FALLBACK).is_empty(),
                     || format!("hints {hints}: empty claim in a fresh transaction ran the look by id"));
            hinted += statements(&plans, "p.priority OPERATOR(pg_catalog.=) jq._hint_priority()").len();
        }
        // With hints on, the hinted copy's gate was exercised too (one of the three calls may
        // have had the turn to run the full claim instead).
        f.expect(hints == "off" || hinted > 0, || "hints on: no empty claim ran the hinted copy".to_string());
        // A transaction that already wrote has a transaction id: the claim cannot tell, and looks again.
        t.begin(Mode::Auto);
        t.run("SELECT jq.enqueue('other', '{}')");
        let (rows, plans) = t.run("SELECT id FROM jq.claim('tid', 'plans-probe')");
        assert!(rows.is_empty());
        f.expect(!statements(&plans, FALLBACK).is_empty(),
                 || format!("hints {hints}: empty claim in a transaction with an id did not look again"));
        t.rollback();
    }
    f.finish();
}
