//! No session state: every jq call is correct when each transaction runs on
//! whichever pooled connection is free, as behind a transaction-mode pooler, and leaves nothing
//! behind in the session: no advisory locks, no LISTEN, no temporary objects, no settings.

use jq_pg_test::{Client, TestDb};

/// Runs one statement as its own transaction on the next connection of the pool.
struct Pool {
    conns: Vec<Client>,
    next: usize,
}

impl Pool {
    fn one(&mut self, sql: &str) -> Vec<postgres::SimpleQueryRow> {
        let i = self.next % self.conns.len();
        self.next += 1;
        self.conns[i]
            .simple_query(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .into_iter()
            .filter_map(|m| match m {
                postgres::SimpleQueryMessage::Row(r) => Some(r),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn every_call_works_on_any_pooled_connection_and_leaves_no_session_state() {
    let db = TestDb::new("pool");
    let mut pool = Pool { conns: (0..3).map(|_| db.connect()).collect(), next: 0 };

    pool.one("SELECT jq.create_queue('p', max_attempts => 2, backoff => 'fixed', backoff_base => '1 second', jitter => 'none')");
    pool.one("SELECT jq.enqueue('p', '{\"a\":1}', idempotency_key => 'k')");
    pool.one("SELECT jq.enqueue('p', '{\"a\":1}', idempotency_key => 'k')");
    pool.one("SELECT jq.enqueue_many('p', '[1, 2, 3]')");
    let claimed = pool.one("SELECT id, lease_token FROM jq.claim('p', 'w', 4) ORDER BY id");
    assert_eq!(claimed.len(), 4, "the keyed job once, and the three of the batch");
    let job = |i: usize| (claimed[i].get(0).unwrap().to_string(), claimed[i].get(1).unwrap().to_string());

    let (id0, t0) = job(0);
    let hb = pool.one(&format!("SELECT lease_expires_at IS NOT NULL FROM jq.heartbeat({id0}, '{t0}', '1 minute')"));
    assert_eq!(hb[0].get(0), Some("t"));
    let done = pool.one(&format!("SELECT jq.complete({id0}, '{t0}', '{{\"ok\":true}}')"));
    assert_eq!(done[0].get(0), Some("t"));

    let (id1, t1) = job(1);
    let failed = pool.one(&format!("SELECT jq.fail({id1}, '{t1}', 'boom')"));
    assert_eq!(failed[0].get(0), Some("scheduled"));
    let promoted = pool.one("SELECT jq._promote(now() + interval '2 seconds')");
    assert_eq!(promoted[0].get(0), Some("1"));

    let (id2, t2) = job(2);
    assert_eq!(pool.one(&format!("SELECT jq.release({id2}, '{t2}')"))[0].get(0), Some("t"));
    let (id3, _t3) = job(3);
    assert_eq!(pool.one(&format!("SELECT jq.cancel({id3})"))[0].get(0), Some("t"));
    let reaped = pool.one("SELECT jq._reap(now() + interval '1 day')");
    assert_eq!(reaped[0].get(0), Some("1"), "the cancel-requested job's lease expires");
    assert_eq!(pool.one(&format!("SELECT jq.retry({id3})"))[0].get(0), Some("t"));
    pool.one("SELECT jq.tick()");

    let again = pool.one("SELECT count(*) FROM jq.claim('p', 'w2', 10)");
    assert_eq!(again[0].get(0), Some("3"), "failed-then-promoted, released and retried jobs");
    pool.one("SELECT jq.pause('p')");
    pool.one("SELECT jq.resume('p')");

    for conn in &mut pool.conns {
        let row = conn
            .query_one(
                "SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
                        (SELECT count(*) FROM pg_listening_channels()),
                        (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                          WHERE n.nspname LIKE 'pg_temp%' AND n.oid = pg_my_temp_schema()),
                        (SELECT count(*) FROM pg_settings WHERE name LIKE 'jq.%' AND source = 'session')",
                &[],
            )
            .unwrap();
        let counts: (i64, i64, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
        assert_eq!(counts, (0, 0, 0, 0), "advisory locks, LISTEN channels, temp relations, session settings");
    }
}
