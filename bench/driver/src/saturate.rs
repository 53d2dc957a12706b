//! `jq-bench saturate`: many long-polling consumers at saturation.
//!
//! PRODUCERS connections (default 4) keep about DEPTH jobs ready (`jq.enqueue_many`,
//! SATURATE_CHUNK jobs per call, as fast as they go while the ready depth is under DEPTH) while CONSUMERS connections loop
//! `jq.claim(queue, …, n => 10, wait => '1 second')` + `jq.complete_many`. Over SECS seconds
//! after a warm-up it measures, from the database: completed jobs/s (the completed rows of
//! the queue at both ends of the window), the average ready depth (sampled every 50 ms), and
//! the wakeups of waiting claims per job completed (`jq._wakeups()`, NULL without
//! `shared_preload_libraries = 'jq'`); from the driver: enqueued jobs/s (calls returned), and
//! the claim calls per job and the share of claim calls that returned nothing (each long-poll
//! call returns empty only when its wait of 1 s ran out, so empty calls mean idle consumers);
//! with `track_functions = pl`, the batch claim statements run (jq._claim_batch: each look at
//! the queue of an n = 10 claim) and the long-poll sleeps (jq._claim_sleep) per job completed.
//! Prints one JSON line.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::types::Type;
use tokio_postgres::Client;

use super::{connect, Res};

/// Jobs per `jq.enqueue_many` call: a batch of 10 makes 10 jobs claimable in one commit, the
/// shape of the producers (one call per 10 jobs).
const SATURATE_CHUNK: i32 = 10;
/// Producer connections by default (the optional PRODUCERS argument).
pub(crate) const PRODUCERS: usize = 4;
/// Warm-up before the window: the consumers are connected and the depth reached.
const WARMUP: Duration = Duration::from_secs(3);
/// How often the ready depth is read.
const SAMPLE: Duration = Duration::from_millis(50);

/// Counters shared by the driver's tasks.
#[derive(Default)]
struct Counters {
    enqueued: AtomicU64,
    claim_calls: AtomicU64,
    empty_claims: AtomicU64,
    claimed: AtomicU64,
}

async fn ready_depth(c: &Client, queue: &str) -> Res<i64> {
    // jobs_claim_idx's key and predicate: an index-only count.
    Ok(c.query_typed_one(
        "SELECT count(*) FROM jq.jobs WHERE hashtextextended(queue, 0) = hashtextextended($1, 0) \
         AND queue = $1 AND state = 'ready'",
        &[(&queue, Type::TEXT)],
    )
    .await?
    .get(0))
}

async fn completed(c: &Client, queue: &str) -> Res<i64> {
    Ok(c.query_typed_one("SELECT count(*) FROM jq.jobs WHERE queue = $1 AND state = 'completed'", &[(&queue, Type::TEXT)])
        .await?
        .get(0))
}

async fn wakeups(c: &Client) -> Res<Option<i64>> {
    Ok(c.query_one("SELECT jq._wakeups()", &[]).await?.get(0))
}

/// Calls of jq._claim_batch (the batch claim statements: looks at the queue) and of
/// jq._claim_sleep (sleeps of long-polls that found nothing) since the statistics were reset;
/// None unless `track_functions` is `pl` or `all` (then the server counts them).
async fn looks_and_sleeps(c: &Client) -> Res<Option<(i64, i64)>> {
    let row = c
        .query_one(
            "SELECT coalesce(sum(calls) FILTER (WHERE funcname = '_claim_batch'), 0)::bigint, \
                    coalesce(sum(calls) FILTER (WHERE funcname = '_claim_sleep'), 0)::bigint, \
                    current_setting('track_functions') <> 'none' \
             FROM pg_stat_user_functions WHERE schemaname = 'jq'",
            &[],
        )
        .await?;
    Ok(row.get::<_, bool>(2).then(|| (row.get(0), row.get(1))))
}

/// The producers: enqueue SATURATE_CHUNK jobs whenever the depth estimate is under `depth`.
/// The estimate is the last sampled depth plus what was enqueued since, minus what was claimed.
fn producers(url: &str, queue: &str, count: usize, depth: i64, est: &Arc<AtomicI64>, stop: &Arc<AtomicBool>, n: &Arc<Counters>) -> Vec<tokio::task::JoinHandle<Res<()>>> {
    (0..count)
        .map(|_| {
            let (url, queue, est, stop, n) = (url.to_string(), queue.to_string(), est.clone(), stop.clone(), n.clone());
            tokio::spawn(async move {
                let (client, enq) = crate::enqueue_many_producer(&url).await?;
                while !stop.load(Ordering::Relaxed) {
                    if est.load(Ordering::Relaxed) >= depth {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    }
                    est.fetch_add(SATURATE_CHUNK as i64, Ordering::Relaxed);
                    client.query_one(&enq, &[&queue, &SATURATE_CHUNK]).await?;
                    n.enqueued.fetch_add(SATURATE_CHUNK as u64, Ordering::Relaxed);
                }
                Res::Ok(())
            })
        })
        .collect()
}

