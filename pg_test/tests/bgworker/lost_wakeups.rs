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

/// Stops a server process (SIGSTOP) until dropped (SIGCONT), so that a wakeup and a cancel both
/// reach it before it runs again. Needs the cluster on this host and the right to signal its
/// processes (the tests run as root; own_cluster.rs kills a backend the same way).
struct Stopped(i32);

impl Stopped {
    fn new(pid: i32) -> Stopped {
        signal(pid, "-STOP");
        let stat = format!("/proc/{pid}/stat");
        let t = Instant::now();
        // The third field of /proc/PID/stat is the state: T once the stop took effect.
        while std::fs::read_to_string(&stat).map(|s| s.split(' ').nth(2) != Some("T")).unwrap_or(true) {
            assert!(t.elapsed() < Duration::from_secs(10), "backend {pid} never stopped");
            std::thread::sleep(Duration::from_millis(1));
        }
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").arg("-CONT").arg(self.0.to_string()).status();
    }
}

fn signal(pid: i32, sig: &str) {
    let st = std::process::Command::new("kill").arg(sig).arg(pid.to_string()).status().expect("run kill");
    assert!(st.success(), "kill {sig} {pid} failed");
}

/// Runs `sql` (a long-poll) on `c` in a thread; the receiver gets its row count, or its SQLSTATE.
fn long_poll_on(mut c: Client, sql: &'static str) -> mpsc::Receiver<Result<usize, String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = c.query(sql, &[]).map(|rows| rows.len()).map_err(|e| e.code().map(|s| s.code().to_string()).unwrap_or_default());
        let _ = tx.send(r);
    });
    rx
}

/// A cancel that lands together with a wakeup passes the wakeup on. Waiter W1, alone on the
/// queue, is stopped (SIGSTOP) while it sleeps; an enqueue commits, which chooses W1 (the only
/// waiter) for its job; another transaction holds the job's row while waiter W2 looks (it skips
/// the row and sleeps), then lets it go (no wakeup: nothing became claimable); W1 is cancelled
/// and resumed, so it wakes with both its wakeup and the cancel. W2 must get the job within a
/// few seconds: W1 checks for the cancel before it consumes the wakeup, so its abort passes the
/// wakeup on (src/wakeup.rs, `_wait` and `stop_waiting`). The queue never had a claim, so it has
/// no hint and no watcher whose timed look could find the job.
///
/// Seen failing against the build that consumed the wakeup before the interrupt check: "the
/// wakeup W1 was cancelled with was lost: W2 got Err(Timeout) within 5 s".
#[test]
fn a_cancel_that_lands_with_a_wakeup_passes_it_on() {
    let _counting = super::wakeup_counting();
    let db = TestDb::new("cancelwake");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let mut w1 = db.connect();
    let pid1 = backend_pid(&mut w1);
    let w1_done = long_poll_on(w1, "SELECT id FROM jq.claim('q', 'w1', wait => '20 s')");
    await_asleep(&mut c, pid1);
    let stopped = Stopped::new(pid1);
    let id: i64 = c.query_one("SELECT jq.enqueue('q', '{}')", &[]).unwrap().get(0);
    let mut holder = db.connect();
    holder.batch_execute("BEGIN").unwrap();
    holder.query("SELECT id FROM jq.jobs WHERE id = $1 FOR UPDATE", &[&id]).unwrap();
    let mut w2 = db.connect();
    let pid2 = backend_pid(&mut w2);
    let w2_done = long_poll_on(w2, "SELECT id FROM jq.claim('q', 'w2', wait => '20 s')");
    await_asleep(&mut c, pid2);
    holder.batch_execute("COMMIT").unwrap();
    let cancelled: bool = c.query_one("SELECT pg_cancel_backend($1)", &[&pid1]).unwrap().get(0);
    assert!(cancelled);
    drop(stopped);
    let w1_got = w1_done.recv_timeout(Duration::from_secs(10)).expect("W1 returned");
    assert_eq!(w1_got, Err("57014".to_string()), "W1 was cancelled");
    let w2_got = w2_done.recv_timeout(Duration::from_secs(5));
    assert!(matches!(w2_got, Ok(Ok(1))), "the wakeup W1 was cancelled with was lost: W2 got {w2_got:?} within 5 s");
}

