//! A kind's policy: its defaults at enqueue, its backoff at each failure, later changes, bad
//! input, and drop_kind / drop_queue.

use jq_pg_test::{broken, claim, sabotage, sqlstate, TestDb};

use super::{fail, one};

const FAIL: &str = "jq.fail(bigint,uuid,text,interval)";

/// Seconds from a job's last failure to its retry.
fn retry_delay(c: &mut jq_pg_test::Client, id: i64) -> f64 {
    one(c, &format!("SELECT extract(epoch FROM j.run_at - e.finished_at)::float8 FROM jq.jobs j
                     JOIN jq.executions e ON e.job_id = j.id AND e.seq = j.claims WHERE j.id = {id}"))
}

// Negative control: JQ_TEST_BREAK=fail_ignores_kind (jq.fail takes the queue's backoff_base,
// not the kind's) made this test fail: the first retry came after 10 s, not 60 s.
#[test]
fn a_kind_gives_its_defaults_at_enqueue_and_its_backoff_at_each_failure() {
    let db = TestDb::new("kind_policy");
    let mut c = db.connect();
    if broken("fail_ignores_kind") {
        sabotage(&mut c, FAIL, "coalesce(k.backoff_base, q.backoff_base)", "q.backoff_base", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('q', max_attempts => 25, backoff => 'fixed', backoff_base => '10 seconds', jitter => 'none');
         SELECT jq.alter_kind('q', 'scan', max_attempts => 3, backoff_base => '1 minute', timeout => '90 seconds')",
    )
    .unwrap();
    let scan: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'scan')");
    let other: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'other')");
    let explicit: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'scan', max_attempts => 7)");
    let many: Vec<i64> = c
        .query("SELECT * FROM jq.enqueue_many('q', '[{\"kind\": \"scan\"}, {}]', specs => true)", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let row = |c: &mut jq_pg_test::Client, id: i64| -> (i32, Option<String>) {
        let r = c.query_one("SELECT max_attempts, timeout::text FROM jq.jobs WHERE id = $1", &[&id]).unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(row(&mut c, scan), (3, Some("00:01:30".into())), "the kind's defaults at enqueue");
    assert_eq!(row(&mut c, other), (25, None), "a kind without a policy takes the queue's");
    assert_eq!(row(&mut c, explicit), (7, Some("00:01:30".into())), "the call overrides max_attempts");
    assert_eq!(row(&mut c, many[0]), (3, Some("00:01:30".into())), "enqueue_many: the kind's defaults");
    assert_eq!(row(&mut c, many[1]), (25, None), "enqueue_many: the queue's");
    c.batch_execute(&format!("SELECT jq.cancel(id) FROM jq.jobs WHERE id <> {scan}")).unwrap();

    let mut w = db.connect();
    let j = claim(&mut w, "q", "w", 1, None).pop().expect("claim");
    assert_eq!(fail(&mut w, &j, "boom").as_deref(), Some("scheduled"));
    assert_eq!(retry_delay(&mut c, scan), 60.0, "the kind's backoff_base");
    // A change applies to the next failure, not to the retry already scheduled.
    c.batch_execute("SELECT jq.alter_kind('q', 'scan', backoff_base => '2 minutes')").unwrap();
    assert_eq!(retry_delay(&mut c, scan), 60.0, "history rewritten");
    c.batch_execute(&format!("SELECT jq._promote(run_at) FROM jq.jobs WHERE id = {scan}")).unwrap();
    let j = claim(&mut w, "q", "w", 1, None).pop().expect("claim again");
    assert_eq!(fail(&mut w, &j, "boom").as_deref(), Some("scheduled"));
    assert_eq!(retry_delay(&mut c, scan), 120.0, "the changed backoff_base at the next failure");
    // reset: back to the queue's option.
    c.batch_execute("SELECT jq.alter_kind('q', 'scan', reset => ARRAY['backoff_base'])").unwrap();
    c.batch_execute(&format!("SELECT jq._promote(run_at) FROM jq.jobs WHERE id = {scan}")).unwrap();
    let j = claim(&mut w, "q", "w", 1, None).pop().expect("claim a third time");
    assert_eq!(fail(&mut w, &j, "boom").as_deref(), Some("dead"), "max_attempts 3 from the kind");
    let listed: String = one(&mut c, "SELECT format('%s %s %s %s', kind, max_attempts, backoff_base, from_queue) FROM jq.kind_policies");
    assert_eq!(listed, "scan 3 00:00:10 {backoff,backoff_base,backoff_max,jitter}");

    assert!(one::<bool>(&mut c, "SELECT jq.drop_kind('q', 'scan')"));
    assert!(!one::<bool>(&mut c, "SELECT jq.drop_kind('q', 'scan')"), "dropped twice");
    assert!(!one::<bool>(&mut c, "SELECT has_kinds FROM jq.queues WHERE name = 'q'"));
    let after: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'scan')");
    assert_eq!(row(&mut c, after), (25, None), "after drop_kind: the queue's");
}

#[test]
fn bad_kind_input_is_refused_with_its_sqlstate_and_writes_nothing() {
    let db = TestDb::new("kind_bad_input");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('q');
         CREATE FUNCTION public.wrong(x integer) RETURNS void LANGUAGE sql AS 'SELECT 1';
         CREATE FUNCTION public.invoker(job jq.jobs) RETURNS void LANGUAGE sql AS 'SELECT 1';",
    )
    .unwrap();
    for (call, state) in [
        ("jq.alter_kind('nope', 'k')", "42704"),
        ("jq.alter_kind(NULL, 'k')", "22004"),
        ("jq.alter_kind('q', NULL)", "22004"),
        ("jq.alter_kind('q', '')", "22023"),
        ("jq.alter_kind('q', repeat('k', 201))", "22023"),
        ("jq.alter_kind('q', 'k', timeout => '-1 second')", "22023"),
        ("jq.alter_kind('q', 'k', timeout => '0')", "22023"),
        ("jq.alter_kind('q', 'k', timeout => '101 years')", "22023"),
        ("jq.alter_kind('q', 'k', timeout => '1 mon -40 days')", "22023"),
        ("jq.alter_kind('q', 'k', max_attempts => 0)", "22023"),
        ("jq.alter_kind('q', 'k', backoff_base => '-1 second')", "22023"),
        ("jq.alter_kind('q', 'k', reset => ARRAY['lease'])", "22023"),
        ("jq.alter_kind('q', 'k', timeout => '1 minute', reset => ARRAY['timeout'])", "22023"),
        ("jq.alter_kind('q', 'k', on_dead => 'public.missing(jq.jobs)')", "42883"),
        ("jq.alter_kind('q', 'k', on_dead => 'public.wrong(integer)')", "42P13"),
        ("jq.alter_kind('q', 'k', on_dead => 'public.invoker(jq.jobs)')", "42P13"),
        ("jq.drop_kind('nope', 'k')", "42704"),
        ("jq.drop_kind('q', NULL)", "22004"),
    ] {
        assert_eq!(sqlstate(c.batch_execute(&format!("SELECT {call}"))), state, "{call}");
    }
    assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM jq.kinds"), 0, "a refused call wrote a kind");
    assert!(!one::<bool>(&mut c, "SELECT has_kinds FROM jq.queues WHERE name = 'q'"), "a refused call set has_kinds");
    // drop_queue drops the queue's kinds.
    c.batch_execute("SELECT jq.alter_kind('q', 'k', timeout => '1 minute'); SELECT jq.drop_queue('q')").unwrap();
    assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM jq.kinds"), 0, "drop_queue left its kinds");
}
