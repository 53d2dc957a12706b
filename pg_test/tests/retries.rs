//! Retries end to end, driven by the maintenance functions with explicit instants: explicit
//! failures are retried with the queue's backoff until max_attempts, then go dead; the edge
//! cases of max_attempts and of jq.fail; retry_in; the backoff distribution; jq.retry.
//!
//! Negative controls: `JQ_TEST_BREAK=<name>` makes a test replace one jq function in its own
//! database with a broken copy (see `jq_pg_test::sabotage`), and the test must then fail. The
//! comment at each test records what was broken and how the test failed.

use jq_pg_test::{
    broken, claim, complete, executions, job_row, sabotage, sqlstate, state, Claimed, Client, TestDb,
};

const FAIL: &str = "jq.fail(bigint,uuid,text,interval)";

/// jq.fail -> the new state as text, or None.
fn fail(c: &mut Client, j: &Claimed, error: &str, retry_in: Option<&str>) -> Option<String> {
    c.query_one("SELECT jq.fail($1, $2, $3, $4::text::interval)::text", &[&j.id, &j.token, &error, &retry_in])
        .expect("jq.fail")
        .get(0)
}

fn one_i32(c: &mut Client, sql: &str) -> i32 {
    c.query_one(sql, &[]).expect(sql).get(0)
}

fn one_i64(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).expect(sql).get(0)
}

/// Seconds from the end of execution `seq` (the failure) to the job's run_at.
fn retry_delay(c: &mut Client, id: i64, seq: i32) -> f64 {
    c.query_one(
        "SELECT extract(epoch FROM j.run_at - e.finished_at)::float8
         FROM jq.jobs j JOIN jq.executions e ON e.job_id = j.id AND e.seq = $2::int4 WHERE j.id = $1",
        &[&id, &seq],
    )
    .expect("retry delay")
    .get(0)
}

