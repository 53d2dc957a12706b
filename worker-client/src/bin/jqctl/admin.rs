//! Operator commands: listings (queries in listings.rs), retry/cancel, pause/resume, queues,
//! schedules and kinds.

use std::io::{IsTerminal, Write};

use clap::{Args, ValueEnum};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

use crate::table::{self, Format};
use crate::{connect, listings, Cli, CliError, CliResult, JobState};

/// Named arguments of a `jq.*` call, only those the user gave, so jq's own defaults apply
/// to the rest.
///
/// Like every statement of jqctl's commands (docs/worker-client.md, "Through a pooler"), the
/// call is sent unnamed with `query_typed`: one round trip, nothing kept on the server, so it
/// works through a transaction-mode pooler; each value is sent as the type its cast starts
/// from.
#[derive(Default)]
struct NamedArgs {
    parts: Vec<String>,
    values: Vec<(Box<dyn ToSql + Sync + Send>, Type)>,
}

/// The type a parameter with `cast` (`int4`, `bool`, `text`, `text::interval`, …) is sent as.
fn sent_as(cast: &str) -> Type {
    match cast.split("::").next() {
        Some("int4") => Type::INT4,
        Some("bool") => Type::BOOL,
        _ => Type::TEXT,
    }
}

impl NamedArgs {
    /// `name => $n::cast`.
    fn add<T: ToSql + Sync + Send + 'static>(&mut self, name: &str, value: T, cast: &str) {
        self.values.push((Box::new(value), sent_as(cast)));
        self.parts.push(format!("{name} => ${}::{cast}", self.values.len()));
    }

    fn opt<T: ToSql + Sync + Send + 'static>(&mut self, name: &str, value: Option<T>, cast: &str) {
        if let Some(v) = value {
            self.add(name, v, cast);
        }
    }

    fn sql(&self, func: &str) -> String {
        format!("SELECT {func}({})::text", self.parts.join(", "))
    }

    fn params(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        self.values.iter().map(|(v, t)| (&**v as &(dyn ToSql + Sync), t.clone())).collect()
    }
}

/// `jqctl queues`.
pub async fn queues(cli: &Cli, fmt: Format) -> CliResult {
    let client = connect(cli).await?;
    listings::queues().print(&client, fmt).await
}

/// `jqctl stats [--watch]`: with --watch, the listing again every interval (a table under a
/// title line, the screen cleared first on a terminal; JSON lines without either).
pub async fn stats(cli: &Cli, watch: Option<f64>, fmt: Format) -> CliResult {
    let client = connect(cli).await?;
    let listing = listings::stats();
    let Some(every) = watch else {
        return listing.print(&client, fmt).await;
    };
    let every = std::time::Duration::try_from_secs_f64(every.max(0.1)).map_err(|_| "invalid --watch interval")?;
    let tty = std::io::stdout().is_terminal();
    loop {
        let body = listing.render(&client, fmt).await?;
        let mut text = String::new();
        if !fmt.json {
            let now: String =
                client.query_typed_one("SELECT to_char(clock_timestamp(), 'YYYY-MM-DD HH24:MI:SS')", &[]).await?.get(0);
            if tty {
                text.push_str("\x1b[2J\x1b[H");
            }
            text.push_str(&format!("jq.queue_stats at {now} (every {}s; Ctrl-C to stop)\n", every.as_secs_f64()));
        }
        text.push_str(&body);
        let mut out = std::io::stdout().lock();
        if write!(out, "{text}").and_then(|_| out.flush()).is_err() {
            return Ok(()); // stdout closed
        }
        drop(out);
        tokio::time::sleep(every).await;
    }
}

async fn queue_exists(client: &Client, queue: &str) -> Result<bool, CliError> {
    Ok(client.query_typed_opt("SELECT 1 FROM jq.queues WHERE name = $1", &[(&queue, Type::TEXT)]).await?.is_some())
}

fn no_queue(queue: &str) -> CliError {
    worker_client::Error::QueueNotFound(queue.to_string()).into()
}

