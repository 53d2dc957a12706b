//! Where the reaper's passes start (src/reap_start.rs): past the entries of jobs completed
//! since the last complete pass, which a held snapshot keeps in jobs_running_idx.

use jq_pg_test::{broken, sabotage, Client, TestDb};
use std::time::{Duration, Instant};

use super::REAP;

const JOBS: i32 = 2_000;

/// jobs_running_idx entries the reaper read in one `jq._reap(now())` call of this backend (the
/// index scan's returned entries, from the transaction's own statistics).
/// The counter also holds what earlier transactions counted until the backend reports it (at
/// most once a second), hence the difference.
fn reap_reads(c: &mut Client) -> (i32, i64) {
    reap_reads_at(c, "now()")
}

fn reap_reads_at(c: &mut Client, at: &str) -> (i32, i64) {
    const READ: &str = "SELECT pg_stat_get_xact_tuples_returned('jq.jobs_running_idx'::regclass)";
    let mut tx = c.transaction().unwrap();
    let before: i64 = tx.query_one(READ, &[]).unwrap().get(0);
    let reaped: i32 = tx.query_one(&format!("SELECT jq._reap({at})"), &[]).unwrap().get(0);
    let after: i64 = tx.query_one(READ, &[]).unwrap().get(0);
    tx.commit().unwrap();
    (reaped, after - before)
}

