//! Arguments refused up front: intervals and delays with negative fields, a name with another queue's hash.

use jq_pg_test::{broken, sabotage, sqlstate, Client, TestDb};
use std::thread;
use std::time::Duration;

/// Intervals whose fields have mixed signs ('1 mon -30 days 1 second') compare as positive but
/// end before they start in a 31-day month: refused wherever a lease or delay is given.
#[test]
fn intervals_with_negative_fields_are_refused() {
    let db = TestDb::new("mixed");
    let mut c: Client = db.connect();
    let bad = "1 mon -30 days 1 second";
    assert_eq!(sqlstate(c.query_one("SELECT jq.create_queue('m', lease => $1::text::interval)", &[&bad])), "22023");
    c.batch_execute("SELECT jq.create_queue('m'); SELECT jq.enqueue('m')").unwrap();
    assert_eq!(sqlstate(c.query("SELECT * FROM jq.claim('m', 'w', 1, $1::text::interval)", &[&bad])), "22023");
    let row = c.query_one("SELECT id, lease_token FROM jq.claim('m', 'w')", &[]).unwrap();
    let (id, token): (i64, uuid::Uuid) = (row.get(0), row.get(1));
    assert_eq!(sqlstate(c.query_one("SELECT * FROM jq.heartbeat($1, $2, $3::text::interval)", &[&id, &token, &bad])), "22023");
    assert_eq!(sqlstate(c.query_one("SELECT jq.fail($1, $2, 'x', $3::text::interval)", &[&id, &token, &bad])), "22023");
    let st: String = c.query_one("SELECT state::text FROM jq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
    assert_eq!(st, "running", "nothing changed");
    // A plainly negative retry_in is not refused: it means "retry now".
    let st: String = c
        .query_one("SELECT jq.fail($1, $2, 'x', interval '-5 seconds')::text", &[&id, &token])
        .unwrap()
        .get(0);
    assert_eq!(st, "ready");
}

#[test]
fn a_delay_with_a_negative_field_is_refused() {
    let db = TestDb::new("mixdelay");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('d')").unwrap();
    assert_eq!(sqlstate(c.query_one("SELECT jq.enqueue('d', delay => '1 mon -29 days')", &[])), "22023");
    assert_eq!(
        sqlstate(c.query("SELECT jq.enqueue_many('d', '[{\"delay\": \"1 mon -29 days\"}]', specs => true)", &[])),
        "22023"
    );
    let n: i64 = c.query_one("SELECT count(*) FROM jq.jobs", &[]).unwrap().get(0);
    assert_eq!(n, 0);
    // A plainly negative delay is not refused: it means now.
    let id: i64 = c.query_one("SELECT jq.enqueue('d', delay => '-1 day')", &[]).unwrap().get(0);
    assert_eq!(jq_pg_test::state(&mut c, id).as_deref(), Some("ready"));
}

/// Queue names share the claim index's key space (pg_catalog.hashtextextended(name, 0), made
/// unique among queues by queues_name_hash_idx). 'emails' and 'tenant-evil.:ocLqum5eMGI' have
/// the same hash (found by a birthday search): the second create is
/// refused with 23505 and a message saying so, with or without if_not_exists, and the first
/// queue keeps working. A create of a name another session is creating waits for it, then
/// returns its row (if_not_exists) instead of failing.
/// Negative control: JQ_TEST_BREAK=create_queue_no_hash_check (every conflict without a row of
/// that name taken for a concurrent drop and retried) fails: 40001 after ten tries, not 23505.
#[test]
fn a_name_with_another_queues_hash_is_refused_and_concurrent_creates_of_one_name_agree() {
    let db = TestDb::new("rob_create");
    let mut c = db.connect();
    if broken("create_queue_no_hash_check") {
        sabotage(
            &mut c,
            "jq.create_queue(text,integer,interval,jq.backoff_policy,interval,interval,jq.jitter_mode,interval,interval,interval,integer,integer,boolean,boolean,integer,interval)",
            "IF EXISTS (SELECT 1 FROM jq.queues t\n",
            "IF false AND EXISTS (SELECT 1 FROM jq.queues t\n",
            1,
        );
    }
    let same: bool = c
        .query_one("SELECT hashtextextended('emails', 0) = hashtextextended('tenant-evil.:ocLqum5eMGI', 0)", &[])
        .unwrap()
        .get(0);
    assert!(same, "the pair no longer collides");
    c.batch_execute("SELECT jq.create_queue('emails'); SELECT jq.enqueue('emails', '{}');").unwrap();
    for sql in [
        "SELECT jq.create_queue('tenant-evil.:ocLqum5eMGI')",
        "SELECT jq.create_queue('tenant-evil.:ocLqum5eMGI', if_not_exists => true)",
    ] {
        let e = c.batch_execute(sql).expect_err(sql);
        assert_eq!(e.code().map(|c| c.code()), Some("23505"), "{sql}: {e:?}");
        let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(message.contains("same hash"), "{message}");
    }
    let n: i64 = c.query_one("SELECT count(*) FROM jq.queues", &[]).unwrap().get(0);
    assert_eq!(n, 1);
    let claimed: i64 = c.query_one("SELECT count(*) FROM jq.claim('emails', 'w')", &[]).unwrap().get(0);
    assert_eq!(claimed, 1);

    // Two sessions create one name: the second waits for the first's commit.
    let mut a = db.connect();
    let mut ta = a.transaction().unwrap();
    ta.batch_execute("SELECT jq.create_queue('cc', max_attempts => 3)").unwrap();
    let conninfo = jq_pg_test::conninfo(&db.name);
    let waiter = thread::spawn(move || {
        let mut b = jq_pg_test::Client::connect(&conninfo, jq_pg_test::NoTls).unwrap();
        let r = b.query_one("SELECT max_attempts FROM jq.create_queue('cc', if_not_exists => true)", &[]);
        r.map(|row| row.get::<_, i32>(0)).map_err(|e| e.to_string())
    });
    thread::sleep(Duration::from_millis(300));
    ta.commit().unwrap();
    assert_eq!(waiter.join().unwrap(), Ok(3), "the waiting create did not return the committed queue");
}