// Scenario (explicit failures never retried). Negative control: JQ_TEST_BREAK=fail_off_by_one
// (jq.fail goes dead only once attempt > max_attempts) made this test fail: the third failure
// returned 'scheduled' instead of 'dead'.
#[test]
fn failed_job_is_retried_after_the_fixed_backoff_until_max_attempts_then_dead() {
    let db = TestDb::new("retry_path");
    let mut c = db.connect();
    if broken("fail_off_by_one") {
        sabotage(&mut c, FAIL, "v_job.attempt >= v_job.max_attempts", "v_job.attempt > v_job.max_attempts", 1);
    }
    c.execute(
        "SELECT jq.create_queue('r', backoff => 'fixed', backoff_base => '10 seconds', jitter => 'none')",
        &[],
    )
    .unwrap();
    let id = one_i64(&mut c, "SELECT jq.enqueue('r', max_attempts => 3)");
    let mut w = db.connect();
    for attempt in 1..=3 {
        let j = claim(&mut w, "r", "w", 1, None).pop().unwrap_or_else(|| panic!("attempt {attempt}: nothing to claim"));
        assert_eq!((j.id, j.attempt), (id, attempt));
        // The server's clock around the failure bounds the failure time.
        let before: String = w.query_one("SELECT clock_timestamp()::text", &[]).unwrap().get(0);
        let st = fail(&mut w, &j, "boom", None);
        let in_window: bool = w
            .query_one(
                "SELECT run_at BETWEEN $2::text::timestamptz + interval '10 seconds'
                                   AND clock_timestamp() + interval '10 seconds'
                 FROM jq.jobs WHERE id = $1",
                &[&id, &before],
            )
            .unwrap()
            .get(0);
        if attempt < 3 {
            assert_eq!(st.as_deref(), Some("scheduled"), "failure {attempt}");
            assert!(in_window, "failure {attempt}: run_at is not failure time + 10 s");
            assert_eq!(retry_delay(&mut c, id, attempt), 10.0, "failure {attempt}: delay from the recorded failure");
            assert!(claim(&mut w, "r", "w", 1, None).is_empty(), "claimed before its retry was promoted");
            assert_eq!(
                one_i32(&mut c, &format!("SELECT jq._promote((SELECT run_at - interval '1 millisecond' FROM jq.jobs WHERE id = {id}))")),
                0,
                "promoted before its run_at"
            );
            assert_eq!(state(&mut c, id).as_deref(), Some("scheduled"));
            assert_eq!(one_i32(&mut c, "SELECT jq._promote(now() + interval '11 seconds')"), 1);
            assert_eq!(state(&mut c, id).as_deref(), Some("ready"));
        } else {
            assert_eq!(st.as_deref(), Some("dead"), "failure {attempt} of max_attempts 3");
        }
    }
    assert!(claim(&mut w, "r", "w", 1, None).is_empty(), "a dead job is claimed");
    assert_eq!(one_i32(&mut c, "SELECT jq._promote(now() + interval '1 day')"), 0);
    assert_eq!(state(&mut c, id).as_deref(), Some("dead"));
    let (attempt, last_error, finished): (i32, Option<String>, bool) = {
        let r = c.query_one("SELECT attempt, last_error, finished_at IS NOT NULL FROM jq.jobs WHERE id = $1", &[&id]).unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!((attempt, last_error.as_deref(), finished), (3, Some("boom"), true));
    let f = |s: i32| (s, s, "failed".to_string());
    assert_eq!(executions(&mut c, id), vec![f(1), f(2), f(3)]);
}

// Scenario, edge probes. Negative controls: JQ_TEST_BREAK=fail_no_fence (jq.fail's
// state = 'running' fence removed) made this test fail: jq.fail on a completed job (its lease
// token is still on the row) rewrote the job ("fail on a completed job": scheduled instead of
// NULL; seen again after completions stopped writing history rows, which had also made it die
// with 23505 on the duplicate (job_id, seq) history row). JQ_TEST_BREAK=enqueue_no_attempts_check
// (jq._job_problem accepts any max_attempts) made it fail: while jq.jobs had a CHECK on
// max_attempts, with 23514 instead of 22023; since the CHECK went (sql/schema.sql says why),
// enqueue's check is the only one, and the control was seen failing with "expected an error,
// got Row": a job with max_attempts 0 was enqueued.
#[test]
fn max_attempts_edge_cases_and_fail_on_finished_unknown_or_already_failed_jobs_change_nothing() {
    let db = TestDb::new("q05");
    let mut c = db.connect();
    if broken("fail_no_fence") {
        // Both fences: the SELECT ... FOR UPDATE that reads the job and the UPDATE.
        sabotage(&mut c, FAIL, "AND j.state::text = 'running'", "", 2);
    }
    if broken("enqueue_no_attempts_check") {
        sabotage(&mut c, "jq._job_problem(jsonb,text,integer,text)", "max_attempts IS NOT NULL AND (max_attempts < 1 OR max_attempts > 1000000)", "false", 1);
    }
    c.execute("SELECT jq.create_queue('e', max_attempts => 7)", &[]).unwrap();
    for m in [0, -1, 1_000_001] {
        assert_eq!(sqlstate(c.query_one("SELECT jq.enqueue('e', max_attempts => $1)", &[&m])), "22023", "max_attempts {m}");
        assert_eq!(
            sqlstate(c.query("SELECT jq.enqueue_many('e', '[1, 2]', max_attempts => $1)", &[&m])),
            "22023",
            "enqueue_many max_attempts {m}"
        );
        let spec = format!("[{{\"payload\": 1}}, {{\"payload\": 2, \"max_attempts\": {m}}}]");
        assert_eq!(
            sqlstate(c.query("SELECT jq.enqueue_many('e', $1::text::jsonb, specs => true)", &[&spec])),
            "22023",
            "enqueue_many spec max_attempts {m}"
        );
    }
    assert_eq!(one_i64(&mut c, "SELECT count(*) FROM jq.jobs"), 0, "a rejected enqueue wrote something");

    let mut w = db.connect();
    // NULL takes the queue's default.
    let id = one_i64(&mut c, "SELECT jq.enqueue('e', max_attempts => NULL)");
    assert_eq!(one_i32(&mut c, &format!("SELECT max_attempts FROM jq.jobs WHERE id = {id}")), 7);
    let j = claim(&mut w, "e", "w", 1, None).pop().unwrap();
    assert!(complete(&mut w, &j));

    // max_attempts 1: the first failure is final.
    let one = one_i64(&mut c, "SELECT jq.enqueue('e', max_attempts => 1)");
    let j1 = claim(&mut w, "e", "w", 1, None).pop().unwrap();
    assert_eq!(j1.id, one);
    assert_eq!(fail(&mut w, &j1, "only try", None).as_deref(), Some("dead"));

    // fail on a completed job: NULL, nothing changes.
    let before = job_row(&mut c, id);
    assert_eq!(fail(&mut w, &j, "late failure", None), None, "fail on a completed job");
    assert_eq!(job_row(&mut c, id), before, "fail on a completed job changed it");
    assert_eq!(executions(&mut c, id), vec![(1, 1, "completed".to_string())]);

    // fail on an unknown id.
    let ghost = Claimed { id: id + 1_000_000, token: j.token, attempt: 1 };
    assert_eq!(fail(&mut w, &ghost, "nobody", None), None, "fail on an unknown id");
    assert_eq!(one_i64(&mut c, "SELECT count(*) FROM jq.jobs"), 2);

    // fail twice on the same claim: the second is NULL and changes nothing.
    let twice = one_i64(&mut c, "SELECT jq.enqueue('e')");
    let jt = claim(&mut w, "e", "w", 1, None).pop().unwrap();
    assert_eq!(jt.id, twice);
    assert_eq!(fail(&mut w, &jt, "first", None).as_deref(), Some("scheduled"));
    let before = job_row(&mut c, twice);
    assert_eq!(fail(&mut w, &jt, "second", None), None, "second fail of one claim");
    assert_eq!(job_row(&mut c, twice), before, "a second fail of one claim changed the job");
    assert_eq!(executions(&mut c, twice), vec![(1, 1, "failed".to_string())]);
}

// Negative control: JQ_TEST_BREAK=fail_ignores_retry_in (jq.fail uses the policy even when
// retry_in is given) made this test fail: the delay was the policy's 10 s instead of 1 hour.
#[test]
fn retry_in_overrides_the_backoff_policy_and_zero_makes_the_job_ready_at_once() {
    let db = TestDb::new("retry_in");
    let mut c = db.connect();
    if broken("fail_ignores_retry_in") {
        sabotage(&mut c, FAIL, "coalesce(fail.retry_in,", "coalesce(NULL::interval,", 1);
    }
    c.execute(
        "SELECT jq.create_queue('r', backoff => 'fixed', backoff_base => '10 seconds', jitter => 'none')",
        &[],
    )
    .unwrap();
    let id = one_i64(&mut c, "SELECT jq.enqueue('r')");
    let mut w = db.connect();
    let j = claim(&mut w, "r", "w", 1, None).pop().unwrap();
    assert_eq!(fail(&mut w, &j, "later", Some("1 hour")).as_deref(), Some("scheduled"));
    assert_eq!(retry_delay(&mut c, id, 1), 3600.0, "retry_in replaces the policy's delay");
    assert_eq!(one_i32(&mut c, "SELECT jq._promote(now() + interval '11 seconds')"), 0, "promoted at the policy's delay");
    assert_eq!(one_i32(&mut c, "SELECT jq._promote(now() + interval '1 hour 1 second')"), 1);

    let j = claim(&mut w, "r", "w", 1, None).pop().expect("promoted job");
    assert_eq!(j.attempt, 2);
    assert_eq!(fail(&mut w, &j, "now", Some("0 seconds")).as_deref(), Some("ready"), "a zero retry_in");
    assert_eq!(retry_delay(&mut c, id, 2), 0.0);
    // No promotion in between: the job is claimable at once.
    let j = claim(&mut w, "r", "w", 1, None).pop().expect("ready at once after a zero retry_in");
    assert_eq!((j.id, j.attempt), (id, 3));
    assert!(complete(&mut w, &j));
}

/// The delay before the retry of `attempt` without jitter, computed here independently of
/// jq.backoff_seconds: fixed = base, linear = base * attempt, exponential = base * 2^(attempt-1),
/// capped at max. As SQL over columns p (policy), a (attempt).
const COMPUTED_SQL: &str = "least({max}::float8, CASE p WHEN 'fixed' THEN {base}::float8
                                             WHEN 'linear' THEN {base}::float8 * a
                                             ELSE {base}::float8 * 2 ^ (a - 1) END)";

