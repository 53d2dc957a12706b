//! The listings of jqctl, one function each: the query, and the columns in display order.
//! Columns without `.wide()` make the default table, chosen to fit 100 characters with the
//! shrinkable ones at their limit (worker-client/tests/listings.rs); `--wide` and `--json` show
//! every column. table.rs renders them.

use tokio_postgres::types::Type;

use crate::table::{Col, Listing};

/// `jqctl queues`: every queue's settings (jq.queues; the rate limiter's bucket state left out).
pub fn queues() -> Listing {
    Listing::new(
        "FROM jq.queues ORDER BY name",
        vec![
            Col::new("name").shrink(10),
            Col::new("paused"),
            Col::new("max_concurrency"),
            Col::new("max_attempts"),
            Col::secs("lease"),
            Col::new("backoff"),
            Col::secs("backoff_base").wide(),
            Col::secs("backoff_max").wide(),
            Col::new("jitter").wide(),
            Col::new("max_lease_expiries").wide(),
            Col::secs("max_lease").wide(),
            Col::secs("retention").wide(),
            Col::secs("dead_retention").wide(),
            Col::secs("history_retention").wide(),
            Col::new("key_concurrency").wide(),
            Col::new("rate_limit").wide(),
            Col::secs("rate_period").wide(),
            Col::new("rate_burst").wide(),
            Col::secs("priority_aging").wide(),
            Col::new("has_kinds").wide(),
            Col::time("created_at").wide(),
        ],
    )
}

/// `jqctl stats`: jq.queue_stats.
pub fn stats() -> Listing {
    Listing::new(
        "FROM jq.queue_stats ORDER BY queue",
        vec![
            Col::new("queue").shrink(10),
            Col::new("depth"),
            Col::new("claimable"),
            Col::new("scheduled").wide(),
            Col::new("running"),
            Col::new("dead"),
            Col::new("completed").wide(),
            Col::new("cancelled").wide(),
            Col::secs("oldest_claimable_age").text("date_trunc('second', oldest_claimable_age)"),
            Col::new("paused"),
            Col::new("blocked").wide(),
            Col::new("completed_5m").wide(),
            Col::new("failed_5m"),
            Col::new("failed_15m").wide(),
            Col::new("lease_expired_15m").wide(),
            Col::secs("wait_p95_5m").wide(),
            Col::new("hooks_pending").wide(),
        ],
    )
}

