//! Drivers of jq's benchmark suite, called by `bench/run`; each prints one JSON line.
//!
//! ```text
//! jq-bench latency URL QUEUE RATE SECS CONSUMERS [SAMPLES_CSV]
//!     Enqueues at a fixed arrival rate (jobs/s, open loop, spread over several producer
//!     connections) for SECS seconds, the first second being warm-up, while CONSUMERS
//!     connections loop `jq.claim(queue, …, n => 10, wait => '1 second')` (returns as soon as
//!     at least one job is claimable) + `jq.complete_many`. Reports
//!     p50/p95/p99/max of the time from the enqueue's commit (its autocommit statement
//!     returned to the producer) to the claim returning that job to a consumer, both taken
//!     with one monotonic clock in this process; and p99 from the enqueue's send, an upper
//!     bound (the commit happens between the send and the answer). SAMPLES_CSV, if given,
//!     gets one line per measured job, `from_commit_ms,from_send_ms`, or `missing` for a job
//!     no consumer claimed within 5 s of the last send, so that rounds can be pooled.
//!     CONSUMERS `client:W:C` instead runs W `worker_client::Worker`s of C handlers each (their
//!     long-poll claims): a job's pickup then ends when its handler starts, the target's
//!     definition ("from the enqueue's commit to the handler's start").
//! jq-bench client URL QUEUE WORKERS CONCURRENCY BATCH WARMUP_SECS SECS
//!     Runs WORKERS `worker_client::Worker`s (each: one claim and one report connection) with
//!     a no-op handler on a prefilled queue; jobs/s = completed jobs counted in the database
//!     over SECS after WARMUP_SECS. Then shuts the workers down and checks that every claimed
//!     job was completed or released, none failed or lost, no job's handler ran twice (the
//!     handler records each job id it is given), the jobs the database counts as completed
//!     during the run are the ones the workers report completing, and none is left running.
//!     A job released at shutdown may be claimed again by another worker still running: that
//!     is a hand-back, not a duplicate (counted as `reclaimed`, not judged).
//! jq-bench soak URL QUEUE RATE JOBS CONSUMERS OUTCSV
//!     Steady load: enqueues JOBS jobs at RATE jobs/s (open loop, 10 jobs per
//!     `jq.enqueue_many` call) while CONSUMERS connections loop `jq.claim(queue, …, 10)` (no
//!     wait; 2 ms pause after an empty claim) + `jq.complete_many`. RATE 0 first calibrates:
//!     10 s with the producers in a closed loop, peak = jobs completed per second, then
//!     RATE = 0.8 × peak.
//!     Every 10 s (a window) writes one OUTCSV row: jobs completed, p50/p99 of the claim calls
//!     that returned jobs (ms), ready depth, jq.jobs heap and index bytes, jq.execution_log bytes,
//!     dead tuples and autovacuum runs of both. Prints a JSON summary: the largest
//!     table+index size over the median of the second half of the producing windows (the
//!     steady state), and the last producing window's size over that median (late growth); the drift, the largest claim p99 of a whole minute of the run over the first
//!     minute's (each minute spans one autovacuum cycle, `autovacuum_naptime` = 1 min); and the
//!     spike, the largest 10-s window p99 over the first window's (a window that holds an
//!     autovacuum of jq.jobs against one that does not).
//! ```
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, NoTls};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

async fn connect(url: &str) -> Res<Client> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> T {
    args.get(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("argument {i} ({what}) missing or invalid; see bench/driver/src/main.rs"))
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Who claims in the latency driver: SQL loops on their own connections, or jq's Rust client.
#[derive(Clone, Copy)]
enum Consumers {
    /// This many connections looping `jq.claim(…, wait => '1 second')` + `jq.complete_many`;
    /// a job's pickup ends when the claim returns it.
    Sql(usize),
    /// `workers` × `worker_client::Worker` (long-poll claims) with `concurrency` handlers each;
    /// a job's pickup ends when its handler starts (the handler's first statement).
    Client { workers: usize, concurrency: usize },
}

impl std::str::FromStr for Consumers {
    type Err = String;
    /// `N` (SQL loops) or `client:W:C` (W workers of C handlers).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("consumers: {s:?}: expected N or client:WORKERS:CONCURRENCY");
        match s.strip_prefix("client:") {
            None => s.parse().map(Consumers::Sql).map_err(|_| bad()),
            Some(rest) => {
                let (w, c) = rest.split_once(':').ok_or_else(bad)?;
                Ok(Consumers::Client { workers: w.parse().map_err(|_| bad())?, concurrency: c.parse().map_err(|_| bad())? })
            }
        }
    }
}