/// Waits (at most 10 s) until backend `pid` sleeps in a long-poll.
fn await_asleep(c: &mut Client, pid: i32) {
    let t = Instant::now();
    while !both_asleep(c, &[pid]) {
        assert!(t.elapsed() < Duration::from_secs(10), "backend {pid} never slept in its long-poll");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Creates queue `q` and a statement trigger `name` on jq.jobs that runs the plpgsql statements
/// `body` before every UPDATE, so inside every claim's look (it fires even when the claim
/// updates no row).
fn queue_with_look_trigger(c: &mut Client, name: &str, body: &str) {
    c.batch_execute(&format!(
        "SELECT jq.create_queue('q');
         CREATE FUNCTION public.{name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} RETURN NULL; END $$;
         CREATE TRIGGER {name} BEFORE UPDATE ON jq.jobs FOR EACH STATEMENT EXECUTE FUNCTION public.{name}()"
    ))
    .unwrap();
}

/// A wakeup that lands while PostgreSQL itself waits inside the woken claim's look is not lost.
/// Any wait of PostgreSQL's own on the backend's latch (a heavyweight lock, `pg_sleep`) resets
/// the latch when it ends, so a committer's latch can be gone while its `woken` bit stays set;
/// every later committer then skips this waiter (it owes a look). Here a statement trigger on
/// `jq.jobs` sleeps half a second in every claim's `UPDATE`: waiter W sleeps on an empty queue,
/// `jq.resume` wakes it (it finds nothing), and while its look sleeps in the trigger a job
/// commits, which chooses W. W's look cannot see that job (its snapshot is older); W must look
/// again instead of sleeping out its 60 s (src/wakeup.rs, `_wait` checks `woken` before it
/// sleeps). The database runs without claim-start hints, so no watcher's timed look finds the
/// job. Seen failing against the build whose `_wait` slept on the latch alone ("the job
/// committed during W's look was not claimed: W got Err(Timeout) within 5 s"; in psql, W
/// slept on with `jq._waiters().woken` = 1 until its wait ran out).
#[test]
fn a_wakeup_whose_latch_a_wait_in_the_look_reset_is_not_lost() {
    let _counting = super::wakeup_counting();
    let db = super::unwoken_db("latchreset");
    let mut c = db.connect();
    queue_with_look_trigger(&mut c, "slow_update", "PERFORM pg_sleep(0.5);");
    let mut w = db.connect();
    let pid = backend_pid(&mut w);
    let w_done = long_poll_on(w, "SELECT id FROM jq.claim('q', 'w', wait => '60 s')");
    await_asleep(&mut c, pid);
    c.batch_execute("SELECT jq.resume('q')").unwrap();
    let t = Instant::now();
    let in_trigger = |c: &mut Client| -> bool {
        c.query_one("SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = $1", &[&pid])
            .unwrap()
            .get::<_, Option<bool>>(0)
            .unwrap_or(false)
    };
    while !in_trigger(&mut c) {
        assert!(t.elapsed() < Duration::from_secs(10), "W's look never reached the trigger");
        std::thread::sleep(Duration::from_millis(2));
    }
    c.batch_execute("SELECT jq.enqueue('q', '{}')").unwrap();
    // W's next look sleeps half a second in the trigger too: 5 s leaves room for a loaded
    // machine, and stays well below the wait, since PostgreSQL itself sets a sleeping backend's
    // latch now and then (which would let the build without the check pass by chance).
    let got = w_done.recv_timeout(Duration::from_secs(5));
    assert!(matches!(got, Ok(Ok(1))), "the job committed during W's look was not claimed: W got {got:?} within 5 s");
}

/// A capped long-poll that takes the queue row lock and then finds the cap reached returns at
/// once, empty (it never sleeps holding the lock), and ends its waiter registration as every
/// other return does. Left registered in the caller's open transaction, it could be chosen for
/// a wakeup (a capped queue wakes one waiter per freed slot) that it never acts on, while another
/// consumer of the queue slept on. Here B's look sees the cap free (A's claim of the one slot is
/// not committed), waits for the queue row lock A holds, and under it finds the slot taken.
/// Seen failing before the fix: "B is still a registered waiter (1 row in jq._waiters())".
#[test]
fn a_capped_long_poll_that_returns_under_the_row_lock_ends_its_wait() {
    let db = TestDb::new("capped_gate_done");
    let mut a = db.connect();
    a.batch_execute(
        "SELECT jq.create_queue('cw'); SELECT jq.alter_queue('cw', max_concurrency => 1);
         SELECT jq.enqueue('cw', '{}'); SELECT jq.enqueue('cw', '{}');",
    )
    .unwrap();
    a.batch_execute("BEGIN").unwrap();
    assert_eq!(claim(&mut a, "cw", "a", 1, None).len(), 1, "A takes the one slot and holds the queue row");
    let mut b = db.connect();
    let b_pid = backend_pid(&mut b);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        b.batch_execute("BEGIN").unwrap();
        let got = b.query("SELECT id FROM jq.claim('cw', 'b', wait => '10 s')", &[]).map(|r| r.len());
        let _ = tx.send((got.map_err(|e| e.to_string()), b));
    });
    let mut c = db.connect();
    let t = Instant::now();
    loop {
        let n: i64 = c
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", &[&b_pid])
            .unwrap()
            .get(0);
        if n == 1 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "B never waited for the queue row lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    a.batch_execute("COMMIT").unwrap();
    let (got, mut b) = rx.recv_timeout(Duration::from_secs(10)).expect("B's claim returns");
    assert_eq!(got, Ok(0), "B finds the cap reached under the lock");
    let registered: i64 = c.query_one("SELECT count(*) FROM jq._waiters() WHERE pid = $1", &[&b_pid]).unwrap().get(0);
    b.batch_execute("COMMIT").unwrap();
    assert_eq!(registered, 0, "B is still a registered waiter ({registered} row in jq._waiters())");
}

/// A long-poll that fails inside a savepoint (here its statement timeout; also a cancel, a lock
/// timeout, or 42704 once its queue is dropped) ends its wait when the savepoint is rolled back,
/// not when the outer transaction ends: left registered in the open transaction, the backend
/// could be chosen for a wakeup it never acts on, while another consumer of the queue slept on.
/// (src/wakeup.rs, at_subxact_abort; the registration of an enclosing level stays:
/// `a_savepoint_rolled_back_inside_a_long_polls_look_leaves_it_waiting`). Seen failing before
/// the fix: "B is still a registered waiter after ROLLBACK TO SAVEPOINT (1 row in jq._waiters())".
#[test]
fn a_long_poll_that_fails_inside_a_savepoint_ends_its_wait() {
    let db = TestDb::new("savepoint_wait");
    let mut b = db.connect();
    let b_pid = backend_pid(&mut b);
    b.batch_execute("SELECT jq.create_queue('sv')").unwrap();
    b.batch_execute("BEGIN").unwrap();
    b.batch_execute("SAVEPOINT s").unwrap();
    b.batch_execute("SET LOCAL statement_timeout = '300ms'").unwrap();
    let r = b.query("SELECT id FROM jq.claim('sv', 'b', wait => '10 s')", &[]);
    assert_eq!(sqlstate(r), "57014", "the long-poll times out");
    b.batch_execute("ROLLBACK TO SAVEPOINT s").unwrap();
    let mut c = db.connect();
    let registered: i64 = c.query_one("SELECT count(*) FROM jq._waiters() WHERE pid = $1", &[&b_pid]).unwrap().get(0);
    assert_eq!(registered, 0, "B is still a registered waiter after ROLLBACK TO SAVEPOINT ({registered} row in jq._waiters())");
    // The transaction goes on: a job enqueued now is claimed by B's next call in it.
    c.batch_execute("SELECT jq.enqueue('sv', '{}')").unwrap();
    let got = b.query("SELECT id FROM jq.claim('sv', 'b', wait => '10 s')", &[]).unwrap();
    b.batch_execute("COMMIT").unwrap();
    assert_eq!(got.len(), 1, "B claims the job after the rollback to its savepoint");
}

/// A subtransaction that starts and rolls back inside a long-poll's look (here a statement
/// trigger on jq.jobs with an EXCEPTION block that catches an error) leaves the long-poll
/// registered: only the rollback of the level it registered in, or of one above it, ends its
/// wait (src/wakeup.rs, at_subxact_abort). Ended there, the claim would sleep unregistered and
/// no commit would wake it. Seen failing against a build that ended the wait at every
/// subtransaction rollback: "W sleeps in its long-poll but is not a registered waiter".
#[test]
fn a_savepoint_rolled_back_inside_a_long_polls_look_leaves_it_waiting() {
    let db = TestDb::new("inner_savepoint");
    let mut c = db.connect();
    queue_with_look_trigger(&mut c, "catching", "BEGIN PERFORM 1 / 0; EXCEPTION WHEN division_by_zero THEN NULL; END;");
    let mut w = db.connect();
    let pid = backend_pid(&mut w);
    let w_done = long_poll_on(w, "SELECT id FROM jq.claim('q', 'w', wait => '30 s')");
    await_asleep(&mut c, pid);
    let registered: i64 = c.query_one("SELECT count(*) FROM jq._waiters() WHERE pid = $1", &[&pid]).unwrap().get(0);
    assert_eq!(registered, 1, "W sleeps in its long-poll but is not a registered waiter");
    c.batch_execute("SELECT jq.enqueue('q', '{}')").unwrap();
    let got = w_done.recv_timeout(Duration::from_secs(20));
    assert!(matches!(got, Ok(Ok(1))), "W did not claim the job enqueued while it waited: {got:?}");
}