/// `jqctl jobs`: the newest jobs of a queue.
pub async fn jobs(cli: &Cli, queue: &str, state: Option<JobState>, limit: i64, fmt: Format) -> CliResult {
    let client = connect(cli).await?;
    if !queue_exists(&client, queue).await? {
        return Err(no_queue(queue));
    }
    listings::jobs(queue, state.map(|s| s.as_str()), limit).print(&client, fmt).await
}

/// `jqctl show ID`: the job's row as `field: value` lines (progress pretty-printed), then its
/// executions, oldest first; with --json one line: the job's object with `executions`, an
/// array of objects. Reads jq.jobs and jq.executions (jq_admin).
pub async fn show(cli: &Cli, id: i64, fmt: Format) -> CliResult {
    let client = connect(cli).await?;
    let missing = || CliError(format!("job {id} does not exist (or was pruned)"));
    if fmt.json {
        let executions = listings::executions(id).json_objects(&client, &[]).await?;
        let extra = [("executions", format!("[{}]", executions.join(",")))];
        let line = listings::job(id).json_objects(&client, &extra).await?.pop().ok_or_else(missing)?;
        table::out(&format!("{line}\n"));
        return Ok(());
    }
    // Every field of the job; without --wide, each line cut to fit.
    let job = listings::job(id).text_rows(&client, Format { json: false, wide: true }).await?;
    let row = job.rows.first().ok_or_else(missing)?;
    let budget = if fmt.wide { None } else { Some(table::WIDTH) };
    let executions = listings::executions(id).text_rows(&client, fmt).await?;
    table::out(&format!("{}executions:\n{}", table::fields(&job.header, row, budget), executions.render(budget)));
    Ok(())
}

pub async fn retry(cli: &Cli, id: i64) -> CliResult {
    let client = connect(cli).await?;
    let ok: bool = client.query_typed_one("SELECT jq.retry($1)", &[(&id, Type::INT8)]).await?.get(0);
    if ok {
        println!("job {id} is ready again");
        Ok(())
    } else {
        Err(CliError(format!("job {id} was not retried: it is not dead or cancelled, or does not exist")))
    }
}

pub async fn cancel(cli: &Cli, id: i64) -> CliResult {
    let client = connect(cli).await?;
    let ok: bool = client.query_typed_one("SELECT jq.cancel($1)", &[(&id, Type::INT8)]).await?.get(0);
    if !ok {
        return Err(CliError(format!("job {id} was not cancelled: it is already finished, or does not exist")));
    }
    let state: Option<String> =
        client.query_typed_opt("SELECT state::text FROM jq.jobs WHERE id = $1", &[(&id, Type::INT8)]).await?.map(|r| r.get(0));
    match state.as_deref() {
        Some("running") => println!("job {id}: cancel requested; its worker stops it at its next heartbeat"),
        _ => println!("job {id} cancelled"),
    }
    Ok(())
}

pub async fn expire_lease(cli: &Cli, id: i64, lease_token: Option<uuid::Uuid>) -> CliResult {
    let client = connect(cli).await?;
    let ok: bool = client.query_one("SELECT jq.expire_lease($1, $2)", &[&id, &lease_token]).await?.get(0);
    if !ok {
        return Err(CliError(format!(
            "job {id} was not taken back: it is not running{}, or does not exist",
            if lease_token.is_some() { " under that lease" } else { "" }
        )));
    }
    let state: Option<String> =
        client.query_opt("SELECT state::text FROM jq.jobs WHERE id = $1", &[&id]).await?.map(|r| r.get(0));
    println!("job {id} taken back: now {}", state.as_deref().unwrap_or("gone"));
    Ok(())
}

pub async fn pause_resume(cli: &Cli, queue: &str, pause: bool) -> CliResult {
    let client = connect(cli).await?;
    let sql = if pause { "SELECT jq.pause($1)" } else { "SELECT jq.resume($1)" };
    client.query_typed_one(sql, &[(&queue, Type::TEXT)]).await?;
    println!("queue {queue} {}", if pause { "paused" } else { "resumed" });
    Ok(())
}

/// Retry policy, as in jq.backoff_policy.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum Backoff {
    Fixed,
    Linear,
    Exponential,
}