type Seen = Vec<(i64, Instant)>;

async fn latency(url: String, queue: String, rate: f64, secs: f64, consumers: Consumers, samples: Option<String>) -> Res<()> {
    let producers = ((rate / 200.0).ceil() as usize).clamp(1, 16);
    let warm = Duration::from_secs(1);
    let start = Instant::now() + Duration::from_millis(300);
    let end = start + Duration::from_secs_f64(secs);
    let stop = Arc::new(AtomicBool::new(false));
    let claimed_n = Arc::new(AtomicUsize::new(0));

    let mut cons: Vec<tokio::task::JoinHandle<Res<Seen>>> = Vec::new();
    let n_consumers = match consumers {
        Consumers::Sql(n) => n,
        Consumers::Client { workers, .. } => workers,
    };
    if let Consumers::Client { workers, concurrency } = consumers {
        let config = worker_client::config_from_env(Some(&url))?;
        for w in 0..workers {
            let seen = Arc::new(std::sync::Mutex::new(Seen::new()));
            let (seen_h, n_h) = (seen.clone(), claimed_n.clone());
            let worker = worker_client::Worker::builder(config.clone())
                .queue(queue.clone())
                .fallback(queue.clone(), move |job: worker_client::Job| {
                    // the handler's start: the first thing it does
                    seen_h.lock().unwrap().push((job.id, Instant::now()));
                    n_h.fetch_add(1, Ordering::Relaxed);
                    async move { Ok(None) }
                })
                .concurrency(concurrency)
                .worker_name(format!("lat{w}"))
                .build()?;
            let stop = stop.clone();
            cons.push(tokio::spawn(async move {
                worker
                    .run_until(async move {
                        while !stop.load(Ordering::Relaxed) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    })
                    .await?;
                let v = std::mem::take(&mut *seen.lock().unwrap());
                Res::Ok(v)
            }));
        }
    }
    for c in 0..(if let Consumers::Sql(n) = consumers { n } else { 0 }) {
        let client = connect(&url).await?;
        let (queue, stop, claimed_n) = (queue.clone(), stop.clone(), claimed_n.clone());
        cons.push(tokio::spawn(async move {
            let claim = client
                .prepare("SELECT id, lease_token FROM jq.claim($1, $2, 10, NULL, interval '1 second')")
                .await?;
            let complete = client.prepare("SELECT count(*) FROM jq.complete_many($1, $2)").await?;
            let name = format!("lat{c}");
            let mut seen = Seen::new();
            while !stop.load(Ordering::Relaxed) {
                let rows = client.query(&claim, &[&queue, &name]).await?;
                let t = Instant::now();
                let mut ids: Vec<i64> = Vec::with_capacity(rows.len());
                let mut toks: Vec<uuid::Uuid> = Vec::with_capacity(rows.len());
                for r in &rows {
                    let id: i64 = r.get(0);
                    seen.push((id, t));
                    ids.push(id);
                    toks.push(r.get(1));
                }
                if !ids.is_empty() {
                    claimed_n.fetch_add(ids.len(), Ordering::Relaxed);
                    client.query_one(&complete, &[&ids, &toks]).await?;
                }
            }
            Res::Ok(seen)
        }));
    }

    let mut prods = Vec::new();
    let interval = Duration::from_secs_f64(producers as f64 / rate);
    for p in 0..producers {
        let client = connect(&url).await?;
        let queue = queue.clone();
        prods.push(tokio::spawn(async move {
            let enq = client.prepare("SELECT jq.enqueue($1, '{\"n\":1}'::jsonb)").await?;
            let mut sent: Vec<(i64, Instant, bool, Instant)> = Vec::new();
            let mut due = start + interval.mul_f64(p as f64 / producers as f64);
            while due < end {
                tokio::time::sleep_until(due.into()).await;
                let at = Instant::now();
                let id: i64 = client.query_one(&enq, &[&queue]).await?.get(0);
                sent.push((id, Instant::now(), due >= start + warm, at));
                due += interval;
            }
            Res::Ok(sent)
        }));
    }
    let mut sent = Vec::new();
    for p in prods {
        sent.extend(p.await??);
    }
    // Let the consumers take the last jobs (at most 5 s), then stop them.
    let deadline = Instant::now() + Duration::from_secs(5);
    while claimed_n.load(Ordering::Relaxed) < sent.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut claimed = std::collections::HashMap::new();
    for c in cons {
        for (id, t) in c.await?? {
            if claimed.insert(id, t).is_some() {
                return Err(format!("job {id} claimed twice").into());
            }
        }
    }
    let mut lat: Vec<f64> = Vec::new();
    let mut lat_send: Vec<f64> = Vec::new();
    let mut lines = String::new();
    let mut missing = 0usize;
    let mut measured = 0usize;
    for (id, committed, counted, sent_at) in &sent {
        if !counted {
            continue;
        }
        measured += 1;
        match claimed.get(id) {
            // A claim can return before the producer has read its answer: that is 0 ms.
            Some(t) => {
                let (a, b) = (
                    t.saturating_duration_since(*committed).as_secs_f64() * 1000.0,
                    t.saturating_duration_since(*sent_at).as_secs_f64() * 1000.0,
                );
                lat.push(a);
                lat_send.push(b);
                lines.push_str(&format!("{a:.3},{b:.3}\n"));
            }
            None => {
                missing += 1;
                lines.push_str("missing\n");
            }
        }
    }
    if let Some(path) = samples {
        std::fs::write(path, lines)?;
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    lat_send.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let achieved = measured as f64 / (secs - warm.as_secs_f64());
    println!(
        "{{\"rate\":{rate},\"achieved\":{achieved:.1},\"producers\":{producers},\"consumers\":{n_consumers},\"handler_start\":{},\"n\":{measured},\"missing\":{missing},\"p50_ms\":{:.3},\"p95_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3},\"p99_from_send_ms\":{:.3}}}",
        matches!(consumers, Consumers::Client { .. }),
        pct(&lat, 50.0),
        pct(&lat, 95.0),
        pct(&lat, 99.0),
        lat.last().copied().unwrap_or(f64::NAN),
        pct(&lat_send, 99.0)
    );
    Ok(())
}

async fn completed(c: &Client, queue: &str) -> Res<i64> {
    Ok(c.query_one("SELECT count(*) FROM jq.jobs WHERE queue = $1 AND state = 'completed'", &[&queue])
        .await?
        .get(0))
}

async fn client_drain(
    url: String,
    queue: String,
    workers: usize,
    concurrency: usize,
    batch: usize,
    warmup: f64,
    secs: f64,
) -> Res<()> {
    let config = worker_client::config_from_env(Some(&url))?;
    let shutdown = Arc::new(tokio::sync::Notify::new());
    // Every job id a handler was given, and how many were given twice (a lock per job: a few
    // µs against the ~300 µs of a claim and a completion).
    let seen = Arc::new(std::sync::Mutex::new((std::collections::HashSet::<i64>::new(), 0usize)));
    let mon = connect(&url).await?;
    let c_start = completed(&mon, &queue).await?;
    let mut handles = Vec::new();
    for w in 0..workers {
        let seen = seen.clone();
        let worker = worker_client::Worker::builder(config.clone())
            .queue(queue.clone())
            .fallback(queue.clone(), move |job: worker_client::Job| {
                let seen = seen.clone();
                async move {
                    let mut g = seen.lock().unwrap_or_else(|e| e.into_inner());
                    if !g.0.insert(job.id) {
                        g.1 += 1;
                    }
                    Ok(None)
                }
            })
            .concurrency(concurrency)
            .claim_batch(batch)
            .worker_name(format!("bench{w}"))
            .build()?;
        let s = shutdown.clone();
        handles.push(tokio::spawn(async move { worker.run_until(async move { s.notified().await }).await }));
    }
    tokio::time::sleep(Duration::from_secs_f64(warmup)).await;
    let (t0, c0) = (Instant::now(), completed(&mon, &queue).await?);
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let (t1, c1) = (Instant::now(), completed(&mon, &queue).await?);
    shutdown.notify_waiters();
    let (mut claimed, mut done, mut failed, mut released, mut lost) = (0, 0, 0, 0, 0);
    for h in handles {
        let st = h.await??;
        claimed += st.claimed;
        done += st.completed;
        failed += st.failed;
        released += st.released;
        lost += st.lost;
    }
    // A job handed to two handlers shows in `seen` (a count of jobs claimed more than once,
    // jq.jobs.claims > 1, would also count jobs released at shutdown and claimed again by a
    // worker still running: a hand-back, not a duplicate; it is reported as `reclaimed`).
    // Jobs still running after the workers' graceful shutdown were claimed and never
    // completed or released. The database's completed count over the whole run must be what
    // the workers report completing: a completion the workers counted but the database did not
    // record (or the reverse) is a lost job.
    // Seen failing: a handler that records each id twice gives handled_twice = handled and
    // ok false.
    let (reclaimed, stranded, c_end): (i64, i64, i64) = {
        let row = mon
            .query_one(
                "SELECT count(*) FILTER (WHERE claims > 1), count(*) FILTER (WHERE state = 'running'), \
                        count(*) FILTER (WHERE state = 'completed') \
                 FROM jq.jobs WHERE queue = $1",
                &[&queue],
            )
            .await?;
        (row.get(0), row.get(1), row.get(2))
    };
    let (handled, twice) = {
        let g = seen.lock().unwrap_or_else(|e| e.into_inner());
        (g.0.len() as u64, g.1)
    };
    let db_done = c_end - c_start;
    let ok = claimed == done + released
        && failed == 0
        && lost == 0
        && twice == 0
        && stranded == 0
        && db_done == done as i64
        && handled >= done;
    let rate = (c1 - c0) as f64 / (t1 - t0).as_secs_f64();
    println!(
        "{{\"jobs_per_s\":{rate:.0},\"workers\":{workers},\"concurrency\":{concurrency},\"batch\":{batch},\"claimed\":{claimed},\"completed\":{done},\"db_completed\":{db_done},\"handled\":{handled},\"released\":{released},\"failed\":{failed},\"lost\":{lost},\"handled_twice\":{twice},\"reclaimed\":{reclaimed},\"stranded\":{stranded},\"ok\":{ok}}}"
    );
    if !ok {
        return Err("client drain: lost, failed, stranded or twice-handled jobs, or completions the database did not record".into());
    }
    Ok(())
}

/// One claim call that returned jobs: when (seconds since the start) and how long (ms).
type ClaimSample = (f64, f64);

/// One 10-s window of the soak, sampled at its end.
struct Window {
    t: f64,
    completed: usize,
    ready: i64,
    jobs_heap: i64,
    jobs_index: i64,
    executions: i64,
    jobs_dead: i64,
    executions_dead: i64,
    autovacuums: i64,
    /// The producers were still sending when the window ended: a steady-load window. The
    /// window in which they stopped holds only the tail of the drain (in one run 178 jobs
    /// against ~11,100 in a steady window), so its p99 is the near-maximum of a few claims made
    /// as the queue empties; it stays in the CSV but not in the latency figures.
    producing: bool,
}

/// Consumers of the soak: claim up to 10, complete them, record the claim's duration.
fn soak_consumers(
    url: &str,
    queue: &str,
    consumers: usize,
    stop: &Arc<AtomicBool>,
    done: &Arc<AtomicUsize>,
    t0: Instant,
) -> Vec<tokio::task::JoinHandle<Res<Vec<ClaimSample>>>> {
    (0..consumers)
        .map(|c| {
            let (url, queue, stop, done) = (url.to_string(), queue.to_string(), stop.clone(), done.clone());
            tokio::spawn(async move {
                let client = connect(&url).await?;
                let claim = client.prepare("SELECT id, lease_token FROM jq.claim($1, $2, 10)").await?;
                let complete = client.prepare("SELECT count(*) FROM jq.complete_many($1, $2)").await?;
                let name = format!("soak{c}");
                let mut samples = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let rows = client.query(&claim, &[&queue, &name]).await?;
                    if rows.is_empty() {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        continue;
                    }
                    samples.push(((t - t0).as_secs_f64(), t.elapsed().as_secs_f64() * 1000.0));
                    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
                    let toks: Vec<uuid::Uuid> = rows.iter().map(|r| r.get(1)).collect();
                    let n: i64 = client.query_one(&complete, &[&ids, &toks]).await?.get(0);
                    done.fetch_add(n as usize, Ordering::Relaxed);
                }
                Res::Ok(samples)
            })
        })
        .collect()
}

