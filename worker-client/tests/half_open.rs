//! Half-open connections: the worker's connections go through a TCP proxy of the test's own
//! ([`Proxy`]) that the test freezes — it stops forwarding bytes while keeping both sockets
//! open, so the kernels on both sides still acknowledge everything and neither keepalives nor
//! the TCP user timeout can tell: only the worker's own per-call deadlines notice. The worker
//! must notice within seconds (asserted on the proxy's accepted connections or on database
//! state, with a deadline), reconnect, and finish every job, each completed exactly once; a job
//! taken by a call that never came back ends through its lease (reaped, run again).
//!
//! Negative controls, each seen failing (cargo test -p worker-client --features test-breaks
//! --test half_open, with JQ_CLIENT_BREAK set):
//! - `no_io_deadline` (the worker's calls unbounded, as before call timeouts): every test but
//!   `connecting_through_a_frozen_path_is_bounded` fails — the worker never opens a new
//!   connection after the freeze (or, for the long job, its heartbeat never returns and the
//!   job does not complete within the test's minute);
//! - `heartbeat_full_timeout` (a heartbeat waits the whole call timeout whatever is left of its
//!   lease): `a_long_job_keeps_its_lease_across_a_frozen_connection` fails (the job's lease runs
//!   out before the heartbeat is retried, so it runs twice);
//! - `no_connect_bound` (a connection attempt bounded only by tokio-postgres' TCP connect
//!   timeout): `connecting_through_a_frozen_path_is_bounded` fails (`jqctl` hangs in the
//!   start-up handshake).

mod common;
use common::*;
use std::collections::HashMap;
use std::net::TcpListener as StdListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use worker_client::{config_from_env, Job, Worker};

/// The bound the tests assert on noticing a frozen connection: the worker's defaults notice
/// within 5 s (a call) or the idle wait plus 5 s (a long-poll claim).
const NOTICE_WITHIN: Duration = Duration::from_secs(15);

/// What a link forwards.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Flow {
    /// Both directions.
    Open,
    /// Client to server only: requests run, their answers never arrive.
    NoAnswers,
    /// Nothing.
    Frozen,
}

/// The part of a [`Proxy`] the test and handlers drive.
#[derive(Default)]
struct Control {
    /// Links accepted so far.
    accepted: AtomicUsize,
    /// New links start frozen (the whole path is stuck, not only the open connections).
    hold_new: AtomicBool,
    links: Mutex<Vec<watch::Sender<Flow>>>,
}

impl Control {
    /// Stops forwarding on every open link as `flow` says; with `hold_new`, links accepted from
    /// now on are frozen too, else they forward normally (a new path to the server).
    fn freeze(&self, flow: Flow, hold_new: bool) {
        self.hold_new.store(hold_new, Ordering::SeqCst);
        for l in self.links.lock().unwrap().iter() {
            let _ = l.send(flow);
        }
    }

    /// Every link forwards again.
    fn thaw(&self) {
        self.hold_new.store(false, Ordering::SeqCst);
        for l in self.links.lock().unwrap().iter() {
            let _ = l.send(Flow::Open);
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// A TCP proxy to the test cluster on a port of its own, on a runtime of its own: accepts,
/// connects upstream, copies both ways while its [`Flow`] allows.
struct Proxy {
    port: u16,
    ctl: Arc<Control>,
    _rt: tokio::runtime::Runtime,
}

impl Proxy {
    fn start() -> Proxy {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let std_listener = StdListener::bind("127.0.0.1:0").unwrap();
        let port = std_listener.local_addr().unwrap().port();
        std_listener.set_nonblocking(true).unwrap();
        let ctl = Arc::new(Control::default());
        let c = ctl.clone();
        let upstream = format!("{}:{}", host(), common::port());
        rt.spawn(async move {
            let listener = TcpListener::from_std(std_listener).unwrap();
            while let Ok((client, _)) = listener.accept().await {
                c.accepted.fetch_add(1, Ordering::SeqCst);
                let start = if c.hold_new.load(Ordering::SeqCst) { Flow::Frozen } else { Flow::Open };
                let (tx, rx) = watch::channel(start);
                c.links.lock().unwrap().push(tx);
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else { return };
                    let (crd, cwr) = client.into_split();
                    let (srd, swr) = server.into_split();
                    tokio::spawn(pump(crd, swr, rx.clone(), |f| f == Flow::Frozen));
                    tokio::spawn(pump(srd, cwr, rx, |f| f != Flow::Open));
                });
            }
        });
        Proxy { port, ctl, _rt: rt }
    }

    /// A `key=value` connection string to `db` through the proxy.
    fn conninfo(&self, db: &TestDb, app: &str) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname={} application_name={app}", self.port, db.name)
    }