/// Jitter mode, as in jq.jitter_mode.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum Jitter {
    None,
    Full,
}

/// The queue options `create-queue` and `alter-queue` share (NULL = jq's default / unchanged).
#[derive(Args, Debug)]
pub struct QueueOptions {
    /// Attempts before a failing job goes dead (each job keeps the value it was enqueued with).
    #[arg(long)]
    pub max_attempts: Option<i32>,
    /// Default lease of a claim (PostgreSQL interval: 30s, 5min, '2 minutes').
    #[arg(long)]
    pub lease: Option<String>,
    /// Retry delay policy.
    #[arg(long, value_enum)]
    pub backoff: Option<Backoff>,
    /// Base retry delay (interval).
    #[arg(long)]
    pub backoff_base: Option<String>,
    /// Cap of the retry delay (interval).
    #[arg(long)]
    pub backoff_max: Option<String>,
    /// Jitter of the retry delay.
    #[arg(long, value_enum)]
    pub jitter: Option<Jitter>,
    /// Most jobs running at once across all workers (alter-queue: 0 removes the cap).
    #[arg(long)]
    pub max_concurrency: Option<i32>,
    /// Lease expiries before a job goes dead.
    #[arg(long)]
    pub max_lease_expiries: Option<i32>,
    /// The longest lease a claim or heartbeat may take; longer requests get this (interval;
    /// alter-queue: 0 removes it).
    #[arg(long)]
    pub max_lease: Option<String>,
    /// How long completed and cancelled jobs are kept (interval).
    #[arg(long)]
    pub retention: Option<String>,
    /// How long dead jobs are kept (interval).
    #[arg(long)]
    pub dead_retention: Option<String>,
    /// How long the history of executions that did not complete their job is kept (interval;
    /// a completed execution is kept with its job, by --retention).
    #[arg(long)]
    pub history_retention: Option<String>,
}

impl QueueOptions {
    /// Adds the options that were given as named arguments of jq.create_queue / jq.alter_queue.
    fn add_to(&self, args: &mut NamedArgs) {
        args.opt("max_attempts", self.max_attempts, "int4");
        args.opt("lease", self.lease.clone(), "text::interval");
        args.opt("backoff", self.backoff.map(|b| format!("{b:?}").to_lowercase()), "text::jq.backoff_policy");
        args.opt("backoff_base", self.backoff_base.clone(), "text::interval");
        args.opt("backoff_max", self.backoff_max.clone(), "text::interval");
        args.opt("jitter", self.jitter.map(|j| format!("{j:?}").to_lowercase()), "text::jq.jitter_mode");
        args.opt("max_concurrency", self.max_concurrency, "int4");
        args.opt("max_lease_expiries", self.max_lease_expiries, "int4");
        args.opt("max_lease", self.max_lease.clone(), "text::interval");
        args.opt("retention", self.retention.clone(), "text::interval");
        args.opt("dead_retention", self.dead_retention.clone(), "text::interval");
        args.opt("history_retention", self.history_retention.clone(), "text::interval");
    }
}

#[derive(Args, Debug)]
pub struct CreateQueueArgs {
    /// Queue name (1-128 of A-Z a-z 0-9 _ . : -).
    pub name: String,
    #[command(flatten)]
    pub options: QueueOptions,
    /// Create it paused.
    #[arg(long)]
    pub paused: bool,
    /// Succeed, changing nothing, when the queue exists.
    #[arg(long)]
    pub if_not_exists: bool,
}

pub async fn create_queue(cli: &Cli, a: &CreateQueueArgs) -> CliResult {
    let client = connect(cli).await?;
    let mut args = NamedArgs::default();
    args.add("name", a.name.clone(), "text");
    a.options.add_to(&mut args);
    if a.paused {
        args.add("paused", true, "bool");
    }
    if a.if_not_exists {
        args.add("if_not_exists", true, "bool");
    }
    client.query_typed_one(&args.sql("jq.create_queue"), &args.params()).await?;
    println!("queue {} ready", a.name);
    Ok(())
}

