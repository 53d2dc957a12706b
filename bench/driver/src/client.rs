//! `jq-bench client`: the worker client's drain of a prefilled queue, and its checks.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

use super::{connect, Res};

async fn completed(c: &Client, queue: &str) -> Res<i64> {
    // Unnamed (query_typed): the URL may be a transaction-mode pooler's.
    Ok(c.query_typed_one(
        "SELECT count(*) FROM jq.jobs WHERE queue = $1 AND state = 'completed'",
        &[(&queue, tokio_postgres::types::Type::TEXT)],
    )
        .await?
        .get(0))
}

pub(crate) async fn client_drain(
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
            .query_typed_one(
                "SELECT count(*) FILTER (WHERE claims > 1), count(*) FILTER (WHERE state = 'running'), \
                        count(*) FILTER (WHERE state = 'completed') \
                 FROM jq.jobs WHERE queue = $1",
                &[(&queue, tokio_postgres::types::Type::TEXT)],
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
