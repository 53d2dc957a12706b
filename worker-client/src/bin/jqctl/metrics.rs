//! `jqctl metrics`: jq's per-queue gauges, table health and background-worker status in the
//! Prometheus text exposition format, served on `--listen ADDR` at `/metrics` (or printed once
//! with `--once`). Every scrape reads `jq.queue_stats`, `jq.table_health` and
//! `jq.history_tables()` (when the role may: they are jq_admin's), `jq.status()` and `jq.fleet`
//! afresh, so a dropped queue's series disappear. Alert rules: docs/observability.md.

use crate::{connect, Cli, CliError, CliResult};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(clap::Args, Debug)]
pub struct MetricsArgs {
    /// Address to serve /metrics on, e.g. 127.0.0.1:9187.
    #[arg(long, value_name = "ADDR", required_unless_present = "once")]
    pub listen: Option<String>,
    /// Print the metrics once to stdout and exit.
    #[arg(long)]
    pub once: bool,
    /// Seconds each query of a scrape may run (statement_timeout of the scrape's transaction,
    /// unless the role's own is stricter; 0: no limit of jqctl's; at most 2147483, PostgreSQL's
    /// largest). A scrape stuck behind a lock (a
    /// migration holding a jq table) then fails, with HTTP 503, instead of holding the one
    /// connection every later scrape waits for.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=2_147_483))]
    pub scrape_timeout: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabel {
    table: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DatabaseLabel {
    database: String,
}

type FGauge = Gauge<f64, AtomicU64>;

fn family<L>(reg: &mut Registry, name: &str, help: &str) -> Family<L, FGauge>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    let f = Family::<L, FGauge>::default();
    reg.register(name, help, f.clone());
    f
}

/// One scrape (the exposition text), in one transaction whose statements may run `timeout_s`
/// seconds each (0: no limit of its own; crate::timeout). A failed query rolls it back (the
/// transaction's drop).
async fn scrape(client: &mut tokio_postgres::Client, timeout_s: u32) -> Result<String, CliError> {
    let tx = client.transaction().await?;
    let limit = crate::timeout::limit_statements(timeout_s, true);
    if !limit.is_empty() {
        tx.batch_execute(&limit).await?;
    }
    let mut reg = Registry::default();
    queues(&tx, &mut reg).await?;
    tables(&tx, &mut reg).await?;
    maintenance_workers(&tx, &mut reg).await?;
    fleet(&tx, &mut reg).await?;
    // Last: jq.history_tables()' locks on the history tables last until the commit below.
    history(&tx, &mut reg).await?;
    tx.commit().await?;
    let mut out = String::new();
    encode(&mut out, &reg).map_err(|e| CliError(format!("cannot encode the metrics: {e}")))?;
    Ok(out)
}

/// The per-queue gauges (jq.queue_stats: the queues the role may see).
async fn queues(client: &tokio_postgres::Transaction<'_>, reg: &mut Registry) -> Result<(), CliError> {
    let q = |reg: &mut Registry, n: &str, h: &str| family::<QueueLabel>(reg, n, h);
    let depth = q(reg, "jq_queue_depth", "Jobs claimable now or scheduled (jq.queue_stats.depth)");
    let claimable = q(reg, "jq_queue_claimable", "Jobs in state ready");
    let scheduled = q(reg, "jq_queue_scheduled", "Jobs in state scheduled (delayed or backing off)");
    let running = q(reg, "jq_queue_running", "Jobs in state running");
    let dead = q(reg, "jq_queue_dead", "Dead jobs within retention");
    let oldest = q(reg, "jq_queue_oldest_claimable_age_seconds", "Seconds since the oldest claimable job became due (0 when none)");
    let paused = q(reg, "jq_queue_paused", "1 when the queue is paused");
    let blocked = q(reg, "jq_queue_blocked", "Jobs waiting for a slot of their concurrency_key");
    let completed5 = q(reg, "jq_queue_completed_5m", "Executions completed in the last 5 minutes");
    let failed5 = q(reg, "jq_queue_failed_5m", "Executions failed in the last 5 minutes");
    let failed15 = q(reg, "jq_queue_failed_15m", "Executions failed in the last 15 minutes");
    let expired15 = q(reg, "jq_queue_lease_expired_15m", "Expired leases reaped in the last 15 minutes");
    let wait95 = q(reg, "jq_queue_wait_p95_5m_seconds", "95th percentile of due-to-claim wait of jobs claimed in the last 5 minutes");
    let hooks = q(reg, "jq_hooks_pending", "Dead jobs whose kind's on_dead hook has not succeeded yet (jq.queue_stats.hooks_pending)");
    for r in client
        .query_typed(
            "SELECT queue, depth::float8, claimable::float8, scheduled::float8, running::float8, dead::float8,
                    coalesce(extract(epoch FROM oldest_claimable_age), 0)::float8,
                    CASE WHEN paused THEN 1 ELSE 0 END::float8, blocked::float8,
                    completed_5m::float8, failed_5m::float8, failed_15m::float8, lease_expired_15m::float8,
                    extract(epoch FROM wait_p95_5m)::float8,
                    -- hooks_pending: from jq 0.2.0's job kinds on; read through the row's JSON so an
                    -- older jq (no such column) still answers, with 0
                    coalesce((to_jsonb(s) ->> 'hooks_pending')::float8, 0)
             FROM jq.queue_stats s ORDER BY queue",
            &[],
        )
        .await?
    {
        let l = QueueLabel { queue: r.get(0) };
        for (i, f) in [&depth, &claimable, &scheduled, &running, &dead, &oldest, &paused, &blocked, &completed5, &failed5, &failed15, &expired15]
            .iter()
            .enumerate()
        {
            f.get_or_create(&l).set(r.get::<_, f64>(i + 1));
        }
        if let Some(w) = r.get::<_, Option<f64>>(13) {
            wait95.get_or_create(&l).set(w);
        }
        hooks.get_or_create(&l).set(r.get::<_, f64>(14));
    }
    Ok(())
}

/// The table gauges (jq.table_health), when the role may read it: it is jq_admin's
/// (docs/security.md), so a least-privilege monitoring role gets the queue and worker gauges
/// without these.
async fn tables(client: &tokio_postgres::Transaction<'_>, reg: &mut Registry) -> Result<(), CliError> {
    let t = |reg: &mut Registry, n: &str, h: &str| family::<TableLabel>(reg, n, h);
    let bytes = t(reg, "jq_table_total_bytes", "Table + indexes + TOAST size (jq.table_health)");
    let dead_t = t(reg, "jq_table_dead_tuples", "Dead tuples (pg_stat_all_tables)");
    let ratio = t(reg, "jq_table_dead_ratio", "dead / (live + dead)");
    let xmin_age = family::<DatabaseLabel>(reg, "jq_oldest_xmin_age", "Age in transactions of the oldest xmin holding back vacuum");
    let xact_age = family::<DatabaseLabel>(reg, "jq_oldest_xact_age_seconds", "Seconds the oldest snapshot-holding transaction has been open");
    let row = client
        .query_typed_one("SELECT current_database()::text, has_table_privilege('jq.table_health', 'SELECT')", &[])
        .await?;
    let (db, health): (String, bool) = (row.get(0), row.get(1));
    if !health {
        return Ok(());
    }
    let rows = client
        .query_typed(
            "SELECT table_name, total_bytes::float8, coalesce(dead_tuples, 0)::float8, coalesce(dead_ratio, 0)::float8,
                    coalesce(oldest_xmin_age, 0)::float8, coalesce(extract(epoch FROM oldest_xact_age), 0)::float8
             FROM jq.table_health",
            &[],
        )
        .await?;
    for (k, r) in rows.into_iter().enumerate() {
        let l = TableLabel { table: r.get(0) };
        // NULL while another session holds or awaits a conflicting lock on it: no sample.
        if let Some(b) = r.get::<_, Option<f64>>(1) {
            bytes.get_or_create(&l).set(b);
        }
        dead_t.get_or_create(&l).set(r.get(2));
        ratio.get_or_create(&l).set(r.get(3));
        if k == 0 {
            let d = DatabaseLabel { database: db.clone() };
            xmin_age.get_or_create(&d).set(r.get(4));
            xact_age.get_or_create(&d).set(r.get::<_, f64>(5).max(0.0));
        }
    }
    Ok(())
}

/// One row, one boolean: whether this role may call jq.history_tables() (false on a jq older
/// than 0.2.0, which has none). Read by the scrape and by the dashboard's overview.
pub const HISTORY_TABLES_CALLABLE: &str =
    "SELECT CASE WHEN to_regproc('jq.history_tables') IS NULL THEN false
                 ELSE has_function_privilege(to_regproc('jq.history_tables')::oid, 'EXECUTE') END";

/// Per history table, the sessions whose locks keep it from a truncation that is due
/// (jq.history_tables(), jq_admin's; from jq 0.2.0 on: an older jq has no such series).
async fn history(client: &tokio_postgres::Transaction<'_>, reg: &mut Registry) -> Result<(), CliError> {
    let blocked = family::<TableLabel>(reg, "jq_history_truncation_blocked_sessions",
                                       "Sessions whose locks keep a history table due for truncation from it (0 when not due or undecided; jq.history_tables())");
    let callable: bool = client.query_typed_one(HISTORY_TABLES_CALLABLE, &[]).await?.get(0);
    if !callable {
        return Ok(());
    }
    // Its locks on the history tables end with the scrape's transaction, right after it.
    for r in client
        .query_typed(
            "SELECT table_name, CASE WHEN truncation_due THEN cardinality(truncation_blocked_by) ELSE 0 END::float8
             FROM jq.history_tables()",
            &[],
        )
        .await?
    {
        blocked.get_or_create(&TableLabel { table: r.get(0) }).set(r.get(1));
    }
    Ok(())
}

/// The maintenance workers' gauges (jq.status(): every database of the cluster with jq).
async fn maintenance_workers(client: &tokio_postgres::Transaction<'_>, reg: &mut Registry) -> Result<(), CliError> {
    let up = family::<DatabaseLabel>(reg, "jq_worker_up", "1 when the database's maintenance worker is running");
    let pass_age = family::<DatabaseLabel>(reg, "jq_worker_last_pass_age_seconds", "Seconds since the worker's last maintenance pass");
    let has_error = family::<DatabaseLabel>(reg, "jq_worker_last_error", "1 when the last recorded worker error is less than 5 minutes old");
    for r in client
        .query_typed(
            "SELECT coalesce(database::text, '?'), CASE WHEN state = 'running' THEN 1 ELSE 0 END::float8,
                    extract(epoch FROM clock_timestamp() - last_pass_at)::float8,
                    CASE WHEN last_error_at > clock_timestamp() - interval '5 minutes' THEN 1 ELSE 0 END::float8
             FROM jq.status()
             -- a database without jq has no maintenance worker to be up (its row only says so)
             WHERE state IS DISTINCT FROM 'no extension'",
            &[],
        )
        .await?
    {
        let d = DatabaseLabel { database: r.get(0) };
        up.get_or_create(&d).set(r.get(1));
        if let Some(a) = r.get::<_, Option<f64>>(2) {
            pass_age.get_or_create(&d).set(a);
        }
        has_error.get_or_create(&d).set(r.get(3));
    }
    Ok(())
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

/// The fleet gauges (jq.fleet, the workers the role may see): workers per state, always the
/// three states, and the jobs held and slots of the active ones in total. Bounded cardinality:
/// no per-worker series. Nothing for a jq without the registry.
async fn fleet(client: &tokio_postgres::Transaction<'_>, reg: &mut Registry) -> Result<(), CliError> {
    let has_fleet: bool = client
        .query_typed_one("SELECT to_regclass('jq.fleet') IS NOT NULL AND has_table_privilege('jq.fleet', 'SELECT')", &[])
        .await?
        .get(0);
    if !has_fleet {
        return Ok(());
    }
    let workers = family::<StateLabel>(reg, "jq_workers", "Registered workers by state: active, stale (no beat for 3 intervals), stopped (jq.fleet)");
    let in_flight = FGauge::default();
    reg.register("jq_worker_jobs_in_flight", "Jobs held by the active workers, in total (jq.fleet.in_flight at their last beat)", in_flight.clone());
    let slots = FGauge::default();
    reg.register("jq_worker_concurrency", "Handler slots of the active workers, in total (jq.fleet.concurrency)", slots.clone());
    let row = client
        .query_typed_one(
            "SELECT count(*) FILTER (WHERE state = 'active')::float8, count(*) FILTER (WHERE state = 'stale')::float8,
                    count(*) FILTER (WHERE state = 'stopped')::float8,
                    coalesce(sum(in_flight) FILTER (WHERE state = 'active'), 0)::float8,
                    coalesce(sum(concurrency) FILTER (WHERE state = 'active'), 0)::float8
             FROM jq.fleet",
            &[],
        )
        .await?;
    for (i, state) in ["active", "stale", "stopped"].into_iter().enumerate() {
        workers.get_or_create(&StateLabel { state: state.into() }).set(row.get(i));
    }
    in_flight.set(row.get(3));
    slots.set(row.get(4));
    Ok(())
}

pub async fn run(cli: &Cli, args: &MetricsArgs) -> CliResult {
    let mut client = connect(cli).await?;
    if args.once {
        print!("{}", scrape(&mut client, args.scrape_timeout).await?);
        return Ok(());
    }
    let addr = args.listen.clone().unwrap_or_default();
    let server = tiny_http::Server::http(&addr).map_err(|e| CliError(format!("cannot listen on {addr}: {e}")))?;
    tracing::info!("serving Prometheus metrics on http://{addr}/metrics");
    let handle = tokio::runtime::Handle::current();
    let client = std::sync::Arc::new(tokio::sync::Mutex::new(client));
    let cli_url = cli.database_url.clone();
    let timeout = args.scrape_timeout;
    tokio::task::spawn_blocking(move || {
        for req in server.incoming_requests() {
            if req.url() != "/metrics" {
                let _ = req.respond(tiny_http::Response::from_string("see /metrics\n").with_status_code(404));
                continue;
            }
            let result = handle.block_on(async {
                let mut guard = client.lock().await;
                if guard.is_closed() {
                    // Reconnect after a server restart or a dropped connection.
                    let cli = Cli { database_url: cli_url.clone(), verbose: 0, quiet: true, command: crate::Command::Queues { format: Default::default() } };
                    *guard = connect(&cli).await?;
                }
                scrape(&mut guard, timeout).await
            });
            let resp = match result {
                Ok(body) => tiny_http::Response::from_string(body).with_header(
                    tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"text/plain; version=0.0.4; charset=utf-8"[..])
                        .expect("static header"),
                ),
                Err(CliError(msg)) => {
                    tracing::warn!("scrape failed: {msg}");
                    tiny_http::Response::from_string(format!("jq scrape failed: {msg}\n")).with_status_code(503)
                }
            };
            let _ = req.respond(resp);
        }
    })
    .await
    .map_err(|e| CliError(format!("metrics server stopped: {e}")))?;
    Ok(())
}
