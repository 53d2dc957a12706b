//! The data sets, built through jq functions only.

use jq_pg_test::{Client, TestDb};

pub(crate) enum Then<'a> {
    Complete,
    /// jq.fail with this retry_in (None: the queue's policy) and the state every job must reach.
    Fail(Option<&'a str>, &'a str),
    KeepRunning,
}

/// Claims every ready job of `queue` through jq.claim in batches of 1,000 (each batch its own
/// transaction) and ends each batch as `then` says. Returns how many were claimed.
pub(crate) fn drain(c: &mut Client, queue: &str, lease: &str, then: Then) -> usize {
    let mut total = 0;
    loop {
        let rows = c
            .query("SELECT id, lease_token FROM jq.claim($1, 'plans-builder', 1000, $2::text::interval)",
                   &[&queue, &lease])
            .expect("jq.claim");
        if rows.is_empty() {
            return total;
        }
        total += rows.len();
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let tokens: Vec<uuid::Uuid> = rows.iter().map(|r| r.get(1)).collect();
        match then {
            Then::Complete => {
                let done = c
                    .query("SELECT jq.complete_many($1, $2)", &[&ids, &tokens])
                    .expect("jq.complete_many")
                    .len();
                assert_eq!(done, ids.len(), "every claimed job completes");
            }
            Then::Fail(retry_in, expect) => {
                let wrong: i64 = c
                    .query_one("SELECT count(*) FILTER (WHERE s IS DISTINCT FROM $4::text)
                                FROM (SELECT jq.fail(u.id, u.tok, 'plans: deliberate failure',
                                                     $3::text::interval)::text AS s
                                      FROM unnest($1::bigint[], $2::uuid[]) AS u(id, tok)) f",
                               &[&ids, &tokens, &retry_in, &expect])
                    .expect("jq.fail")
                    .get(0);
                assert_eq!(wrong, 0, "every failed job becomes {expect}");
            }
            Then::KeepRunning => {}
        }
    }
}

/// jq.enqueue_many of `count` jobs built by the SQL object expression `spec` over g = 1..count
/// (specs => true), returning the ids in array order.
pub(crate) fn enqueue_specs(c: &mut Client, queue: &str, count: i32, spec: &str) -> Vec<i64> {
    c.query(&format!(
        "SELECT id FROM jq.enqueue_many($1,
             (SELECT jsonb_agg({spec} ORDER BY g) FROM generate_series(1, $2) AS g),
             specs => true) AS id"), &[&queue, &count])
        .unwrap_or_else(|e| panic!("jq.enqueue_many({queue}, {count} x {spec}): {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

pub(crate) fn enqueue_plain(c: &mut Client, queue: &str, count: i32, max_attempts: Option<i32>) {
    let n = c
        .query_one("SELECT count(*) FROM jq.enqueue_many($1,
                        (SELECT jsonb_agg(jsonb_build_object('n', g)) FROM generate_series(1, $2) AS g),
                        max_attempts => $3)",
                   &[&queue, &count, &max_attempts])
        .expect("jq.enqueue_many")
        .get::<_, i64>(0);
    assert_eq!(n, count as i64);
}

pub(crate) fn counts(c: &mut Client) -> String {
    c.query("SELECT state::text, count(*) FROM jq.jobs GROUP BY 1 ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| format!("{}={}", r.get::<_, String>(0), r.get::<_, i64>(1)))
        .collect::<Vec<_>>()
        .join(" ")
}

const BASE_QUEUES: [&str; 4] = ["plan.0", "plan.1", "plan.2", "plan.3"];

/// About 100,000 jobs in four queues, 5% of them claimable. Per queue (25,000 jobs):
/// 10,000 completed (500 of them with idempotency keys k-1..k-500), 1,500 dead, 500 scheduled
/// for a retry in 2 hours, 2,500 running under a 1-day lease, 9,000 scheduled by a 1-day delay
/// (500 of them holding the keys k-1..k-500 again: a finished job frees its key), 250 cancelled
/// and 1,250 ready with priorities 0..4. The scheduled and expired backlogs are several times
/// the maintenance batches, as after an outage. Built in a few seconds.
pub(crate) fn build_base(db: &TestDb) -> Client {
    let mut c = db.connect();
    for q in BASE_QUEUES {
        c.execute("SELECT jq.create_queue($1)", &[&q]).unwrap();
        enqueue_specs(&mut c, q, 500,
                      "jsonb_build_object('payload', jsonb_build_object('n', g), 'idempotency_key', 'k-' || g)");
        enqueue_plain(&mut c, q, 9_500, None);
        assert_eq!(drain(&mut c, q, "5 minutes", Then::Complete), 10_000);
        enqueue_plain(&mut c, q, 1_500, Some(1));
        assert_eq!(drain(&mut c, q, "5 minutes", Then::Fail(None, "dead")), 1_500);
        enqueue_plain(&mut c, q, 500, None);
        assert_eq!(drain(&mut c, q, "5 minutes", Then::Fail(Some("2 hours"), "scheduled")), 500);
        enqueue_plain(&mut c, q, 2_500, None);
        assert_eq!(drain(&mut c, q, "1 day", Then::KeepRunning), 2_500);
        enqueue_specs(&mut c, q, 500,
                      "jsonb_build_object('delay', '1 day', 'idempotency_key', 'k-' || g)");
        enqueue_specs(&mut c, q, 8_500, "jsonb_build_object('delay', '1 day')");
        let cancel = enqueue_specs(&mut c, q, 250, "jsonb_build_object('delay', '1 day')");
        let cancelled: i64 = c
            .query_one("SELECT count(*) FILTER (WHERE jq.cancel(id)) FROM unnest($1::bigint[]) AS id",
                       &[&cancel])
            .unwrap()
            .get(0);
        assert_eq!(cancelled, 250);
        enqueue_specs(&mut c, q, 1_250, "jsonb_build_object('priority', g % 5)");
    }
    // Every table, the history tables of jq.jobs too (ANALYZE jq.jobs leaves them unanalyzed).
    c.batch_execute("ANALYZE").unwrap();
    let summary = counts(&mut c);
    assert_eq!(summary,
               "cancelled=1000 completed=40000 dead=6000 ready=5000 running=10000 scheduled=38000",
               "base data set");
    c
}
