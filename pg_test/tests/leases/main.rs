//! Leases with real connections: stale workers are fenced off by their lease token, the reaper
//! recovers jobs from the job's own lease and never overwrites a newer outcome, each job of a
//! batch has its own lease, and cancellation reaches the worker through its heartbeat.
//!
//! The clock is never moved: maintenance functions get explicit instants (`now() + ...` or a
//! lease's own expiry plus a margin).
//!
//! Negative controls: `JQ_TEST_BREAK=<name>` makes a test replace one jq function in its own
//! database with a broken copy (see `jq_pg_test::sabotage`), and the test must then fail. The
//! comment at each test records what was broken and how the test failed.

mod fencing;
mod heartbeats;
mod progress;
mod reap_start;
mod reaper;
mod take_back;

use jq_pg_test::{backend_pid, broken, sabotage, waiting_on_lock, Claimed, Client};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

const REAP: &str = "jq._reap(timestamptz,integer,integer,boolean)";
const END_LEASES: &str = "jq._end_leases(bigint[],timestamptz,timestamptz,boolean,text,boolean)";
const COMPLETE: &str = "jq.complete(bigint,uuid,jsonb)";

/// The broken variants shared by several tests.
fn apply_breaks(c: &mut Client) {
    if broken("complete_no_token") {
        // A completion fenced on the job id and state only (no lease token).
        sabotage(c, COMPLETE, "AND j.lease_token OPERATOR(pg_catalog.=) complete.lease_token", "AND true", 1);
    }
    if broken("reap_no_lock_no_fence") {
        // A reaper that picks without locking and updates by id alone: the
        // picking sub-select loses FOR UPDATE SKIP LOCKED, the UPDATE its state and lease fence.
        sabotage(c, REAP, "LIMIT _reap.batch\n          FOR UPDATE SKIP LOCKED) p;", "LIMIT _reap.batch) p;", 1);
        sabotage(
            c,
            END_LEASES,
            "AND j.state::text = 'running'\n          AND j.lease_expires_at < _end_leases.expired_before",
            "",
            1,
        );
    }
}

fn enqueue(c: &mut Client, queue: &str) -> i64 {
    c.query_one("SELECT jq.enqueue($1)", &[&queue]).expect("enqueue").get(0)
}

fn reap(c: &mut Client, instant_sql: &str) -> i32 {
    c.query_one(&format!("SELECT jq._reap({instant_sql})"), &[]).expect("jq._reap").get(0)
}

/// (state, attempt, lease_expiries, worker, lease token as text) of a job.
fn job(c: &mut Client, id: i64) -> (String, i32, i32, Option<String>, Option<String>) {
    let r = c
        .query_one(
            "SELECT state::text, attempt, lease_expiries, worker, lease_token::text FROM jq.jobs WHERE id = $1",
            &[&id],
        )
        .expect("job");
    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))
}

fn ex(seq: i32, attempt: i32, outcome: &str) -> (i32, i32, String) {
    (seq, attempt, outcome.to_string())
}

/// jq.fail -> the new state as text, or None.
fn fail(c: &mut Client, j: &Claimed, error: &str) -> Option<String> {
    c.query_one("SELECT jq.fail($1, $2, $3)::text", &[&j.id, &j.token, &error]).expect("jq.fail").get(0)
}

/// jq.heartbeat -> (lease_expires_at is not NULL, cancel_requested).
fn heartbeat(c: &mut Client, j: &Claimed, extend: Option<&str>) -> (bool, Option<bool>) {
    let r = c
        .query_one(
            "SELECT lease_expires_at IS NOT NULL, cancel_requested FROM jq.heartbeat($1, $2, $3::text::interval)",
            &[&j.id, &j.token, &extend],
        )
        .expect("jq.heartbeat");
    (r.get(0), r.get(1))
}

fn release(c: &mut Client, j: &Claimed) -> bool {
    c.query_one("SELECT jq.release($1, $2)", &[&j.id, &j.token]).expect("jq.release").get(0)
}

enum Outcome<T> {
    Finished(T),
    Blocked,
}

/// Waits (bounded) until the statement running in another thread on backend `pid` either
/// finishes (its result arrives on `rx`) or is seen waiting for a lock.
fn finished_or_blocked<T>(rx: &Receiver<T>, admin: &mut Client, pid: i32) -> Outcome<T> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(v) => return Outcome::Finished(v),
            Err(RecvTimeoutError::Timeout) => {
                if waiting_on_lock(admin, pid) {
                    return Outcome::Blocked;
                }
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the statement's thread died"),
        }
    }
    panic!("backend {pid} neither finished nor waited for a lock within 60 s");
}

/// Runs `sql` (one integer result) on `conn` in a new thread; returns its backend pid, the
/// result channel and the thread.
fn run_in_thread(
    mut conn: Client,
    sql: String,
) -> (i32, Receiver<Result<i32, String>>, thread::JoinHandle<()>) {
    let pid = backend_pid(&mut conn);
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        let r = conn.query_one(sql.as_str(), &[]).map(|r| r.get::<_, i32>(0)).map_err(|e| match e.as_db_error() {
            Some(d) => format!("{}: {}", d.code().code(), d.message()),
            None => e.to_string(),
        });
        let _ = tx.send(r);
    });
    (pid, rx, h)
}
