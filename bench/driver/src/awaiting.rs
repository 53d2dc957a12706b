//! `jq-bench await URL QUEUE JOBS AWAITERS WORKERS`: how soon `jq.await` returns once a job is
//! done. AWAITERS tasks each loop: enqueue one job (committed), then `jq.await(id, 30 s)` on
//! their own connection; WORKERS tasks claim (long-poll) and complete at once. Per job it prints
//! nothing; at the end, percentiles of enqueue-to-result (the caller's whole wait: pickup, the
//! no-op handler, the completion and the wakeup) and of complete-to-result (the wakeup alone:
//! from the worker's `jq.complete` returning to the awaiter's `jq.await` returning; negative
//! when the awaiter returns before the worker has read its own reply).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{connect, pct, Res};

pub(crate) async fn await_latency(url: String, queue: String, jobs: usize, awaiters: usize, workers: usize) -> Res<()> {
    let done: Arc<Mutex<HashMap<i64, Instant>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut ws = Vec::new();
    for w in 0..workers {
        let (client, done, stop, queue) = (connect(&url).await?, done.clone(), stop.clone(), queue.clone());
        ws.push(tokio::spawn(async move {
            let claim = client.prepare("SELECT id, lease_token FROM jq.claim($1, $2, 1, NULL, interval '200 ms')").await?;
            let complete = client.prepare("SELECT jq.complete($1, $2)").await?;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for r in client.query(&claim, &[&queue, &format!("aw{w}")]).await? {
                    let (id, token): (i64, uuid::Uuid) = (r.get(0), r.get(1));
                    client.query_one(&complete, &[&id, &token]).await?;
                    done.lock().unwrap().insert(id, Instant::now());
                }
            }
            Res::Ok(())
        }));
    }
    let per = jobs.div_ceil(awaiters);
    let mut aw = Vec::new();
    for _ in 0..awaiters {
        let (client, queue) = (connect(&url).await?, queue.clone());
        aw.push(tokio::spawn(async move {
            let enqueue = client.prepare("SELECT jq.enqueue($1, '{}')").await?;
            let wait = client.prepare("SELECT state::text FROM jq.await($1, interval '30 s')").await?;
            let mut seen = Vec::with_capacity(per);
            for _ in 0..per {
                let t0 = Instant::now();
                let id: i64 = client.query_one(&enqueue, &[&queue]).await?.get(0);
                let state: String = client.query_one(&wait, &[&id]).await?.get(0);
                if state != "completed" {
                    return Err(format!("job {id}: jq.await returned {state}").into());
                }
                seen.push((id, t0, Instant::now()));
            }
            Res::Ok(seen)
        }));
    }
    let mut seen = Vec::new();
    for a in aw {
        seen.extend(a.await??);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in ws {
        w.await??;
    }
    let done = done.lock().unwrap();
    let mut total: Vec<f64> = seen.iter().map(|(_, t0, t1)| (*t1 - *t0).as_secs_f64() * 1e3).collect();
    let mut wake: Vec<f64> = seen
        .iter()
        .filter_map(|(id, _, t1)| done.get(id).map(|d| if *t1 >= *d { (*t1 - *d).as_secs_f64() } else { -(*d - *t1).as_secs_f64() } * 1e3))
        .collect();
    total.sort_by(f64::total_cmp);
    wake.sort_by(f64::total_cmp);
    println!("jobs {} awaiters {awaiters} workers {workers}", seen.len());
    println!("enqueue_to_result_ms p50 {:.2} p99 {:.2} max {:.2}", pct(&total, 50.0), pct(&total, 99.0), pct(&total, 100.0));
    println!("complete_to_result_ms p50 {:.2} p99 {:.2} max {:.2}", pct(&wake, 50.0), pct(&wake, 99.0), pct(&wake, 100.0));
    Ok(())
}
