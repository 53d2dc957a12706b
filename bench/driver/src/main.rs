//! Drivers of jq's benchmark suite, called by `bench/run`; each prints one JSON line.
//!
//! ```text
//! jq-bench latency URL QUEUE RATE SECS CONSUMERS
//!     Enqueues at a fixed arrival rate (jobs/s, open loop, spread over several producer
//!     connections) for SECS seconds, the first second being warm-up, while CONSUMERS
//!     connections loop `jq.claim(queue, …, n => 10, wait => '1 second')` (returns as soon as
//!     at least one job is claimable) + `jq.complete_many`. Reports
//!     p50/p95/p99/max of the time from the enqueue's commit (its autocommit statement
//!     returned to the producer) to the claim returning that job to a consumer, both taken
//!     with one monotonic clock in this process.
//! jq-bench client URL QUEUE WORKERS CONCURRENCY BATCH WARMUP_SECS SECS
//!     Runs WORKERS `worker_client::Worker`s (each: one claim and one report connection) with
//!     a no-op handler on a prefilled queue; jobs/s = completed jobs counted in the database
//!     over SECS after WARMUP_SECS. Then shuts the workers down and checks that every claimed
//!     job was completed or released, none failed or lost, and no job completed twice.
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

async fn latency(url: String, queue: String, rate: f64, secs: f64, consumers: usize) -> Res<()> {
    let producers = ((rate / 200.0).ceil() as usize).clamp(1, 16);
    let warm = Duration::from_secs(1);
    let start = Instant::now() + Duration::from_millis(300);
    let end = start + Duration::from_secs_f64(secs);
    let stop = Arc::new(AtomicBool::new(false));
    let claimed_n = Arc::new(AtomicUsize::new(0));

    let mut cons = Vec::new();
    for c in 0..consumers {
        let client = connect(&url).await?;
        let (queue, stop, claimed_n) = (queue.clone(), stop.clone(), claimed_n.clone());
        cons.push(tokio::spawn(async move {
            let claim = client
                .prepare("SELECT id, lease_token FROM jq.claim($1, $2, 10, NULL, interval '1 second')")
                .await?;
            let complete = client.prepare("SELECT count(*) FROM jq.complete_many($1, $2)").await?;
            let name = format!("lat{c}");
            let mut seen: Vec<(i64, Instant)> = Vec::new();
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
            let mut sent: Vec<(i64, Instant, bool)> = Vec::new();
            let mut due = start + interval.mul_f64(p as f64 / producers as f64);
            while due < end {
                tokio::time::sleep_until(due.into()).await;
                let id: i64 = client.query_one(&enq, &[&queue]).await?.get(0);
                sent.push((id, Instant::now(), due >= start + warm));
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
    let mut missing = 0usize;
    let mut measured = 0usize;
    for (id, committed, counted) in &sent {
        if !counted {
            continue;
        }
        measured += 1;
        match claimed.get(id) {
            // A claim can return before the producer has read its answer: that is 0 ms.
            Some(t) => lat.push(t.saturating_duration_since(*committed).as_secs_f64() * 1000.0),
            None => missing += 1,
        }
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let achieved = measured as f64 / (secs - warm.as_secs_f64());
    println!(
        "{{\"rate\":{rate},\"achieved\":{achieved:.1},\"producers\":{producers},\"consumers\":{consumers},\"n\":{measured},\"missing\":{missing},\"p50_ms\":{:.3},\"p95_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3}}}",
        pct(&lat, 50.0),
        pct(&lat, 95.0),
        pct(&lat, 99.0),
        lat.last().copied().unwrap_or(f64::NAN)
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
    let mut handles = Vec::new();
    for w in 0..workers {
        let worker = worker_client::Worker::builder(config.clone())
            .queue(queue.clone())
            .fallback(queue.clone(), |_job: worker_client::Job| async move { Ok(None) })
            .concurrency(concurrency)
            .claim_batch(batch)
            .worker_name(format!("bench{w}"))
            .build()?;
        let s = shutdown.clone();
        handles.push(tokio::spawn(async move { worker.run_until(async move { s.notified().await }).await }));
    }
    let mon = connect(&url).await?;
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
    let dup: i64 = mon
        .query_one(
            "SELECT count(*) FROM (SELECT job_id FROM jq.executions WHERE outcome = 'completed' \
             GROUP BY job_id HAVING count(*) > 1) d",
            &[],
        )
        .await?
        .get(0);
    let ok = claimed == done + released && failed == 0 && lost == 0 && dup == 0;
    let rate = (c1 - c0) as f64 / (t1 - t0).as_secs_f64();
    println!(
        "{{\"jobs_per_s\":{rate:.0},\"workers\":{workers},\"concurrency\":{concurrency},\"batch\":{batch},\"claimed\":{claimed},\"completed\":{done},\"released\":{released},\"failed\":{failed},\"lost\":{lost},\"duplicates\":{dup},\"ok\":{ok}}}"
    );
    if !ok {
        return Err("client drain: lost, failed or duplicated jobs".into());
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Res<()> {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(String::as_str) {
        Some("latency") => {
            latency(a[2].clone(), a[3].clone(), arg(&a, 4, "rate"), arg(&a, 5, "secs"), arg(&a, 6, "consumers")).await
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
        _ => Err("usage: jq-bench latency URL QUEUE RATE SECS CONSUMERS | client URL QUEUE WORKERS CONCURRENCY BATCH WARMUP SECS".into()),
    }
}