    /// The URL of `db` through the proxy.
    fn url(&self, db: &TestDb) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/{}", self.port, db.name)
    }
}

/// Copies `rd` to `wr` while `stopped(flow)` is false; while it is true reads nothing and writes
/// nothing (bytes already read wait), leaving both sockets open.
async fn pump(mut rd: OwnedReadHalf, mut wr: OwnedWriteHalf, mut flow: watch::Receiver<Flow>, stopped: fn(Flow) -> bool) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if flow.wait_for(|f| !stopped(*f)).await.is_err() {
            return;
        }
        let n = tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = flow.wait_for(|f| stopped(*f)) => continue,
        };
        if flow.wait_for(|f| !stopped(*f)).await.is_err() {
            return;
        }
        if wr.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

/// Waits until the proxy has accepted a link after `before` (the worker noticed and
/// reconnected), at most [`NOTICE_WITHIN`] after `frozen_at`; returns how long it took.
fn await_reconnect(ctl: &Control, before: usize, frozen_at: Instant, what: &str) -> Duration {
    wait_until(NOTICE_WITHIN, what, || ctl.accepted() > before);
    let took = frozen_at.elapsed();
    eprintln!("{what}: {took:?} after the freeze");
    took
}

/// Waits until the worker's three connections (claims, outcomes, heartbeats) are open, so that
/// the freeze catches each of them open and a new link after it is a reconnect, not a first
/// connect.
fn await_three_connections(db: &TestDb, c: &mut Client, app: &str) {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND application_name = '{app}'",
        db.name
    );
    wait_until(Duration::from_secs(60), "the worker's three connections open", || db.count(c, &sql) == 3);
}

fn completed(db: &TestDb, c: &mut Client) -> i64 {
    db.count(c, "SELECT count(*) FROM jq.jobs WHERE state = 'completed'")
}

/// Every job of the database completed exactly once, none failed, its result its payload;
/// every other execution a lease that ran out. Returns the lease_expired executions by job.
fn completed_exactly_once(c: &mut Client, n: i64) -> HashMap<i64, i64> {
    let row = c
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE state = 'completed' AND result = payload) FROM jq.jobs",
            &[],
        )
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (n, n), "every job completed with its payload as result");
    let mut expired = HashMap::new();
    let mut completions: HashMap<i64, i64> = HashMap::new();
    for (job, _seq, _attempt, outcome, _worker) in executions(c) {
        match outcome.as_str() {
            "completed" => *completions.entry(job).or_default() += 1,
            "lease_expired" => *expired.entry(job).or_default() += 1,
            other => panic!("job {job}: execution {other}"),
        }
    }
    assert_eq!(completions.len() as i64, n);
    assert!(completions.values().all(|&k| k == 1), "a job completed twice: {completions:?}");
    expired
}

/// Handlers that count their runs by job id and return the payload after `pause`, or after
/// the payload's `ms` milliseconds when it has them.
fn counting_handler(runs: Arc<Mutex<HashMap<i64, usize>>>, pause: Duration) -> impl worker_client::Handler {
    move |job: Job| {
        *runs.lock().unwrap().entry(job.id).or_default() += 1;
        let pause = job.payload["ms"].as_u64().map_or(pause, Duration::from_millis);
        async move {
            tokio::time::sleep(pause).await;
            Ok(Some(job.payload))
        }
    }
}

