//! The worker under a flood of instant failures (a downstream outage): heartbeats are never
//! starved by the outcomes waiting to be reported, every failure is charged, and the claim loop
//! never runs ahead of the reporter. The library in-process, so that 20,000 handlers cost no
//! process each.
//!
//! Negative control (the reporter as it was: failures one `jq.fail` round trip each, heartbeats
//! only when no outcome waits, claims never paused):
//!   JQ_CLIENT_BREAK=starving_reporter cargo test -p worker-client --features test-breaks --test stress

mod common;
use common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use worker_client::{config_from_env, Job, Worker};

/// Jobs whose handler fails at once.
const FLOOD: i64 = 20_000;

/// What the database says about the run, compared as a whole so a failure shows every figure.
#[derive(Debug, PartialEq, Eq)]
struct Summary {
    /// The long job: state, attempt, its executions' outcomes in order.
    long: (String, i32, Vec<String>),
    /// Flood jobs scheduled for their retry an hour out with attempt 1 (charged once).
    flood_charged: i64,
    /// Flood jobs in any other condition.
    flood_other: i64,
    /// Executions by outcome among the flood jobs: failed, lease_expired (a refund).
    flood_failed: i64,
    flood_lease_expired: i64,
}

fn summary(c: &mut Client, long: i64) -> Summary {
    let r = c.query_one("SELECT state::text, attempt FROM jq.jobs WHERE id = $1", &[&long]).unwrap();
    let outcomes: Vec<String> = c
        .query("SELECT outcome::text FROM jq.executions WHERE job_id = $1 ORDER BY seq", &[&long])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let charged: i64 = c
        .query_one(
            "SELECT count(*) FROM jq.jobs WHERE kind = 'boom' AND state = 'scheduled' AND attempt = 1 \
               AND run_at > now() + interval '50 minutes'",
            &[],
        )
        .unwrap()
        .get(0);
    let outcome = |c: &mut Client, o: &str| -> i64 {
        c.query_one(
            "SELECT count(*) FROM jq.executions e JOIN jq.jobs j ON j.id = e.job_id \
             WHERE j.kind = 'boom' AND e.outcome::text = $1",
            &[&o],
        )
        .unwrap()
        .get(0)
    };
    Summary {
        long: (r.get(0), r.get(1), outcomes),
        flood_charged: charged,
        flood_other: FLOOD - charged,
        flood_failed: outcome(c, "failed"),
        flood_lease_expired: outcome(c, "lease_expired"),
    }
}

/// Lease 3 s, concurrency 8: one job running 12 s (four leases) among 20,000 jobs whose handler
/// fails at once, retried an hour later (fixed backoff, no jitter). The long job must keep its
/// lease throughout (one run, attempt 1, completed, no lease_expired execution), and every
/// failure must be charged (attempt 1, retry an hour out, a `failed` execution, none expired).
///
/// Seen failing on the code before the fix (one run) and under the control (two runs),
/// `starving_reporter` (the reporter as it was): the summary's `long` held five `lease_expired`
/// executions before its `completed` one (the long job lost its lease every 3 s and ran again),
/// and the flood 25,000 to 27,000 `lease_expired` executions (failures refunded by the reaper
/// before they were reported). With the room semaphore alone disabled (a local edit), the
/// bound below failed: "641 jobs running at once".
#[test]
fn a_long_job_keeps_its_lease_while_instant_failures_flood_the_worker() {
    // A control asked for in a build without the feature would test the real worker.
    let _ = break_env();
    let db = TestDb::new("stress");
    let mut c = db.connect();
    create_queue(
        &mut c,
        "flood",
        "3 seconds",
        ", max_attempts => 5, backoff => 'fixed', backoff_base => '1 hour', jitter => 'none'",
    );
    let long: i64 = c.query_one("SELECT jq.enqueue('flood', '{}', kind => 'long', priority => 10)", &[]).unwrap().get(0);
    c.execute(
        "SELECT jq.enqueue_many('flood', (SELECT jsonb_agg(g) FROM generate_series(1, $1::int) g), kind => 'boom')",
        &[&(FLOOD as i32)],
    )
    .unwrap();
    // The reaper and promotion, as the background worker would run them.
    let _tick = Ticker::start(&db, Duration::from_millis(200));

    let long_runs = Arc::new(AtomicUsize::new(0));
    let runs = long_runs.clone();
    let config = config_from_env(Some(&db.conninfo())).unwrap();
    let worker = Worker::builder(config)
        .queue("flood")
        .handler("long", move |_job: Job| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(Duration::from_secs(12)).await;
                Ok(None)
            }
        })
        .handler("boom", |_job: Job| async move { Err("downstream unavailable".into()) })
        .concurrency(8)
        .worker_name("flood-test")
        .build()
        .unwrap();
    let runner = InProcess::start(worker);

    // Until nothing is left to claim or running, with a deadline; the summary then says what
    // went wrong if anything did.
    // Meanwhile the most jobs seen running (claimed, outcome not yet reported).
    let started = Instant::now();
    let limit = Duration::from_secs(75);
    let mut most_running = 0;
    while started.elapsed() < limit {
        let r = c.query_one("SELECT count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state = 'ready') FROM jq.jobs", &[]).unwrap();
        let (running, ready): (i64, i64) = (r.get(0), r.get(1));
        most_running = most_running.max(running);
        if running + ready == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let settled = started.elapsed();
    let stats = runner.stop();
    let got = summary(&mut c, long);
    eprintln!("settled after {settled:?}; at most {most_running} running; {stats:?}; {got:?}");
    let want = Summary {
        long: ("completed".into(), 1, vec!["completed".into()]),
        flood_charged: FLOOD,
        flood_other: 0,
        flood_failed: FLOOD,
        flood_lease_expired: 0,
    };
    assert_eq!(got, want, "after {settled:?} (limit {limit:?}); worker {stats:?}");
    assert_eq!(long_runs.load(Ordering::SeqCst), 1, "the long job ran again");
    assert_eq!((stats.completed, stats.failed as i64, stats.lost), (1, FLOOD, 0), "{stats:?}");
    // Backpressure: the worker never held more than its concurrency plus one report batch of
    // waiting outcomes (worker/mod.rs, MAX_UNREPORTED = 500).
    assert!(most_running <= 8 + 500, "{most_running} jobs running at once: claims ran ahead of the reporter");
}
