//! `jqctl enqueue`: one job from the command line, or one job per line of stdin in batches.

use std::io::{BufRead, IsTerminal};

use clap::Args;
use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};

use crate::{connect, Cli, CliError, CliResult};

#[derive(Args, Debug)]
pub struct EnqueueArgs {
    /// Queue name.
    pub queue: String,
    /// The job's payload as JSON; absent or `-`: read one payload per line from stdin (blank
    /// lines are skipped).
    pub payload: Option<String>,
    /// Job kind (default: the queue name).
    #[arg(long)]
    pub kind: Option<String>,
    /// Priority (higher is claimed first).
    #[arg(long)]
    pub priority: Option<i32>,
    /// Delay before the job is due (PostgreSQL interval: 30s, 5min, '2 hours').
    #[arg(long)]
    pub delay: Option<String>,
    /// Attempt limit (default: the queue's).
    #[arg(long)]
    pub max_attempts: Option<i32>,
    /// Idempotency key (single job only).
    #[arg(long, conflicts_with = "specs")]
    pub key: Option<String>,
    /// Concurrency key (single job only): jobs of the queue sharing it run at most the queue's
    /// key_concurrency at a time, in enqueue order (docs/flow-control.md).
    #[arg(long, conflicts_with = "specs")]
    pub concurrency_key: Option<String>,
    /// Each stdin line is a job spec object ({"payload":…, "kind":…, "priority":…,
    /// "delay":…, "run_at":…, "max_attempts":…, "idempotency_key":…}) instead of a payload.
    #[arg(long)]
    pub specs: bool,
    /// Single job: wait up to TIMEOUT (30s, 5m, 2h; default 1h) for it to finish (jq.await) and
    /// print its result JSON on stdout. Exit status 0: completed; 2: dead (its last error on
    /// stderr); 3: cancelled; 4: not finished when TIMEOUT ran out; 1: any other error.
    #[arg(long, value_name = "TIMEOUT", num_args = 0..=1, default_missing_value = "1h", conflicts_with = "specs")]
    pub wait: Option<String>,
    /// Jobs per jq.enqueue_many call when reading stdin.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100000))]
    pub batch: u32,
}

pub async fn run(cli: &Cli, a: &EnqueueArgs) -> CliResult {
    let client = connect(cli).await?;
    if client.query_typed_opt("SELECT 1 FROM jq.queue_stats WHERE queue = $1", &[(&a.queue, Type::TEXT)]).await?.is_none() {
        return Err(worker_client::Error::QueueNotFound(a.queue.clone()).into());
    }
    match a.payload.as_deref() {
        Some(p) if p != "-" => {
            if a.specs {
                return Err("--specs applies to stdin input only".into());
            }
            let payload: Value = serde_json::from_str(p).map_err(|e| format!("the payload is not JSON: {e}"))?;
            let id: i64 = client
                .query_typed_one(
                    "SELECT jq.enqueue($1::text, $2::jsonb, kind => $3::text, delay => $4::text::interval, \
                     priority => $5::int4, max_attempts => $6::int4, idempotency_key => $7::text, \
                     concurrency_key => $8::text)",
                    &[
                        (&a.queue, Type::TEXT),
                        (&payload, Type::JSONB),
                        (&a.kind, Type::TEXT),
                        (&a.delay, Type::TEXT),
                        (&a.priority, Type::INT4),
                        (&a.max_attempts, Type::INT4),
                        (&a.key, Type::TEXT),
                        (&a.concurrency_key, Type::TEXT),
                    ],
                )
                .await?
                .get(0);
            match &a.wait {
                None => {
                    println!("{id}");
                    Ok(())
                }
                Some(t) => await_outcome(&client, id, worker_client::parse_duration(t)?).await,
            }
        }
        _ => {
            if a.wait.is_some() {
                return Err("--wait applies to a single job (give PAYLOAD)".into());
            }
            if a.key.is_some() {
                return Err("--key applies to a single job; give keys per line with --specs".into());
            }
            if a.concurrency_key.is_some() {
                return Err("--concurrency-key applies to a single job".into());
            }
            from_stdin(&client, a).await
        }
    }
}