#[derive(Args, Debug)]
pub struct AlterQueueArgs {
    /// Queue name.
    pub name: String,
    #[command(flatten)]
    pub options: QueueOptions,
    /// Jobs per concurrency_key running at once (docs/flow-control.md).
    #[arg(long)]
    pub key_concurrency: Option<i32>,
    /// Jobs claimed per --rate-period at most, across all workers (0 removes the limit).
    #[arg(long)]
    pub rate_limit: Option<i32>,
    /// Window of the rate limit (interval, default 1 second).
    #[arg(long)]
    pub rate_period: Option<String>,
    /// Token bucket size of the rate limit.
    #[arg(long)]
    pub burst: Option<i32>,
    /// Raise a waiting job's priority by 1 per this interval (opt-in priority aging; 0 turns it off).
    #[arg(long)]
    pub priority_aging: Option<String>,
}

pub async fn alter_queue(cli: &Cli, a: &AlterQueueArgs) -> CliResult {
    let client = connect(cli).await?;
    let mut args = NamedArgs::default();
    args.add("name", a.name.clone(), "text");
    a.options.add_to(&mut args);
    args.opt("key_concurrency", a.key_concurrency, "int4");
    args.opt("rate_limit", a.rate_limit, "int4");
    args.opt("rate_period", a.rate_period.clone(), "text::interval");
    args.opt("burst", a.burst, "int4");
    args.opt("priority_aging", a.priority_aging.clone(), "text::interval");
    client.query_typed_one(&args.sql("jq.alter_queue"), &args.params()).await?;
    println!("queue {} altered", a.name);
    Ok(())
}

#[derive(Args, Debug)]
pub struct ScheduleArgs {
    /// Schedule name (replaces an existing schedule of that name).
    pub name: String,
    /// Cron expression, e.g. '*/5 * * * *'.
    pub cron: String,
    /// Queue the fired jobs go to.
    pub queue: String,
    /// Payload of each fired job (JSON; default {}).
    #[arg(long)]
    pub payload: Option<String>,
    /// Kind of each fired job (default: the schedule name).
    #[arg(long)]
    pub kind: Option<String>,
    /// Time zone the cron expression is read in (default UTC).
    #[arg(long)]
    pub timezone: Option<String>,
    /// Priority of each fired job.
    #[arg(long)]
    pub priority: Option<i32>,
    /// Attempt limit of each fired job (default: the queue's).
    #[arg(long)]
    pub max_attempts: Option<i32>,
    /// What to do about fire times missed while nothing ran (jq's misfire policy).
    #[arg(long)]
    pub misfire: Option<String>,
    /// What to do when the previous fired job is still unfinished (jq's overlap policy).
    #[arg(long)]
    pub overlap: Option<String>,
}

async fn require_cron(client: &Client, what: &str) -> CliResult {
    let exists: bool = client
        .query_typed_one(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc WHERE pronamespace = 'jq'::regnamespace AND proname = $1::text)",
            &[(&what, Type::TEXT)],
        )
        .await?
        .get(0);
    if exists {
        Ok(())
    } else {
        Err(CliError(format!(
            "this jq has no cron schedules (function jq.{what} does not exist); install a jq version with cron support"
        )))
    }
}

pub async fn schedule(cli: &Cli, a: &ScheduleArgs) -> CliResult {
    let client = connect(cli).await?;
    require_cron(&client, "schedule").await?;
    if let Some(p) = &a.payload {
        serde_json::from_str::<serde_json::Value>(p).map_err(|e| format!("--payload is not JSON: {e}"))?;
    }
    let mut args = NamedArgs::default();
    args.add("name", a.name.clone(), "text");
    args.add("cron", a.cron.clone(), "text");
    args.add("queue", a.queue.clone(), "text");
    args.opt("payload", a.payload.clone(), "text::jsonb");
    args.opt("kind", a.kind.clone(), "text");
    args.opt("timezone", a.timezone.clone(), "text");
    args.opt("priority", a.priority, "int4");
    args.opt("max_attempts", a.max_attempts, "int4");
    args.opt("misfire", a.misfire.clone(), "text");
    args.opt("overlap", a.overlap.clone(), "text");
    client.query_typed_one(&args.sql("jq.schedule"), &args.params()).await?;
    println!("schedule {} set: {:?} into queue {}", a.name, a.cron, a.queue);
    Ok(())
}