/// (a) The library: 300 jobs (100 ms each) flowing through the proxy; the whole path freezes (open links and
/// new ones); the worker notices within 15 s (it opens a new link), and once thawed finishes
/// every job, each completed once; a job run again was taken back through its lease.
#[test]
fn a_library_worker_notices_a_frozen_path_and_finishes_every_job_once() {
    let _ = break_env();
    let db = TestDb::new("halfopen_lib");
    let mut c = db.connect();
    create_queue(&mut c, "lib", "4 seconds", "");
    let n = 300;
    // Four 3-s jobs first, so that heartbeats (every 4/3 s) open their connection early.
    c.execute("SELECT jq.enqueue_many('lib', (SELECT jsonb_agg(jsonb_build_object('n', g, 'ms', 3000)) FROM generate_series(1, 4) g))", &[])
        .unwrap();
    c.execute("SELECT jq.enqueue_many('lib', (SELECT jsonb_agg(jsonb_build_object('n', g)) FROM generate_series(5, $1::int) g))", &[&(n as i32)])
        .unwrap();
    let _tick = Ticker::start(&db, Duration::from_millis(300));
    let proxy = Proxy::start();
    let runs: Arc<Mutex<HashMap<i64, usize>>> = Arc::default();
    let config = config_from_env(Some(&proxy.conninfo(&db, "half-open-lib"))).unwrap();
    let worker = Worker::builder(config)
        .queue("lib")
        .fallback("lib", counting_handler(runs.clone(), Duration::from_millis(100)))
        .concurrency(4)
        .idle_wait(Duration::from_secs(2))
        .build()
        .unwrap();
    let runner = InProcess::start(worker);
    wait_until(Duration::from_secs(60), "50 jobs completed", || completed(&db, &mut c) >= 50);
    await_three_connections(&db, &mut c, "half-open-lib");

    let before = proxy.ctl.accepted();
    let frozen_at = Instant::now();
    proxy.ctl.freeze(Flow::Frozen, true);
    await_reconnect(&proxy.ctl, before, frozen_at, "the library worker tried a new connection");
    let at_thaw = completed(&db, &mut c);
    proxy.ctl.thaw();
    wait_until(Duration::from_secs(120), "every job completed after the thaw", || completed(&db, &mut c) == n);
    let stats = runner.stop_within(Duration::from_secs(30));
    eprintln!("{at_thaw} completed at the thaw; {stats:?}");

    let expired = completed_exactly_once(&mut c, n);
    for (job, k) in runs.lock().unwrap().iter() {
        let again = *k as i64 - 1;
        assert!(again <= expired.get(job).copied().unwrap_or(0), "job {job} ran {k} times with {expired:?}");
    }
    assert_eq!(runs.lock().unwrap().len() as i64, n);
}

/// (a) `jqctl work` as a real process: its open connections freeze for good while new ones go
/// through (a new path); it notices within 15 s, finishes all 200 jobs (100 ms each) on new connections,
/// each completed once, and stops on SIGTERM (no call left hanging on a frozen connection).
#[test]
fn jqctl_work_notices_frozen_connections_and_goes_on_through_a_new_path() {
    let db = TestDb::new("halfopen_cli");
    let mut c = db.connect();
    create_queue(&mut c, "cli", "3 seconds", "");
    let n = 200;
    let payloads: Vec<String> = (1..=n).map(|i| format!("{{\"n\":{i}}}")).collect();
    enqueue_lines(&db, "cli", &payloads);
    let _tick = Ticker::start(&db, Duration::from_millis(300));
    let proxy = Proxy::start();
    let envs = break_env();
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut w = WorkerProc::start_at(
        &proxy.url(&db),
        &db.name,
        "cli",
        "w1",
        &["-c", "4", "--idle-wait", "2s"],
        // the first four jobs run 2 s, so that heartbeats (every second) open their connection
        "if [ \"$JQ_JOB_ID\" -le 4 ]; then sleep 2; fi; sleep 0.1; cat",
        &envs,
    );
    wait_until(Duration::from_secs(60), "40 jobs completed", || completed(&db, &mut c) >= 40);
    await_three_connections(&db, &mut c, "jqctl-work");

    let before = proxy.ctl.accepted();
    let frozen_at = Instant::now();
    proxy.ctl.freeze(Flow::Frozen, false);
    await_reconnect(&proxy.ctl, before, frozen_at, "jqctl work opened a new connection");
    wait_until(Duration::from_secs(120), "every job completed on new connections", || completed(&db, &mut c) == n);
    assert!(w.child.try_wait().unwrap().is_none(), "worker still running\n{}", w.log_text());
    w.signal("TERM");
    let st = w.wait_for(Duration::from_secs(40)).unwrap_or_else(|| panic!("jqctl work did not stop\n{}", w.log_text()));
    assert!(st.success(), "{}", w.log_text());
    completed_exactly_once(&mut c, n);
    let log = w.log_text();
    assert!(log.contains("no answer from the server within"), "one clear line per dropped connection:\n{log}");
}