/// `--wait`: awaits job `id` for up to `timeout` (jq.await, at most an hour per call), prints
/// its result, and sets jqctl's exit status from its state (see [`EnqueueArgs::wait`]).
async fn await_outcome(client: &tokio_postgres::Client, id: i64, timeout: std::time::Duration) -> CliResult {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now()).min(std::time::Duration::from_secs(3600));
        let row = client
            .query_typed_one(
                "SELECT state::text, result, last_error FROM jq.await($1::int8, $2::float8 * interval '1 second')",
                &[(&id, Type::INT8), (&left.as_secs_f64(), Type::FLOAT8)],
            )
            .await?;
        let (state, result, error): (String, Option<Value>, Option<String>) = (row.get(0), row.get(1), row.get(2));
        let status = match state.as_str() {
            "completed" => {
                println!("{}", result.unwrap_or(Value::Null));
                0
            }
            "dead" => {
                eprintln!("jqctl: job {id} is dead: {}", error.unwrap_or_default().replace('\n', " "));
                2
            }
            "cancelled" => {
                eprintln!("jqctl: job {id} was cancelled");
                3
            }
            other if left.is_zero() || std::time::Instant::now() >= deadline => {
                eprintln!("jqctl: job {id} is still {other} after the wait");
                4
            }
            _ => continue,
        };
        crate::EXIT_STATUS.store(status, std::sync::atomic::Ordering::Relaxed);
        return Ok(());
    }
}

async fn from_stdin(client: &tokio_postgres::Client, a: &EnqueueArgs) -> CliResult {
    let bar = if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {pos} jobs enqueued into {msg} ({per_sec}, {elapsed})")
                .expect("valid template"),
        );
        b.set_message(a.queue.clone());
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        Some(b)
    } else {
        None
    };
    let sql = "SELECT count(*) FROM jq.enqueue_many($1::text, $2::jsonb, kind => $3::text, \
               delay => $4::text::interval, priority => $5::int4, max_attempts => $6::int4, specs => $7::bool)";
    let mut total: u64 = 0;
    let mut batch: Vec<Value> = Vec::with_capacity(a.batch as usize);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<(usize, Value), String>>(4096);
    // Read stdin on a blocking thread; parse there too.
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for (i, line) in stdin.lock().lines().enumerate() {
            let item = match line {
                Ok(l) if l.trim().is_empty() => continue,
                Ok(l) => serde_json::from_str::<Value>(&l).map(|v| (i + 1, v)).map_err(|e| format!("line {}: not JSON: {e}", i + 1)),
                Err(e) => Err(format!("reading stdin: {e}")),
            };
            let stop = item.is_err();
            if tx.blocking_send(item).is_err() || stop {
                return;
            }
        }
    });
    let send = |batch: Vec<Value>| async move {
        let arr = Value::Array(batch);
        let params: [(&(dyn ToSql + Sync), Type); 7] = [
            (&a.queue, Type::TEXT),
            (&arr, Type::JSONB),
            (&a.kind, Type::TEXT),
            (&a.delay, Type::TEXT),
            (&a.priority, Type::INT4),
            (&a.max_attempts, Type::INT4),
            (&a.specs, Type::BOOL),
        ];
        let n: i64 = client.query_typed_one(sql, &params).await?.get(0);
        Ok::<u64, CliError>(n as u64)
    };
    let result: CliResult = async {
        while let Some(item) = rx.recv().await {
            let (_, v) = item?;
            batch.push(v);
            if batch.len() >= a.batch as usize {
                total += send(std::mem::take(&mut batch)).await?;
                if let Some(b) = &bar {
                    b.set_position(total);
                }
            }
        }
        if !batch.is_empty() {
            total += send(std::mem::take(&mut batch)).await?;
        }
        Ok(())
    }
    .await;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    match result {
        Ok(()) => {
            eprintln!("enqueued {total} jobs into {}", a.queue);
            Ok(())
        }
        Err(CliError(msg)) => Err(CliError(format!("{msg} ({total} jobs were enqueued before it)"))),
    }
}
