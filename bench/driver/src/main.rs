//! Drivers of jq's benchmark suite, called by `bench/run`; each prints one JSON line.
//!
//! ```text
//! jq-bench latency URL QUEUE RATE SECS CONSUMERS [SAMPLES_CSV]
//! jq-bench await URL QUEUE JOBS AWAITERS WORKERS   (src/awaiting.rs: jq.await's latency)
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
//!     Runs WORKERS `worker_client::Worker`s (each: a claim, a report and a heartbeat connection) with
//!     a no-op handler on a prefilled queue; jobs/s = completed jobs counted in the database
//!     over SECS after WARMUP_SECS. Then shuts the workers down and checks that every claimed
//!     job was completed or released, none failed or lost, no job's handler ran twice (the
//!     handler records each job id it is given), the jobs the database counts as completed
//!     during the run are the ones the workers report completing, and none is left running.
//!     A job released at shutdown may be claimed again by another worker still running: that
//!     is a hand-back, not a duplicate (counted as `reclaimed`, not judged).
//! jq-bench saturate URL QUEUE DEPTH CONSUMERS SECS [PRODUCERS]   (src/saturate.rs: many long-polling consumers)
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
//! jq-bench pressure URL QUEUE SCHEDULE CONSUMERS OUTCSV [SYSTEM]   (src/pressure.rs; bench/pressure/run.py)
//!     Open-loop producers (10 jobs per enqueue call) at the rate of each SCHEDULE segment
//!     (`SECS:RATE,…`, back to back) while CONSUMERS connections loop a claim of up to 10 jobs
//!     and its completion. SYSTEM (src/system.rs): `jq` (default; `jq.enqueue_many`, the latency
//!     driver's long-poll claim + `jq.complete_many`), `pgmq` (`pgmq.send_batch`;
//!     `pgmq.read_with_poll(queue, 30, 10, max_poll_seconds => 1, poll_interval_ms => 10)` +
//!     `pgmq.delete(queue, ids)`), `floor` (bench/pgbench/floor.sql: `INSERT … SELECT`; the
//!     claim UPDATE with `FOR UPDATE SKIP LOCKED LIMIT 10`, then the fenced complete UPDATE; no
//!     long-poll: 10 ms pause after an empty claim). OUTCSV: one line per job, `t_s,pickup_ms`
//!     (t_s: seconds since the driver started, at the claim), or `t_s,missing` (t_s at the
//!     enqueue) for a job not claimed within 10 s of the schedule's end. Last stdout line:
//!     `{"enqueued":N,"completed":M,"missing":K}`.
//! ```

mod args;
mod awaiting;
mod client;
mod latency;
mod pressure;
mod saturate;
mod soak;
mod system;

use tokio_postgres::{Client, NoTls};

use args::{arg, Consumers};
use awaiting::await_latency;
use client::client_drain;
use latency::latency;
use pressure::pressure;
use soak::soak;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

async fn connect(url: &str) -> Res<Client> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// A connection to `url` with the statement that enqueues `$2` jobs `{"n":1}` into queue `$1` in
/// one `jq.enqueue_many` call, prepared (the producers of `soak` and `saturate`).
async fn enqueue_many_producer(url: &str) -> Res<(Client, tokio_postgres::Statement)> {
    let client = connect(url).await?;
    let enq = client
        .prepare(
            "SELECT count(*) FROM jq.enqueue_many($1, \
             (SELECT jsonb_agg('{\"n\":1}'::jsonb) FROM generate_series(1, $2::int)))",
        )
        .await?;
    Ok((client, enq))
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
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
        Some("await") => {
            await_latency(a[2].clone(), a[3].clone(), arg(&a, 4, "jobs"), arg(&a, 5, "awaiters"), arg(&a, 6, "workers")).await
        }
        Some("saturate") => {
            saturate::saturate(a[2].clone(), a[3].clone(), arg(&a, 4, "depth"), arg(&a, 5, "consumers"), arg(&a, 6, "secs"),
                                 a.get(7).map_or(saturate::PRODUCERS, |_| arg(&a, 7, "producers"))).await
        }
        Some("soak") => {
            soak(a[2].clone(), a[3].clone(), arg(&a, 4, "rate"), arg(&a, 5, "jobs"), arg(&a, 6, "consumers"), a[7].clone()).await
        }
        Some("pressure") => {
            let system = a.get(7).map_or(Ok(system::System::Jq), |s| s.parse())?;
            pressure(a[2].clone(), a[3].clone(), a[4].clone(), arg(&a, 5, "consumers"), a[6].clone(), system).await
        }
        _ => Err("usage: jq-bench latency URL QUEUE RATE SECS CONSUMERS|client:WORKERS:CONCURRENCY [SAMPLES_CSV] | client URL QUEUE WORKERS CONCURRENCY BATCH WARMUP SECS | soak URL QUEUE RATE JOBS CONSUMERS OUTCSV | await URL QUEUE JOBS AWAITERS WORKERS | pressure URL QUEUE SCHEDULE CONSUMERS OUTCSV [jq|pgmq|floor]".into()),
    }
}