fn computed_sql(base: f64, max: f64) -> String {
    COMPUTED_SQL.replace("{base}", &base.to_string()).replace("{max}", &max.to_string())
}

// Negative controls: JQ_TEST_BREAK=fail_no_cap (jq.fail passes an effectively infinite
// backoff_max) made this test fail at exponential_full attempt 4: 67 to 70 of 200 delays above
// the computed (capped) 5 s ("delays outside [0, computed]"). JQ_TEST_BREAK=fail_no_jitter (jq.fail passes jitter 'none' whatever the queue says)
// made it fail at fixed_full attempt 1: every delay was exactly the computed 1 s (no spread).
#[test]
fn backoff_delays_stay_within_zero_and_the_computed_delay_and_never_exceed_backoff_max() {
    let db = TestDb::new("backoff");
    let mut c = db.connect();
    if broken("fail_no_cap") {
        sabotage(&mut c, FAIL, "extract(epoch FROM v_job.backoff_max)::float8", "1e9::float8", 1);
    }
    if broken("fail_no_jitter") {
        sabotage(&mut c, FAIL, "v_job.jitter::text", "'none'", 1);
    }

    // 1. The function itself: 9,000 draws per policy over attempts 1..30 with random().
    let sql = format!(
        "WITH s AS (
             SELECT p, a, jq.backoff_seconds(p, 2, 100, a, 'full', random()) AS d,
                    jq.backoff_seconds(p, 2, 100, a, 'none', random()) AS plain,
                    {} AS c
             FROM unnest(ARRAY['fixed', 'linear', 'exponential']) p, generate_series(1, 30) a,
                  generate_series(1, 300) n)
         SELECT p, count(*) FILTER (WHERE d < 0 OR d > c), count(*) FILTER (WHERE d > 100),
                count(*) FILTER (WHERE plain <> c), min(d / c), max(d / c)
         FROM s GROUP BY p ORDER BY p",
        computed_sql(2.0, 100.0)
    );
    for r in c.query(sql.as_str(), &[]).unwrap() {
        let (p, outside, over_max, plain_off, lo, hi): (String, i64, i64, i64, f64, f64) =
            (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5));
        assert_eq!(outside, 0, "{p}: full-jitter draws outside [0, computed]");
        assert_eq!(over_max, 0, "{p}: draws above backoff_max");
        assert_eq!(plain_off, 0, "{p}: jitter none differs from the computed delay");
        assert!(lo < 0.1 && hi > 0.9, "{p}: full jitter does not spread over [0, computed): {lo}..{hi}");
    }

    // 2. Real failures: 200 jobs per policy, failed 5 times each, full jitter and none; base
    //    1 s, backoff_max 5 s (exponential reaches the cap at attempt 4, linear at 5).
    let computed = computed_sql(1.0, 5.0);
    let mut w = db.connect();
    for policy in ["fixed", "linear", "exponential"] {
        for jitter in ["full", "none"] {
            let queue = format!("{policy}_{jitter}");
            c.execute(
                "SELECT jq.create_queue($1, backoff => $2::text::jq.backoff_policy, backoff_base => '1 second',
                                        backoff_max => '5 seconds', jitter => $3::text::jq.jitter_mode)",
                &[&queue, &policy, &jitter],
            )
            .unwrap();
            c.execute("SELECT jq.enqueue_many($1, (SELECT jsonb_agg(g) FROM generate_series(1, 200) g))", &[&queue])
                .unwrap();
            for attempt in 1..=5 {
                let got = claim(&mut w, &queue, "w", 200, None);
                assert_eq!(got.len(), 200, "{queue} attempt {attempt}");
                assert!(got.iter().all(|j| j.attempt == attempt));
                let ids: Vec<i64> = got.iter().map(|j| j.id).collect();
                let tokens: Vec<uuid::Uuid> = got.iter().map(|j| j.token).collect();
                let scheduled: i64 = w
                    .query_one(
                        "SELECT count(*) FILTER (WHERE s = 'scheduled')
                         FROM (SELECT jq.fail(i, t, 'boom') AS s FROM unnest($1::bigint[], $2::uuid[]) u(i, t)) f",
                        &[&ids, &tokens],
                    )
                    .unwrap()
                    .get(0);
                // A full-jitter draw of exactly 0 would make the job ready at once: allowed.
                let r = c
                    .query_one(
                        format!(
                            "SELECT count(*) FILTER (WHERE d < 0 OR d > c + 1e-6),
                                    count(*) FILTER (WHERE d > 5 + 1e-6),
                                    count(*) FILTER (WHERE abs(d - c) > 1e-6),
                                    coalesce(min(d / c), 0), coalesce(max(d / c), 0), count(*)
                             FROM (SELECT extract(epoch FROM j.run_at - e.finished_at)::float8 AS d,
                                          $3::text AS p, $2::int AS a
                                   FROM jq.jobs j JOIN jq.executions e ON e.job_id = j.id AND e.seq = $2::int
                                   WHERE j.queue = $1) x,
                                  LATERAL (SELECT {computed} AS c) k"
                        )
                        .as_str(),
                        &[&queue, &attempt, &policy],
                    )
                    .unwrap();
                let (outside, over_max, not_exact, lo, hi, n): (i64, i64, i64, f64, f64, i64) =
                    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5));
                let at = format!("{queue} attempt {attempt}");
                assert_eq!(n, 200, "{at}");
                assert_eq!(outside, 0, "{at}: delays outside [0, computed]");
                assert_eq!(over_max, 0, "{at}: delays above backoff_max");
                if jitter == "none" {
                    assert_eq!(not_exact, 0, "{at}: without jitter the delay must equal the computed one");
                    assert_eq!(scheduled, 200, "{at}");
                } else {
                    assert!(lo < 0.25 && hi > 0.75, "{at}: full jitter does not spread the delays: {lo}..{hi}");
                }
                c.execute("SELECT jq._promote(now() + interval '1 minute')", &[]).unwrap();
            }
        }
    }
}