pub async fn unschedule(cli: &Cli, name: &str) -> CliResult {
    let client = connect(cli).await?;
    require_cron(&client, "unschedule").await?;
    let r: Option<String> = client.query_typed_one("SELECT jq.unschedule($1)::text", &[(&name, Type::TEXT)]).await?.get(0);
    match r.as_deref() {
        Some("false") => Err(CliError(format!("schedule {name} does not exist"))),
        _ => {
            println!("schedule {name} removed");
            Ok(())
        }
    }
}

/// `jqctl schedules`.
pub async fn schedules(cli: &Cli, fmt: Format) -> CliResult {
    let client = connect(cli).await?;
    let exists: bool = client.query_typed_one("SELECT to_regclass('jq.schedules') IS NOT NULL", &[]).await?.get(0);
    if !exists {
        return Err(CliError(
            "this jq has no cron schedules (table jq.schedules does not exist); install a jq version with cron support"
                .into(),
        ));
    }
    listings::schedules().print(&client, fmt).await
}

/// `jqctl kinds`: the kinds' policies (jq.kind_policies).
pub async fn kinds(cli: &Cli, fmt: Format) -> CliResult {
    let client = connect(cli).await?;
    listings::kinds().print(&client, fmt).await
}

#[derive(Args, Debug)]
pub struct AlterKindArgs {
    /// Queue name.
    pub queue: String,
    /// Kind name (1-200 characters).
    pub kind: String,
    /// Attempts of jobs enqueued afterwards.
    #[arg(long)]
    pub max_attempts: Option<i32>,
    /// Retry delay policy: fixed, linear or exponential.
    #[arg(long)]
    pub backoff: Option<String>,
    /// Base retry delay (interval, e.g. '10 seconds').
    #[arg(long)]
    pub backoff_base: Option<String>,
    /// Longest retry delay (interval).
    #[arg(long)]
    pub backoff_max: Option<String>,
    /// Jitter: none or full.
    #[arg(long)]
    pub jitter: Option<String>,
    /// Wall timeout of each attempt of jobs enqueued afterwards (interval), enforced by the database.
    #[arg(long)]
    pub timeout: Option<String>,
    /// Exhaustion hook: a SECURITY DEFINER function taking jq.jobs, e.g. 'app.scan_failed(jq.jobs)'.
    #[arg(long)]
    pub on_dead: Option<String>,
    /// Set an option back to the queue's (repeatable): max_attempts, backoff, backoff_base,
    /// backoff_max, jitter, timeout, on_dead.
    #[arg(long = "reset", value_name = "OPTION")]
    pub reset: Vec<String>,
}

/// `jqctl alter-kind`: jq.alter_kind.
pub async fn alter_kind(cli: &Cli, a: &AlterKindArgs) -> CliResult {
    let client = connect(cli).await?;
    let mut args = NamedArgs::default();
    args.add("queue", a.queue.clone(), "text");
    args.add("kind", a.kind.clone(), "text");
    args.opt("max_attempts", a.max_attempts, "int4");
    args.opt("backoff", a.backoff.clone(), "text::jq.backoff_policy");
    args.opt("backoff_base", a.backoff_base.clone(), "text::interval");
    args.opt("backoff_max", a.backoff_max.clone(), "text::interval");
    args.opt("jitter", a.jitter.clone(), "text::jq.jitter_mode");
    args.opt("timeout", a.timeout.clone(), "text::interval");
    args.opt("on_dead", a.on_dead.clone(), "text::regprocedure");
    if !a.reset.is_empty() {
        args.add("reset", format!("{{{}}}", a.reset.join(",")), "text::text[]");
    }
    client.query_typed_one(&args.sql("jq.alter_kind"), &args.params()).await?;
    println!("kind {} of queue {} altered", a.kind, a.queue);
    Ok(())
}