/// The consumers: long-poll claim of up to 10 (wait 1 s), then complete them all.
fn consumers(url: &str, queue: &str, count: usize, est: &Arc<AtomicI64>, stop: &Arc<AtomicBool>, n: &Arc<Counters>) -> Vec<tokio::task::JoinHandle<Res<()>>> {
    (0..count)
        .map(|c| {
            let (url, queue, est, stop, n) = (url.to_string(), queue.to_string(), est.clone(), stop.clone(), n.clone());
            tokio::spawn(async move {
                let client = connect(&url).await?;
                let claim = client
                    .prepare("SELECT id, lease_token FROM jq.claim($1, $2, 10, NULL, interval '1 second')")
                    .await?;
                let complete = client.prepare("SELECT count(*) FROM jq.complete_many($1, $2)").await?;
                let name = format!("sat{c}");
                while !stop.load(Ordering::Relaxed) {
                    let rows = client.query(&claim, &[&queue, &name]).await?;
                    n.claim_calls.fetch_add(1, Ordering::Relaxed);
                    if rows.is_empty() {
                        n.empty_claims.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    est.fetch_sub(rows.len() as i64, Ordering::Relaxed);
                    n.claimed.fetch_add(rows.len() as u64, Ordering::Relaxed);
                    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
                    let toks: Vec<uuid::Uuid> = rows.iter().map(|r| r.get(1)).collect();
                    client.query_one(&complete, &[&ids, &toks]).await?;
                }
                Res::Ok(())
            })
        })
        .collect()
}

/// The driver's counters at one instant.
struct Snap {
    at: Instant,
    completed: i64,
    wakeups: Option<i64>,
    looks: Option<(i64, i64)>,
    enqueued: u64,
    claim_calls: u64,
    empty_claims: u64,
}

async fn snap(mon: &Client, queue: &str, n: &Counters) -> Res<Snap> {
    Ok(Snap {
        at: Instant::now(),
        completed: completed(mon, queue).await?,
        wakeups: wakeups(mon).await?,
        looks: looks_and_sleeps(mon).await?,
        enqueued: n.enqueued.load(Ordering::Relaxed),
        claim_calls: n.claim_calls.load(Ordering::Relaxed),
        empty_claims: n.empty_claims.load(Ordering::Relaxed),
    })
}

pub(crate) async fn saturate(url: String, queue: String, depth: i64, count: usize, secs: f64, producer_count: usize) -> Res<()> {
    let mon = connect(&url).await?;
    let n = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let est = Arc::new(AtomicI64::new(ready_depth(&mon, &queue).await?));
    let mut tasks = consumers(&url, &queue, count, &est, &stop, &n);
    tasks.extend(producers(&url, &queue, producer_count, depth, &est, &stop, &n));

    let sample_until = |until: Instant| {
        let (mon, queue, est) = (&mon, &queue, &est);
        async move {
            let (mut sum, mut k) = (0i64, 0i64);
            while Instant::now() < until {
                tokio::time::sleep(SAMPLE).await;
                let d = ready_depth(mon, queue).await?;
                est.store(d, Ordering::Relaxed);
                sum += d;
                k += 1;
            }
            Res::Ok(sum as f64 / k.max(1) as f64)
        }
    };
    sample_until(Instant::now() + WARMUP).await?;
    let a = snap(&mon, &queue, &n).await?;
    let depth_avg = sample_until(a.at + Duration::from_secs_f64(secs)).await?;
    let b = snap(&mon, &queue, &n).await?;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }

    let t = (b.at - a.at).as_secs_f64();
    let done = (b.completed - a.completed) as f64;
    let calls = (b.claim_calls - a.claim_calls) as f64;
    let per_job = |x: f64| if done > 0.0 { format!("{:.3}", x / done) } else { "null".into() };
    let wakeups_per_job = match (a.wakeups, b.wakeups) {
        (Some(x), Some(y)) => per_job((y - x) as f64),
        _ => "null".into(),
    };
    let (looks_per_job, sleeps_per_job) = match (a.looks, b.looks) {
        (Some(x), Some(y)) => (per_job((y.0 - x.0) as f64), per_job((y.1 - x.1) as f64)),
        _ => ("null".into(), "null".into()),
    };
    println!(
        "{{\"consumers\":{count},\"producers\":{producer_count},\"depth\":{depth},\"secs\":{t:.2},\"completed_per_s\":{:.1},\"enqueued_per_s\":{:.1},\
         \"ready_avg\":{depth_avg:.1},\"claims_per_job\":{},\"empty_claim_share\":{:.3},\"wakeups_per_job\":{wakeups_per_job},\
         \"batch_looks_per_job\":{looks_per_job},\"sleeps_per_job\":{sleeps_per_job}}}",
        done / t,
        (b.enqueued - a.enqueued) as f64 / t,
        per_job(calls),
        if calls > 0.0 { (b.empty_claims - a.empty_claims) as f64 / calls } else { 0.0 },
    );
    Ok(())
}
