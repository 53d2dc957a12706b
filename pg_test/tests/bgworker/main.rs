//! The background workers and the long-poll, tested from committed data on the test cluster,
//! which `pg_test/run` starts with `shared_preload_libraries = jq`, `jq.tick_interval = 1s` and
//! `jq.databases = 'jqt_bgw_*'`: only these tests' databases (`TestDb::new("bgw_…")`) are
//! served, and no test here calls `jq.tick()` — maintenance happens only if the worker does it.
//! The slot tests of launcher.rs start clusters of their own (jq_pg_test::own_cluster) with two
//! slots (`jq.max_databases = 2`) or a full worker pool.
//!
//! Negative controls (each seen failing):
//! * `JQ_TEST_BREAK=no_wake`: enqueue no longer wakes waiting claims → the long-poll tests wait
//!   out their full `wait` and fail.
//! * `JQ_TEST_BREAK=no_promote`: the worker's promote duty does nothing → the retry test fails.
//! * `JQ_TEST_BREAK=no_reap`: the worker's reap duty does nothing → the lease test fails.
//! * `JQ_TEST_BREAK=no_cron_duty`: the worker never runs jq.cron_tick → the cron test fails.
//! * `JQ_TEST_BREAK=no_worker_prune`: the prune duty leaves jq.workers alone → fleet.rs fails.
//! * The cargo feature `break-wake-merge` (a jq built with `tools/install --features
//!   break-wake-merge`): a wakeup may choose a waiter that already owes a look, merging two
//!   wakeups into one → lost_wakeups.rs fails ("a waiter was not woken within 5s").
//! * The cargo feature `break-slot-per-database` (`tools/install --features
//!   break-slot-per-database`): the launcher gives every listed database a slot, with or without
//!   jq, and logs each one past the slots at every pass → the two slot tests of launcher.rs fail.
//! * `JQ_TEST_BREAK=no_rebatch`: a long-poll keeps the batch it registered when its queue is
//!   rate-limited mid-wait (jq.claim skips `jq._wait_rebatch`) → long_poll.rs
//!   `a_queue_rate_limited_mid_wait_wakes_a_waiter_per_job` fails.
//! * lost_wakeups.rs `a_cancel_that_lands_with_a_wakeup_passes_it_on` was seen failing against
//!   the build that consumed a wakeup before checking for interrupts (no feature keeps it).
//! * lost_wakeups.rs `a_wakeup_whose_latch_a_wait_in_the_look_reset_is_not_lost` was seen
//!   failing against the build whose `jq._wait` slept on its latch without checking whether a
//!   commit had chosen it (no feature keeps it).
//! * `JQ_TEST_BREAK=wake_too_few` / `wake_per_job`: the batch a long-poll registers is broken
//!   (long_poll.rs, `break_wait_batch`) → the two batch-wakeup tests of long_poll.rs fail.
//! * The restart tests were seen failing with the launcher's respawn of exited workers removed
//!   (a manual edit of `start_due` in src/bgworker/launcher.rs: `SlotState::Exited => false`).

mod duties;
mod fleet;
mod launcher;
mod long_poll;
mod lost_wakeups;

use jq_pg_test::*;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_secs(1);

/// Held by the tests that count `jq._wakeups()` (a cluster-wide counter,
/// long_poll.rs `one_job_wakes_one_of_many_waiters` and `a_batch_wakes_one_waiter_per_n_jobs`)
/// and by the tests that set many latches (lost_wakeups.rs; long_poll.rs
/// `every_job_of_a_batch_is_claimed_without_waiting_out_the_wait`), so that the one's wakeups never land in the other's count (seen:
/// "one job woke 202 waiters" with both running at once).
static WAKEUP_COUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`WAKEUP_COUNTING`] (also after a test that held it panicked).
fn wakeup_counting() -> std::sync::MutexGuard<'static, ()> {
    WAKEUP_COUNTING.lock().unwrap_or_else(|e| e.into_inner())
}

fn status(c: &mut Client, db: &str) -> Option<(String, Option<i32>, i64, Option<String>)> {
    c.query_opt(
        "SELECT state, pid, passes, last_error FROM jq.status() WHERE database = $1",
        &[&db],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
}

/// A database for a wakeup test: not served by a maintenance worker ("bgw_" is the served
/// prefix: its once-a-second pass also wakes claims) and without claim-start hints (a queue's
/// watcher looks once a second too), so only the commit under test can end a wait early, and a
/// bound of seconds still tells a wakeup from a wait that ran out.
fn unwoken_db(name: &str) -> TestDb {
    let db = TestDb::new(name);
    db.connect().batch_execute(&format!("ALTER DATABASE {} SET jq.claim_hints = off", db.name)).unwrap();
    db
}

/// Waits until `cond` holds, polling every 50 ms, at most `limit`; returns how long it took.
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if cond() {
            return Some(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Runs `sql` (a waiting claim) on a new connection to `db` in a thread; the thread returns
/// when the claim returned and how many rows it got.
fn waiting_claim(db: &TestDb, sql: &'static str) -> std::thread::JoinHandle<(Instant, usize)> {
    let name = db.name.clone();
    std::thread::spawn(move || {
        let mut w = Client::connect(&conninfo(&name), NoTls).unwrap();
        let rows = w.query(sql, &[]).unwrap();
        (Instant::now(), rows.len())
    })
}

/// The maintenance worker of `db` is running and has completed a pass; returns its pid.
fn served(db: &TestDb, limit: Duration) -> i32 {
    let mut c = db.connect();
    let mut pid = 0;
    eventually(limit, || match status(&mut c, &db.name) {
        Some((state, Some(p), passes, _)) if state == "running" && passes > 0 => {
            pid = p;
            true
        }
        _ => false,
    })
    .unwrap_or_else(|| panic!("{} not served: {:?}", db.name, status(&mut c, &db.name)));
    pid
}