/// Jobs per `jq.enqueue_many` call of the soak's producers. One job per `jq.enqueue` call
/// makes the producers the bottleneck: the calibrated "peak" is then what 8 single-row
/// producers can send (measured at about a sixth of jq's batch-10 drain rate), so the soak
/// would run far below jq's capacity with a few jobs ready. Batched producers leave the
/// consumers as the bottleneck, as the target's "80% of peak" means.
const SOAK_CHUNK: usize = 10;

/// Producers of the soak: `total` jobs over `producers` connections, SOAK_CHUNK per call, at
/// `rate` jobs/s in all (open loop), or as fast as they go when `rate` is infinite; stop early
/// when `stop` is set.
fn soak_producers(
    url: &str,
    queue: &str,
    producers: usize,
    rate: f64,
    total: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Res<usize>>> {
    let start = Instant::now() + Duration::from_millis(200);
    (0..producers)
        .map(|p| {
            let (url, queue, stop) = (url.to_string(), queue.to_string(), stop.clone());
            let mine = total / producers + usize::from(p < total % producers);
            tokio::spawn(async move {
                let client = connect(&url).await?;
                let enq = client
                    .prepare(
                        "SELECT count(*) FROM jq.enqueue_many($1, \
                         (SELECT jsonb_agg('{\"n\":1}'::jsonb) FROM generate_series(1, $2::int)))",
                    )
                    .await?;
                let interval =
                    Duration::from_secs_f64(if rate.is_finite() { (producers * SOAK_CHUNK) as f64 / rate } else { 0.0 });
                let mut due = start + interval.mul_f64(p as f64 / producers as f64);
                let mut sent = 0;
                while sent < mine && !stop.load(Ordering::Relaxed) {
                    if rate.is_finite() {
                        tokio::time::sleep_until(due.into()).await;
                        due += interval;
                    }
                    let k = SOAK_CHUNK.min(mine - sent) as i32;
                    client.query_one(&enq, &[&queue, &k]).await?;
                    sent += k as usize;
                }
                Res::Ok(sent)
            })
        })
        .collect()
}

async fn soak(url: String, queue: String, rate: f64, jobs: usize, consumers: usize, out: String) -> Res<()> {
    let mon = connect(&url).await?;
    let t0 = Instant::now();
    let mut rate = rate;
    let mut peak = f64::NAN;
    if rate <= 0.0 {
        // Calibration: producers in a closed loop for 10 s; peak = completions per second.
        let (pstop, cstop, done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let cons = soak_consumers(&url, &queue, consumers, &cstop, &done, t0);
        let prods = soak_producers(&url, &queue, 8, f64::INFINITY, usize::MAX / 2, &pstop);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (a, d0) = (Instant::now(), done.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_secs(10)).await;
        peak = (done.load(Ordering::Relaxed) - d0) as f64 / a.elapsed().as_secs_f64();
        pstop.store(true, Ordering::Relaxed);
        for p in prods {
            p.await??;
        }
        // The consumers drain what the producers left before the soak starts.
        while mon
            .query_one("SELECT count(*) FROM jq.jobs WHERE queue = $1 AND state IN ('ready', 'running')", &[&queue])
            .await?
            .get::<_, i64>(0)
            > 0
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        cstop.store(true, Ordering::Relaxed);
        for c in cons {
            c.await??;
        }
        rate = 0.8 * peak;
    }
    // At least the calibration's 8 producers, and at most 200 calls/s each up to 64 producers:
    // a call takes 2-4 ms under this load on 2 vCPUs, so 400 calls/s per producer leaves them
    // behind the arrival rate while the queue stays empty (measured: 0 to 24 ready jobs in
    // every window, 0.93x "keep-up").
    let producers = ((rate / (200.0 * SOAK_CHUNK as f64)).ceil() as usize).clamp(8, 64);
    let (stop, done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let start = Instant::now();
    let cons = soak_consumers(&url, &queue, consumers, &stop, &done, start);
    let prods = soak_producers(&url, &queue, producers, rate, jobs, &Arc::new(AtomicBool::new(false)));
    // Sampler: one row per 10-s window until every job is completed.
    let sizes = mon
        .prepare(
            "SELECT (SELECT count(*) FROM jq.jobs WHERE queue = $1 AND state = 'ready'),
                    pg_table_size('jq.jobs'), pg_indexes_size('jq.jobs'), pg_total_relation_size('jq.execution_log'),
                    (SELECT n_dead_tup FROM pg_stat_all_tables WHERE relid = 'jq.jobs'::regclass),
                    (SELECT n_dead_tup FROM pg_stat_all_tables WHERE relid = 'jq.execution_log'::regclass),
                    (SELECT sum(autovacuum_count)::bigint FROM pg_stat_all_tables
                     WHERE relid IN ('jq.jobs'::regclass, 'jq.execution_log'::regclass))",
        )
        .await?;
    let mut windows: Vec<Window> = Vec::new();
    let mut last = 0usize;
    let mut next = start + Duration::from_secs(10);
    // When the last job completed (polled every 100 ms), and when the producers had sent all.
    let mut finished: Option<f64> = None;
    let mut sent_by: Option<f64> = None;
    loop {
        while Instant::now() < next {
            tokio::time::sleep(Duration::from_millis(100).min(next - Instant::now())).await;
            if sent_by.is_none() && prods.iter().all(|h| h.is_finished()) {
                sent_by = Some(start.elapsed().as_secs_f64());
            }
            if finished.is_none() && done.load(Ordering::Relaxed) >= jobs {
                finished = Some(start.elapsed().as_secs_f64());
            }
        }
        next += Duration::from_secs(10);
        let d = done.load(Ordering::Relaxed);
        let r = mon.query_one(&sizes, &[&queue]).await?;
        windows.push(Window {
            t: start.elapsed().as_secs_f64(),
            completed: d - last,
            ready: r.get(0),
            jobs_heap: r.get(1),
            jobs_index: r.get(2),
            executions: r.get(3),
            jobs_dead: r.get::<_, Option<i64>>(4).unwrap_or(0),
            executions_dead: r.get::<_, Option<i64>>(5).unwrap_or(0),
            autovacuums: r.get::<_, Option<i64>>(6).unwrap_or(0),
            producing: !prods.iter().all(|h| h.is_finished()),
        });
        last = d;
        if d >= jobs {
            // Completed after the last poll of the window (or the sampler overran it).
            finished.get_or_insert(start.elapsed().as_secs_f64());
            break;
        }
        if start.elapsed() > Duration::from_secs_f64(jobs as f64 / rate * 3.0 + 120.0) {
            stop.store(true, Ordering::Relaxed);
            return Err(format!("soak: only {d} of {jobs} jobs completed in time").into());
        }
    }
    let mut sent = 0;
    for p in prods {
        sent += p.await??;
    }
    stop.store(true, Ordering::Relaxed);
    let mut samples: Vec<ClaimSample> = Vec::new();
    for c in cons {
        samples.extend(c.await??);
    }
    let elapsed = finished.unwrap_or_else(|| start.elapsed().as_secs_f64());
    let sent_secs = sent_by.unwrap_or(elapsed);
    // Per-window claim percentiles.
    let mut csv = String::from("t_s,completed,claim_p50_ms,claim_p99_ms,ready,jobs_heap_bytes,jobs_index_bytes,executions_bytes,jobs_dead,executions_dead,autovacuums,producing\n");
    let mut p99s = Vec::new();
    let mut prev_t = 0.0;
    for w in &windows {
        let mut lat: Vec<f64> = samples.iter().filter(|s| s.0 >= prev_t && s.0 < w.t).map(|s| s.1).collect();
        lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let (p50, p99) = (pct(&lat, 50.0), pct(&lat, 99.0));
        if !lat.is_empty() && w.producing {
            p99s.push(p99);
        }
        csv += &format!(
            "{:.0},{},{p50:.3},{p99:.3},{},{},{},{},{},{},{},{}\n",
            w.t, w.completed, w.ready, w.jobs_heap, w.jobs_index, w.executions, w.jobs_dead, w.executions_dead, w.autovacuums,
            u8::from(w.producing)
        );
        prev_t = w.t;
    }
    std::fs::write(&out, csv)?;
    let total: Vec<f64> = windows.iter().map(|w| (w.jobs_heap + w.jobs_index) as f64).collect();
    // The steady state: the median size over the second half of the windows in which the
    // producers were sending (not every window after the first minute: that median rises with
    // a table growing in a straight line, so the largest size would stay under 2x of it however
    // long the growth went on). A table still growing in the second
    // half shows in `late_growth`: the last producing window's size over that median.
    let producing: Vec<&Window> = windows.iter().filter(|w| w.producing).collect();
    let second_half = &producing[producing.len() / 2..];
    let mut steady: Vec<f64> = second_half.iter().map(|w| (w.jobs_heap + w.jobs_index) as f64).collect();
    let last_producing = producing.last().map(|w| (w.jobs_heap + w.jobs_index) as f64).unwrap_or(f64::NAN);
    steady.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let steady_size = pct(&steady, 50.0);
    let max_size = total.iter().cloned().fold(0.0, f64::max);
    let first_p99 = p99s.first().copied().unwrap_or(f64::NAN);
    let max_p99 = p99s.iter().cloned().fold(0.0, f64::max);
    let last_p99 = p99s.last().copied().unwrap_or(f64::NAN);
    // Whole minutes of the run while the producers were sending: the claim p99 of each, from
    // the same samples.
    let producing_until = windows.iter().filter(|w| w.producing).map(|w| w.t).fold(0.0, f64::max);
    let minute_p99s: Vec<f64> = (0..(producing_until / 60.0).floor() as usize)
        .filter_map(|k| {
            let (a, b) = (60.0 * k as f64, 60.0 * (k + 1) as f64);
            let mut lat: Vec<f64> = samples.iter().filter(|s| s.0 >= a && s.0 < b).map(|s| s.1).collect();
            lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
            (!lat.is_empty()).then(|| pct(&lat, 99.0))
        })
        .collect();
    let first_min_p99 = minute_p99s.first().copied().unwrap_or(f64::NAN);
    let max_min_p99 = minute_p99s.iter().cloned().fold(0.0, f64::max);
    let minutes = minute_p99s.iter().map(|p| format!("{p:.3}")).collect::<Vec<_>>().join(",");
    let autovacuums = windows.last().map(|w| w.autovacuums - windows[0].autovacuums).unwrap_or(0);
    println!(
        "{{\"peak\":{peak:.0},\"rate\":{rate:.0},\"jobs\":{jobs},\"sent\":{sent},\"achieved\":{:.0},\"arrived\":{:.0},\"producers\":{producers},\"secs\":{elapsed:.0},\"windows\":{},\"steady_bytes\":{steady_size:.0},\"max_bytes\":{max_size:.0},\"size_ratio\":{:.2},\"late_growth\":{:.2},\"chunk\":{SOAK_CHUNK},\"first_p99_ms\":{first_p99:.3},\"max_p99_ms\":{max_p99:.3},\"last_p99_ms\":{last_p99:.3},\"p99_spike\":{:.2},\"minute_p99_ms\":[{minutes}],\"p99_drift\":{:.2},\"autovacuums\":{autovacuums}}}",
        jobs as f64 / elapsed,
        sent as f64 / sent_secs,
        windows.len(),
        max_size / steady_size,
        last_producing / steady_size,
        max_p99 / first_p99,
        max_min_p99 / first_min_p99
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Res<()> {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(String::as_str) {
        Some("latency") => {
            let consumers: Consumers = a.get(6).ok_or("argument 6 (consumers) missing")?.parse()?;
            latency(a[2].clone(), a[3].clone(), arg(&a, 4, "rate"), arg(&a, 5, "secs"), consumers, a.get(7).cloned()).await
        }
        Some("client") => {
            client_drain(
                a[2].clone(),
                a[3].clone(),
                arg(&a, 4, "workers"),
                arg(&a, 5, "concurrency"),
                arg(&a, 6, "batch"),
                arg(&a, 7, "warmup secs"),
                arg(&a, 8, "secs"),
            )
            .await
        }
        Some("soak") => {
            soak(a[2].clone(), a[3].clone(), arg(&a, 4, "rate"), arg(&a, 5, "jobs"), arg(&a, 6, "consumers"), a[7].clone()).await
        }
        _ => Err("usage: jq-bench latency URL QUEUE RATE SECS CONSUMERS|client:WORKERS:CONCURRENCY [SAMPLES_CSV] | client URL QUEUE WORKERS CONCURRENCY BATCH WARMUP SECS | soak URL QUEUE RATE JOBS CONSUMERS OUTCSV".into()),
    }
}