/// While another session holds an xid, JOBS jobs are claimed with a 1-second lease and completed.
/// Their jobs_running_idx entries (keyed by the lease expiry) cannot be removed or marked dead,
/// and once the leases are past they lie in the range a reaper pass reads. A backend's first
/// pass (a full one) reads them all; the next pass of the same backend, 5 s (the margin) after a
/// complete pass, starts past them and reads none, and a lease that expires meanwhile is still
/// reaped by it.
///
/// A pass at another instant than the real time is a full pass, and so is the next one.
///
/// Negative control: JQ_TEST_BREAK=reap_from_oldest (every pass starts at the oldest expiry, as
/// before the start was kept) made this test fail: "the second pass read 2001 entries of
/// jobs_running_idx (the first read 2000)".
#[test]
fn a_reap_pass_during_a_held_snapshot_starts_past_the_dead_entries() {
    let db = TestDb::new("reap_start");
    let mut c = db.connect();
    if broken("reap_from_oldest") {
        sabotage(&mut c, REAP, "v_at := coalesce(v_from, '-infinity');", "v_at := '-infinity';", 1);
    }
    c.batch_execute("SELECT jq.create_queue('rs'); SELECT jq.create_queue('late')").unwrap();
    let mut holder = db.connect();
    holder.batch_execute("BEGIN; SELECT pg_current_xact_id();").unwrap();

    c.query_one("SELECT count(*) FROM jq.enqueue_many('rs', (SELECT jsonb_agg(g) FROM generate_series(1, $1) g))", &[&JOBS])
        .unwrap();
    for _ in 0..JOBS / 1_000 {
        let done: i64 = c
            .query_one(
                "WITH c AS (SELECT id, lease_token FROM jq.claim('rs', 'w', 1000, '1 second'))
                 SELECT count(*) FROM jq.complete_many((SELECT array_agg(id) FROM c), (SELECT array_agg(lease_token) FROM c))",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(done, 1_000);
    }
    let last_expiry: f64 = c
        .query_one("SELECT extract(epoch FROM max(lease_expires_at))::float8 FROM jq.jobs WHERE queue = 'rs'", &[])
        .unwrap()
        .get(0);
    // The first pass must run more than the 5-s margin after the last expiry, so that the next
    // pass starts past it.
    wait_clock_past(&mut c, last_expiry, 5.5);

    let mut reaper = db.connect();
    let (reaped, first) = reap_reads(&mut reaper);
    assert_eq!(reaped, 0);
    assert!(first >= i64::from(JOBS), "the first (full) pass read {first} entries: the held xid no longer keeps them");
    // A lease that expires between the two passes is reaped by the second.
    let mut w = db.connect();
    w.query_one("SELECT jq.enqueue('late')", &[]).unwrap();
    let late: i64 = w.query_one("SELECT id FROM jq.claim('late', 'w', 1, '10 milliseconds')", &[]).unwrap().get(0);
    std::thread::sleep(Duration::from_millis(50));
    let (reaped, second) = reap_reads(&mut reaper);
    assert_eq!(reaped, 1, "the lease that expired after the first pass");
    let st: String = c.query_one("SELECT state::text FROM jq.jobs WHERE id = $1", &[&late]).unwrap().get(0);
    assert_eq!(st, "ready");
    assert!(second < 10, "the second pass read {second} entries of jobs_running_idx (the first read {first})");
    let (_, ahead) = reap_reads_at(&mut reaper, "now() + interval '1 hour'");
    assert!(ahead >= i64::from(JOBS), "a pass an hour ahead read {ahead} entries: not a full pass");
    let (_, again) = reap_reads(&mut reaper);
    assert!(again >= i64::from(JOBS), "the pass after one an hour ahead read {again} entries: not a full pass");
    holder.batch_execute("ROLLBACK").unwrap();
}

/// Waits until the database clock is `secs` past the epoch instant `at` (with a deadline).
fn wait_clock_past(c: &mut Client, at: f64, secs: f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[]).unwrap().get::<_, f64>(0) < at + secs {
        assert!(Instant::now() < deadline, "the database clock did not pass the lease");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A keyed job whose expired lease the reaper picks but leaves running, because ending it
/// (cancelled: a cancellation was requested) needs its key's slot row and another transaction
/// holds that row. The backend's next passes start at that job's expiry, not 5 s before their
/// `now`, so the first pass after the holder commits reaps it, although the lease expired more
/// than 5 s before.
///
/// Negative control: JQ_TEST_BREAK=reap_forgets_left_rows (the passes forget the rows they left
/// running) made this test fail: "the pass after the holder committed did not reap the keyed
/// job" (reaped 0).
#[test]
fn a_keyed_job_the_reaper_left_running_is_reaped_by_its_next_pass() {
    let db = TestDb::new("reap_start_key");
    let mut c = db.connect();
    if broken("reap_forgets_left_rows") {
        sabotage(&mut c, REAP, "LEAST(v_left, CASE WHEN", "LEAST(NULL, CASE WHEN", 1);
    }
    c.batch_execute("SELECT jq.create_queue('k')").unwrap();
    let keyed: i64 = c.query_one("SELECT jq.enqueue('k', concurrency_key => 'key')", &[]).unwrap().get(0);
    let claimed: i64 = c.query_one("SELECT id FROM jq.claim('k', 'w', 1, '10 milliseconds')", &[]).unwrap().get(0);
    assert_eq!(claimed, keyed);
    c.batch_execute(&format!("SELECT jq.cancel({keyed})")).unwrap();
    let expiry: f64 = c
        .query_one("SELECT extract(epoch FROM lease_expires_at)::float8 FROM jq.jobs WHERE id = $1", &[&keyed])
        .unwrap()
        .get(0);
    let mut holder = db.connect();
    holder.batch_execute("BEGIN; SELECT jq.enqueue('k', concurrency_key => 'key')").unwrap();
    wait_clock_past(&mut c, expiry, 5.5);

    let mut reaper = db.connect();
    for pass in 1..=2 {
        let (reaped, _) = reap_reads(&mut reaper);
        assert_eq!(reaped, 0, "pass {pass} while the key's slot row is held");
        let st: String = c.query_one("SELECT state::text FROM jq.jobs WHERE id = $1", &[&keyed]).unwrap().get(0);
        assert_eq!(st, "running", "pass {pass}");
    }
    holder.batch_execute("COMMIT").unwrap();
    let (reaped, _) = reap_reads(&mut reaper);
    assert_eq!(reaped, 1, "the pass after the holder committed did not reap the keyed job");
    let st: String = c.query_one("SELECT state::text FROM jq.jobs WHERE id = $1", &[&keyed]).unwrap().get(0);
    assert_eq!(st, "cancelled");
}
