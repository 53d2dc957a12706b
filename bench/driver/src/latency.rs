//! `jq-bench latency`: pickup latency at a fixed arrival rate.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{connect, pct, Res};
use super::args::Consumers;
use super::system::{Claimer, System};

/// The jobs one consumer was given: id and when the claim returned it.
pub(crate) type Seen = Vec<(i64, Instant)>;

/// One SQL consumer on its own connection: loops `system`'s claim of up to 10 jobs (jq:
/// `jq.claim(queue, name, n => 10, wait => '1 second')`, returns as soon as a job is claimable;
/// the others: src/system.rs) + its completion until `stop`, pausing `system.idle()` after an
/// empty claim; records each job's id with the instant its claim returned, adds the jobs claimed
/// to `claimed_n` and, when given, the jobs the completion reports completed to `completed_n`.
pub(crate) async fn sql_consumer(
    url: &str,
    system: System,
    queue: &str,
    name: String,
    stop: &Arc<AtomicBool>,
    claimed_n: &Arc<AtomicUsize>,
    completed_n: Option<Arc<AtomicUsize>>,
) -> Res<tokio::task::JoinHandle<Res<Seen>>> {
    let client = connect(url).await?;
    let claimer = Claimer::prepare(&client, system, queue, name).await?;
    let (stop, claimed_n) = (stop.clone(), claimed_n.clone());
    Ok(tokio::spawn(async move {
        let mut seen = Seen::new();
        while !stop.load(Ordering::Relaxed) {
            let rows = claimer.claim(&client).await?;
            let t = Instant::now();
            seen.extend(rows.iter().map(|r| (r.get::<_, i64>(0), t)));
            if rows.is_empty() {
                if let Some(pause) = system.idle() {
                    tokio::time::sleep(pause).await;
                }
                continue;
            }
            claimed_n.fetch_add(rows.len(), Ordering::Relaxed);
            let n = claimer.complete(&client, &rows).await?;
            if let Some(done) = &completed_n {
                done.fetch_add(n as usize, Ordering::Relaxed);
            }
        }
        Res::Ok(seen)
    }))
}

/// Waits until the consumers have claimed `expected` jobs or `deadline` passes, stops them and
/// joins them: each job's claim instant by id. A job claimed twice is an error (no lease
/// expires within these drivers' runs, so a second claim would be a broken fence).
pub(crate) async fn collect_claims(
    cons: Vec<tokio::task::JoinHandle<Res<Seen>>>,
    stop: &Arc<AtomicBool>,
    claimed_n: &Arc<AtomicUsize>,
    expected: usize,
    deadline: Instant,
) -> Res<HashMap<i64, Instant>> {
    while claimed_n.load(Ordering::Relaxed) < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut claimed = HashMap::new();
    for c in cons {
        for (id, t) in c.await?? {
            if claimed.insert(id, t).is_some() {
                return Err(format!("job {id} claimed twice").into());
            }
        }
    }
    Ok(claimed)
}

pub(crate) async fn latency(url: String, queue: String, rate: f64, secs: f64, consumers: Consumers, samples: Option<String>) -> Res<()> {
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
        cons.push(sql_consumer(&url, System::Jq, &queue, format!("lat{c}"), &stop, &claimed_n, None).await?);
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
    let claimed = collect_claims(cons, &stop, &claimed_n, sent.len(), Instant::now() + Duration::from_secs(5)).await?;
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