/// The columns of a job (jq.jobs) in `jqctl jobs` and `jqctl show`; `time` makes the
/// timestamp columns.
fn job_cols(time: fn(&'static str) -> Col) -> Vec<Col> {
    vec![
        Col::new("id"),
        Col::new("queue").wide(),
        Col::new("kind").shrink(6),
        Col::new("state"),
        // The table shows attempt/max_attempts; JSON has the two numbers.
        Col::new("attempt").text("attempt || '/' || max_attempts"),
        Col::new("max_attempts").json_only(),
        Col::new("priority").wide(),
        time("run_at"),
        time("created_at").wide(),
        time("started_at").wide(),
        time("finished_at").wide(),
        Col::new("worker").wide(),
        time("lease_expires_at").wide(),
        Col::secs("lease").wide(),
        Col::new("lease_token").wide(),
        Col::new("lease_expiries").wide(),
        Col::new("claims").wide(),
        Col::new("cancel_requested").wide(),
        Col::new("idempotency_key").wide(),
        Col::new("concurrency_key").wide(),
        Col::secs("timeout").wide(),
        Col::new("base_priority").wide(),
        time("next_age_at").wide(),
        Col::new("last_error").shrink(10),
        Col::new("progress").shrink(8),
        Col::new("payload").shrink(7),
        Col::new("result").wide(),
    ]
}

/// `jqctl jobs`: the newest `limit` jobs of `queue` (in `state`).
pub fn jobs(queue: &str, state: Option<&str>, limit: i64) -> Listing {
    Listing::new(
        "FROM jq.jobs WHERE queue = $1 AND ($2::text IS NULL OR state = $2::text::jq.job_state) \
         ORDER BY id DESC LIMIT $3",
        job_cols(Col::time),
    )
    .param(queue.to_string(), Type::TEXT)
    .param(state.map(str::to_string), Type::TEXT)
    .param(limit, Type::INT8)
}

/// `jqctl show ID`: the job's every column (timestamps in full, progress pretty-printed).
pub fn job(id: i64) -> Listing {
    let cols = job_cols(Col::new)
        .into_iter()
        .map(|c| match c.key() {
            "progress" => c.text("jsonb_pretty(progress)"),
            _ => c,
        })
        .collect();
    Listing::new("FROM jq.jobs WHERE id = $1", cols).param(id, Type::INT8)
}

/// `jqctl show ID`: the job's executions, oldest first (jq.executions).
pub fn executions(id: i64) -> Listing {
    Listing::new(
        "FROM jq.executions WHERE job_id = $1 ORDER BY seq",
        vec![
            Col::new("job_id").json_only(),
            Col::new("seq"),
            Col::new("attempt"),
            Col::new("outcome"),
            Col::new("queue").wide(),
            Col::new("worker").shrink(8),
            Col::time("started_at"),
            Col::time("lease_expires_at").wide(),
            Col::time("finished_at"),
            Col::new("error").shrink(10),
        ],
    )
    .param(id, Type::INT8)
}

/// `jqctl schedules`: jq.schedules.
pub fn schedules() -> Listing {
    Listing::new(
        "FROM jq.schedules ORDER BY name",
        vec![
            Col::new("name").shrink(8),
            Col::new("cron").shrink(9),
            Col::new("timezone").wide(),
            Col::new("queue").shrink(8),
            Col::new("kind").wide(),
            Col::new("payload").wide(),
            Col::new("priority").wide(),
            Col::new("max_attempts").wide(),
            Col::new("misfire").wide(),
            Col::new("overlap").wide(),
            Col::new("enabled"),
            Col::time("next_run_at"),
            Col::time("next_run_from").wide(),
            Col::time("last_fired_at"),
            Col::new("last_job_id").wide(),
            Col::new("fired_count").wide(),
            Col::new("skipped_count").wide(),
            Col::new("last_error").shrink(10),
            Col::time("last_error_at").wide(),
            Col::time("created_at").wide(),
            Col::time("updated_at").wide(),
            Col::new("created_by").wide(),
        ],
    )
}

/// `jqctl kinds`: jq.kind_policies.
pub fn kinds() -> Listing {
    Listing::new(
        "FROM jq.kind_policies ORDER BY queue, kind",
        vec![
            Col::new("queue").shrink(8),
            Col::new("kind").shrink(8),
            Col::new("max_attempts"),
            Col::new("backoff"),
            Col::secs("backoff_base").wide(),
            Col::secs("backoff_max").wide(),
            Col::new("jitter").wide(),
            Col::secs("timeout"),
            Col::new("on_dead").shrink(10),
            Col::new("on_dead_owner").wide(),
            Col::new("hooks_pending"),
            Col::new("from_queue").text("array_to_string(from_queue, ',')").wide(),
            Col::time("updated_at").wide(),
        ],
    )
}

/// `jqctl workers`: the worker fleet (jq.fleet), active workers first, then stale, then stopped.
pub fn workers() -> Listing {
    Listing::new(
        "FROM jq.fleet ORDER BY CASE state WHEN 'active' THEN 0 WHEN 'stale' THEN 1 ELSE 2 END, name, started_at",
        vec![
            Col::new("name").shrink(12),
            Col::new("state"),
            Col::new("queues").text("array_to_string(queues, ',')").shrink(8),
            // The table shows in_flight/concurrency; JSON has the two numbers.
            Col::new("in_flight").text("in_flight || '/' || concurrency"),
            Col::new("concurrency").json_only(),
            Col::new("rss_bytes").text("CASE WHEN rss_bytes > 0 THEN pg_size_pretty(rss_bytes) ELSE '' END"),
            Col::time("started_at"),
            // The table shows how long ago; JSON the instant.
            Col::new("last_beat_at").text("floor(extract(epoch FROM now() - last_beat_at))::bigint || 's ago'"),
            Col::time("stopped_at").wide(),
            Col::new("hostname").wide(),
            Col::new("pid").wide(),
            Col::new("client_version").wide(),
            Col::new("jq_version").wide(),
            Col::new("worker_id").wide(),
        ],
    )
}