// Negative control: JQ_TEST_BREAK=retry_any_state (jq.retry also accepts completed jobs) made
// this test fail: jq.retry of the completed job returned true and reopened it.
#[test]
fn retry_puts_a_dead_job_back_to_ready_with_attempt_zero_and_refuses_a_completed_one() {
    let db = TestDb::new("retry_dead");
    let mut c = db.connect();
    if broken("retry_any_state") {
        sabotage(&mut c, "jq.retry(bigint,bigint)", "j.state IN ('dead', 'cancelled')", "j.state IN ('dead', 'cancelled', 'completed')", 1);
    }
    c.execute("SELECT jq.create_queue('r')", &[]).unwrap();
    let id = one_i64(&mut c, "SELECT jq.enqueue('r', max_attempts => 1)");
    let mut w = db.connect();
    let j = claim(&mut w, "r", "w", 1, None).pop().unwrap();
    assert_eq!(fail(&mut w, &j, "boom", None).as_deref(), Some("dead"));
    assert!(claim(&mut w, "r", "w", 1, None).is_empty());

    let ok: bool = c.query_one("SELECT jq.retry($1)", &[&id]).unwrap().get(0);
    assert!(ok, "jq.retry of a dead job");
    let r = c
        .query_one(
            "SELECT state::text, attempt, lease_expiries, finished_at IS NULL, last_error FROM jq.jobs WHERE id = $1",
            &[&id],
        )
        .unwrap();
    let (st, attempt, expiries, unfinished, last_error): (String, i32, i32, bool, Option<String>) =
        (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
    assert_eq!((st.as_str(), attempt, expiries, unfinished), ("ready", 0, 0, true));
    assert_eq!(last_error.as_deref(), Some("boom"), "jq.retry keeps last_error");

    let again = claim(&mut w, "r", "w", 1, None).pop().expect("claimable after jq.retry");
    assert_eq!((again.id, again.attempt), (id, 1));
    assert!(complete(&mut w, &again));
    let before = job_row(&mut c, id);
    let ok: bool = c.query_one("SELECT jq.retry($1)", &[&id]).unwrap().get(0);
    assert!(!ok, "jq.retry of a completed job");
    assert_eq!(job_row(&mut c, id), before, "jq.retry changed a completed job");
    let ok: bool = c.query_one("SELECT jq.retry($1)", &[&(id + 1_000_000)]).unwrap().get(0);
    assert!(!ok, "jq.retry of an unknown id");
    assert_eq!(
        executions(&mut c, id),
        vec![(1, 1, "failed".to_string()), (2, 1, "completed".to_string())]
    );
}
