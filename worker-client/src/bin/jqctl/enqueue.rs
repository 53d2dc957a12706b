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
            println!("{id}");
            Ok(())
        }
        _ => {
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