/// (b) A long-poll claim (idle wait 3 s) frozen while it waits: the worker notices within the
/// wait plus the call timeout and claims on a new connection; a job enqueued during the freeze
/// is completed once — by the new connection, or, if the frozen claim took it, after its lease
/// ran out.
#[test]
fn a_frozen_long_poll_claim_is_noticed() {
    let _ = break_env();
    let db = TestDb::new("halfopen_wait");
    let mut c = db.connect();
    create_queue(&mut c, "idle", "3 seconds", "");
    let _tick = Ticker::start(&db, Duration::from_millis(300));
    let proxy = Proxy::start();
    let runs: Arc<Mutex<HashMap<i64, usize>>> = Arc::default();
    let config = config_from_env(Some(&proxy.conninfo(&db, "half-open-wait"))).unwrap();
    let worker = Worker::builder(config)
        .queue("idle")
        .fallback("idle", counting_handler(runs.clone(), Duration::ZERO))
        .idle_wait(Duration::from_secs(3))
        .build()
        .unwrap();
    let runner = InProcess::start(worker);
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND application_name = 'half-open-wait' \
         AND state = 'active' AND query LIKE '%jq.claim%'",
        db.name
    );
    wait_until(Duration::from_secs(30), "the worker's claim waiting", || db.count(&mut c, &waiting) == 1);

    let before = proxy.ctl.accepted();
    let frozen_at = Instant::now();
    proxy.ctl.freeze(Flow::Frozen, false);
    c.batch_execute("SELECT jq.enqueue('idle', '{\"during\": true}')").unwrap();
    await_reconnect(&proxy.ctl, before, frozen_at, "the idle worker reconnected");
    c.batch_execute("SELECT jq.enqueue('idle', '{\"after\": true}')").unwrap();
    wait_until(Duration::from_secs(30), "both jobs completed", || completed(&db, &mut c) == 2);
    let stats = runner.stop_within(Duration::from_secs(30));
    eprintln!("{stats:?}");
    completed_exactly_once(&mut c, 2);
}

/// (c) The outcome of a job in flight when the connections freeze: the handler freezes the
/// proxy just before it returns (new links go through). With `flow` Frozen the completion never
/// reaches the server; with NoAnswers it runs there but its answer never comes back. Either
/// way the worker notices within the call timeout, retries on a new connection (fenced by the
/// lease token: the repeat of a completion that ran changes nothing), and the job is completed
/// once, well before its 60 s lease could end, with one run of its handler.
fn completion_in_flight(flow: Flow) {
    let _ = break_env();
    let db = TestDb::new("halfopen_done");
    let mut c = db.connect();
    create_queue(&mut c, "done", "60 seconds", "");
    let proxy = Proxy::start();
    let runs: Arc<Mutex<HashMap<i64, usize>>> = Arc::default();
    let frozen_at: Arc<Mutex<Option<(Instant, usize)>>> = Arc::default();
    let (ctl, r, f) = (proxy.ctl.clone(), runs.clone(), frozen_at.clone());
    let config = config_from_env(Some(&proxy.conninfo(&db, "half-open-done"))).unwrap();
    let worker = Worker::builder(config)
        .queue("done")
        .fallback("done", move |job: Job| {
            *r.lock().unwrap().entry(job.id).or_default() += 1;
            if job.payload["freeze"] == true {
                *f.lock().unwrap() = Some((Instant::now(), ctl.accepted()));
                ctl.freeze(flow, false);
            }
            async move { Ok(Some(job.payload)) }
        })
        .idle_wait(Duration::from_secs(2))
        .build()
        .unwrap();
    let runner = InProcess::start(worker);
    // A first job opens the reporter's connection, so that the second one's completion goes
    // out on a connection that is open when the proxy freezes.
    c.batch_execute("SELECT jq.enqueue('done', '{\"freeze\": false}')").unwrap();
    wait_until(Duration::from_secs(30), "the first job completed", || completed(&db, &mut c) == 1);
    c.batch_execute("SELECT jq.enqueue('done', '{\"freeze\": true}')").unwrap();
    wait_until(Duration::from_secs(30), "the handler froze the proxy", || frozen_at.lock().unwrap().is_some());
    let (at, before) = frozen_at.lock().unwrap().expect("set");
    await_reconnect(&proxy.ctl, before, at, &format!("the worker reconnected ({flow:?})"));
    wait_until(NOTICE_WITHIN, "the second job completed", || completed(&db, &mut c) == 2);
    assert!(at.elapsed() < NOTICE_WITHIN, "completed {:?} after the freeze", at.elapsed());
    let stats = runner.stop_within(Duration::from_secs(30));
    eprintln!("{flow:?}: {stats:?}");
    assert!(completed_exactly_once(&mut c, 2).is_empty(), "no lease ran out");
    assert!(runs.lock().unwrap().values().all(|&k| k == 1), "{:?}", runs.lock().unwrap());
    // A repeated completion that had run finds the job no longer under its token: not counted.
    assert_eq!(stats.completed + stats.lost, 2, "{stats:?}");
}

