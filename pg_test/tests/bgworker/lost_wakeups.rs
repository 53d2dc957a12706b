//! No lost long-poll wakeups: commits that land at the same instant each wake a waiter of
//! their own, round after round.

use jq_pg_test::*;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Rounds of two waiters and two simultaneous producers.
const ROUNDS: usize = 500;
/// Each waiting claim's wait: a lost wakeup would leave its waiter asleep this long.
const WAIT: &str = "20 s";
/// How long a round may take to hand both jobs to both waiters: well under `WAIT`, well over a
/// woken claim's latency on a loaded machine (milliseconds).
const ROUND_LIMIT: Duration = Duration::from_secs(5);

/// A thread with its own connection that runs one waiting claim (`n = 1`) per message and
/// sends back how many rows it got; returns the sender and the backend's pid.
fn waiter(db: &TestDb, name: &str, done: mpsc::Sender<(String, usize)>) -> (mpsc::Sender<()>, i32) {
    let mut c = db.connect();
    let pid = backend_pid(&mut c);
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (name, sql) = (name.to_string(), format!("SELECT id FROM jq.claim('q', '{name}', wait => '{WAIT}')"));
    std::thread::spawn(move || {
        while go_rx.recv().is_ok() {
            // An error (the test ended and closed its database) ends the thread.
            let Ok(rows) = c.query(sql.as_str(), &[]) else { break };
            if done.send((name.clone(), rows.len())).is_err() {
                break;
            }
        }
    });
    (go_tx, pid)
}

/// A thread with its own connection that enqueues one job each time `start` releases it.
fn producer(db: &TestDb, start: Arc<Barrier>) {
    let mut c = db.connect();
    std::thread::spawn(move || loop {
        start.wait();
        if c.batch_execute("SELECT jq.enqueue('q', '{}')").is_err() {
            break;
        }
    });
}

/// Both `pids` are asleep in a waiting claim (the latch wait of `jq._wait`, wait event
/// `Extension`), i.e. registered and past their look.
fn both_asleep(c: &mut Client, pids: &[i32]) -> bool {
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY ($1) AND wait_event_type = 'Extension'",
            &[&pids],
        )
        .unwrap()
        .get(0);
    n == pids.len() as i64
}

/// Two waiters asleep on queue `q`; two producers commit one enqueue each at the same instant
/// (released together by a barrier); both waiters must return with one job each within
/// `ROUND_LIMIT`, every one of 500 rounds (about 2 s). In a database no maintenance worker
/// serves, so only the commits' wakeups can end a wait early.
///
/// Before the fix (src/wakeup.rs, `Waiter::woken`) both commits could choose the same waiter:
/// its latch, still set from the first, merged the second wakeup into it, and the other waiter
/// slept its whole wait. Seen failing against that build in rounds 5, 6 and 14 of three runs
/// ("round 5: a waiter was not woken within 5s (lost wakeup); returned: [(\"w1\", 1)]"). The
/// negative control, a jq built with the cargo feature `break-wake-merge` (src/wakeup.rs,
/// `claim_waiter`: any registered waiter is taken), fails the same way: seen in rounds 3, 6
/// and 2 of three runs.
#[test]
fn simultaneous_commits_wake_both_waiters_every_round() {
    let _counting = super::wakeup_counting();
    let db = TestDb::new("lostwake");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let (go1, pid1) = waiter(&db, "w1", done_tx.clone());
    let (go2, pid2) = waiter(&db, "w2", done_tx);
    let start = Arc::new(Barrier::new(3));
    producer(&db, start.clone());
    producer(&db, start.clone());
    let t = Instant::now();
    for round in 1..=ROUNDS {
        go1.send(()).unwrap();
        go2.send(()).unwrap();
        let deadline = Instant::now() + ROUND_LIMIT;
        while !both_asleep(&mut c, &[pid1, pid2]) {
            assert!(Instant::now() < deadline, "round {round}: the waiters never both slept");
            std::thread::sleep(Duration::from_millis(1));
        }
        start.wait();
        let mut got = Vec::new();
        for _ in 0..2 {
            let left = deadline.saturating_duration_since(Instant::now());
            match done_rx.recv_timeout(left) {
                Ok(r) => got.push(r),
                Err(_) => panic!("round {round}: a waiter was not woken within {ROUND_LIMIT:?} (lost wakeup); returned: {got:?}"),
            }
        }
        assert!(got.iter().all(|(_, n)| *n == 1), "round {round}: {got:?}");
    }
    eprintln!("{ROUNDS} rounds in {:?}", t.elapsed());
    let running = db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state = 'running'");
    assert_eq!(running, 2 * ROUNDS as i64);
}