#[test]
fn a_completion_that_never_reached_the_server_is_sent_again() {
    completion_in_flight(Flow::Frozen);
}

#[test]
fn a_completion_whose_answer_never_came_back_is_not_done_twice() {
    completion_in_flight(Flow::NoAnswers);
}

/// A heartbeat cut off by the freeze is retried on a new connection before the lease runs out:
/// lease 12 s, call timeout 10 s, one job running 20 s. The freeze comes right after its first
/// heartbeat; the second (8 s into the lease) gets at most half of what is left (4 s), so it is
/// retried about 13 s in, before the lease ends at 16 s; the job runs once and is completed.
/// With the call timeout alone (control `heartbeat_full_timeout`) the second heartbeat gives up
/// at 18 s, after the lease ended: the job is reaped and runs again.
#[test]
fn a_long_job_keeps_its_lease_across_a_frozen_connection() {
    let _ = break_env();
    let db = TestDb::new("halfopen_beat");
    let mut c = db.connect();
    create_queue(&mut c, "long", "12 seconds", "");
    let _tick = Ticker::start(&db, Duration::from_millis(200));
    let proxy = Proxy::start();
    let runs: Arc<Mutex<HashMap<i64, usize>>> = Arc::default();
    let config = config_from_env(Some(&proxy.conninfo(&db, "half-open-beat"))).unwrap();
    let worker = Worker::builder(config)
        .queue("long")
        .fallback("long", counting_handler(runs.clone(), Duration::from_secs(20)))
        .call_timeout(Duration::from_secs(10))
        .idle_wait(Duration::from_secs(2))
        .build()
        .unwrap();
    let runner = InProcess::start(worker);
    let id: i64 = c.query_one("SELECT jq.enqueue('long', '{\"long\": true}')", &[]).unwrap().get(0);
    let lease = |c: &mut Client| -> Option<f64> {
        c.query_opt("SELECT extract(epoch FROM lease_expires_at)::float8 FROM jq.jobs WHERE id = $1 AND state = 'running'", &[&id])
            .unwrap()
            .map(|r| r.get(0))
    };
    wait_until(Duration::from_secs(30), "the job claimed", || lease(&mut c).is_some());
    let first = lease(&mut c).expect("running");
    wait_until(Duration::from_secs(30), "its first heartbeat", || lease(&mut c).is_some_and(|l| l > first));
    proxy.ctl.freeze(Flow::Frozen, false);
    wait_until(Duration::from_secs(60), "the job completed", || completed(&db, &mut c) == 1);
    let stats = runner.stop_within(Duration::from_secs(30));
    eprintln!("{stats:?}");
    assert!(completed_exactly_once(&mut c, 1).is_empty(), "its lease ran out");
    assert_eq!(runs.lock().unwrap().get(&id), Some(&1));
}

/// Connecting through a path that accepts and then says nothing (the start-up packet never
/// answered) fails within `connect_timeout` with one line, instead of hanging: tokio-postgres
/// alone bounds only the TCP connect.
#[test]
fn connecting_through_a_frozen_path_is_bounded() {
    let envs = break_env();
    let db = TestDb::new("halfopen_conn");
    let proxy = Proxy::start();
    proxy.ctl.freeze(Flow::Frozen, true);
    let url = format!("{}?connect_timeout=2", proxy.url(&db));
    let mut cmd = jqctl_with_url(&url);
    cmd.arg("queues").envs(envs.iter().map(|(k, v)| (*k, v.as_str())));
    let log = log_dir().join(format!("{}-connect.log", db.name));
    cmd.stdout(std::process::Stdio::null()).stderr(std::fs::File::create(&log).unwrap());
    let started = Instant::now();
    // killed on drop if the test fails while it still runs
    let mut p = WorkerProc { child: cmd.spawn().unwrap(), name: "connect".into(), log };
    let st = p.wait_for(NOTICE_WITHIN);
    let err = p.log_text();
    eprintln!("gave up after {:?}: {err}", started.elapsed());
    let st = st.unwrap_or_else(|| panic!("jqctl still connecting after {NOTICE_WITHIN:?}"));
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("no connection within 2s (connect_timeout)"), "{err}");
}
