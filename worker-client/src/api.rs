//! Every SQL text the library sends, as typed functions: the `jq.*` calls of the worker and the
//! start-up checks. Result columns are read by name.
//!
//! Each function runs its statement through [`Conn`] (`Conn::query`, `Conn::query_retrying`,
//! `Conn::query_bounded`), which alone decides how a statement is sent (prepared once per
//! connection and kept, or unnamed: [`crate::StatementMode`]). Every parameter is passed with
//! its type, the type its cast in the SQL names, so either mode can send it without asking the
//! server first.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_postgres::types::Type;
use tokio_postgres::Row;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::conn::{Bound, CallErr, Conn, QueryError};
use crate::statement::Param;

/// One row of `jq.claim`.
pub(crate) struct Claimed {
    pub id: i64,
    pub queue: String,
    pub kind: String,
    pub payload: Value,
    pub attempt: i32,
    pub max_attempts: i32,
    pub token: Uuid,
    pub priority: i32,
    /// Seconds of lease left as the server saw it (NULL only if the row had no lease).
    pub lease_left: Option<f64>,
    /// The attempt's wall timeout in seconds, from its kind (`None`: none, or a jq without
    /// job kinds).
    pub timeout: Option<f64>,
    /// The progress stored by an earlier attempt.
    pub progress: Option<Value>,
}

impl Claimed {
    fn from_row(row: &Row) -> Claimed {
        Claimed {
            id: row.get("id"),
            queue: row.get("queue"),
            kind: row.get("kind"),
            payload: row.get("payload"),
            attempt: row.get("attempt"),
            max_attempts: row.get("max_attempts"),
            token: row.get("lease_token"),
            priority: row.get("priority"),
            lease_left: row.get("lease_left"),
            timeout: row.try_get("timeout").unwrap_or(None),
            progress: row.get("progress"),
        }
    }
}

/// The `jq.claim` statement a worker sends, fixed at start: by a queue name or an array of
/// names, with or without the long-poll `wait` argument.
pub(crate) struct ClaimCall {
    sql: String,
    has_wait: bool,
}

const CLAIM_COLUMNS: &str = "id, queue, kind, payload, attempt, max_attempts, lease_token, priority, \
     extract(epoch FROM lease_expires_at - clock_timestamp())::float8 AS lease_left, progress";

impl ClaimCall {
    /// `many_queues`: the `text[]` form of `jq.claim`; `has_wait`: pass `wait` (see
    /// [`claim_features`]).
    /// `has_timeout`: the claim returns the attempt's wall timeout (see [`claim_features`]).
    pub(crate) fn new(many_queues: bool, has_wait: bool, has_timeout: bool) -> ClaimCall {
        let queues = if many_queues { "$1::text[]" } else { "$1::text" };
        let wait_arg = if has_wait { ", wait => $5::float8 * interval '1 second'" } else { "" };
        let timeout = if has_timeout { ", extract(epoch FROM timeout)::float8 AS timeout" } else { "" };
        let sql = format!(
            "SELECT {CLAIM_COLUMNS}{timeout} FROM jq.claim({queues}, $2::text, $3::int4, $4::float8 * interval '1 second'{wait_arg})"
        );
        ClaimCall { sql, has_wait }
    }

    /// `jq.claim(queues, worker, n, lease, wait)`: `queues` holds one name for the single-queue
    /// form; `lease` and `wait` in seconds (`None`: the queue's lease / no wait). A wait is
    /// cancelled on the server when `stop` fires; rows it returned anyway are still returned.
    /// Bounded by the call timeout plus the wait.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn run(
        &self,
        conn: &mut Conn,
        queues: &[String],
        worker: &str,
        n: i32,
        lease: Option<f64>,
        wait: Option<f64>,
        stop: &CancellationToken,
    ) -> Result<Vec<Claimed>, QueryError> {
        let single: &str = &queues[0];
        let queues_param: Param = if queues.len() == 1 { (&single, Type::TEXT) } else { (&queues, Type::TEXT_ARRAY) };
        let params: [Param; 5] =
            [queues_param, (&worker, Type::TEXT), (&n, Type::INT4), (&lease, Type::FLOAT8), (&wait, Type::FLOAT8)];
        let params = if self.has_wait { &params[..] } else { &params[..4] };
        let cancel_on = wait.is_some().then_some(stop);
        let bound = Bound::Plus(Duration::from_secs_f64(wait.unwrap_or(0.0)));
        let rows = conn.query_bounded(&self.sql, params, cancel_on, bound).await?;
        Ok(rows.iter().map(Claimed::from_row).collect())
    }
}

/// One row of a heartbeat: the job, whether an operator asked to cancel it, the seconds of
/// lease left (`None`: the job is no longer running under the token), and whether the progress
/// sent with it was too large to store.
pub(crate) struct Beat {
    pub id: i64,
    pub cancel_requested: Option<bool>,
    pub lease_left: Option<f64>,
    pub progress_refused: bool,
}

/// `jq.heartbeat` of every `(ids[i], tokens[i])` in one statement, extending each lease by
/// `extend` seconds (`None`: the queue's lease) and storing `progress[i]` when it is given;
/// bounded by the call timeout, or `at_most` if less.
/// A progress over `jq.max_progress_bytes()` is left out (the lease is still renewed) and
/// reported as refused, so one oversized report cannot fail the heartbeat of every job.
pub(crate) async fn heartbeat(
    conn: &mut Conn,
    ids: &[i64],
    tokens: &[Uuid],
    extend: Option<f64>,
    progress: &[Option<Value>],
    at_most: Duration,
) -> Result<Vec<Beat>, QueryError> {
    let rows = if progress.iter().all(Option::is_none) {
        conn.query_bounded(
            "SELECT u.id, h.cancel_requested, \
                    extract(epoch FROM h.lease_expires_at - clock_timestamp())::float8 AS lease_left, \
                    false AS progress_refused \
             FROM unnest($1::int8[], $2::uuid[]) AS u(id, token) \
             CROSS JOIN LATERAL jq.heartbeat(u.id, u.token, $3::float8 * interval '1 second') AS h",
            &[(&ids, Type::INT8_ARRAY), (&tokens, Type::UUID_ARRAY), (&extend, Type::FLOAT8)],
            None,
            Bound::AtMost(at_most),
        )
        .await?
    } else {
        conn.query_bounded(
            "SELECT u.id, h.cancel_requested, \
                    extract(epoch FROM h.lease_expires_at - clock_timestamp())::float8 AS lease_left, \
                    (u.progress IS NOT NULL AND NOT u.fits) AS progress_refused \
             FROM (SELECT v.*, octet_length(v.progress::text) <= jq.max_progress_bytes() AS fits \
                   FROM unnest($1::int8[], $2::uuid[], $4::jsonb[]) AS v(id, token, progress)) u \
             CROSS JOIN LATERAL jq.heartbeat(u.id, u.token, $3::float8 * interval '1 second', \
                                             CASE WHEN u.fits THEN u.progress END) AS h",
            &[(&ids, Type::INT8_ARRAY), (&tokens, Type::UUID_ARRAY), (&extend, Type::FLOAT8), (&progress, Type::JSONB_ARRAY)],
            None,
            Bound::AtMost(at_most),
        )
        .await?
    };
    Ok(rows
        .iter()
        .map(|r| Beat {
            id: r.get("id"),
            cancel_requested: r.get("cancel_requested"),
            lease_left: r.get("lease_left"),
            progress_refused: r.get("progress_refused"),
        })
        .collect())
}

/// `jq.complete(id, token, result)`: whether it completed the job. Retried on connection errors
/// until `deadline`.
pub(crate) async fn complete(conn: &mut Conn, deadline: Instant, id: i64, token: Uuid, result: &Option<Value>) -> Result<bool, CallErr> {
    let rows = conn
        .query_retrying(deadline, "SELECT jq.complete($1::int8, $2::uuid, $3::jsonb) AS completed",
            &[(&id, Type::INT8), (&token, Type::UUID), (result, Type::JSONB)],
        )
        .await?;
    Ok(rows.first().is_some_and(|r| r.get::<_, Option<bool>>("completed") == Some(true)))
}

/// `jq.complete_many(ids, tokens, results)`: the ids it completed. Retried on connection errors
/// until `deadline`.
pub(crate) async fn complete_many(
    conn: &mut Conn,
    deadline: Instant,
    ids: &[i64],
    tokens: &[Uuid],
    results: &[Option<Value>],
) -> Result<Vec<i64>, CallErr> {
    let rows = conn
        .query_retrying(
            deadline,
            "SELECT id FROM jq.complete_many($1::int8[], $2::uuid[], $3::jsonb[]) AS id",
            &[(&ids, Type::INT8_ARRAY), (&tokens, Type::UUID_ARRAY), (&results, Type::JSONB_ARRAY)],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get("id")).collect())
}

/// `jq.fail(id, token, message)`: whether it recorded the failure (its outcome is not NULL).
/// Retried on connection errors until `deadline`.
pub(crate) async fn fail(conn: &mut Conn, deadline: Instant, id: i64, token: Uuid, message: &str) -> Result<bool, CallErr> {
    let rows = conn
        .query_retrying(deadline, "SELECT jq.fail($1::int8, $2::uuid, $3::text)::text AS outcome",
            &[(&id, Type::INT8), (&token, Type::UUID), (&message, Type::TEXT)],
        )
        .await?;
    Ok(rows.first().is_some_and(|r| r.get::<_, Option<String>>("outcome").is_some()))
}

/// `jq.fail(ids[i], tokens[i], messages[i])` for every job, in one statement and in array
/// order (jq has no `fail_many`; each call is fenced by its token exactly as a lone `jq.fail`):
/// the ids whose failure it recorded. Retried on connection errors until `deadline`.
pub(crate) async fn fail_many(
    conn: &mut Conn,
    deadline: Instant,
    ids: &[i64],
    tokens: &[Uuid],
    messages: &[String],
) -> Result<Vec<i64>, CallErr> {
    let rows = conn
        .query_retrying(
            deadline,
            "SELECT u.id, jq.fail(u.id, u.token, u.message)::text AS outcome \
             FROM unnest($1::int8[], $2::uuid[], $3::text[]) AS u(id, token, message)",
            &[(&ids, Type::INT8_ARRAY), (&tokens, Type::UUID_ARRAY), (&messages, Type::TEXT_ARRAY)],
        )
        .await?;
    Ok(rows.iter().filter(|r| r.get::<_, Option<String>>("outcome").is_some()).map(|r| r.get("id")).collect())
}

/// `jq.release(id, token)`: whether it handed the job back. Retried on connection errors until
/// `deadline`.
pub(crate) async fn release(conn: &mut Conn, deadline: Instant, id: i64, token: Uuid) -> Result<bool, CallErr> {
    let rows = conn
        .query_retrying(deadline, "SELECT jq.release($1::int8, $2::uuid) AS released", &[(&id, Type::INT8), (&token, Type::UUID)])
        .await?;
    Ok(rows.first().is_some_and(|r| r.get::<_, Option<bool>>("released") == Some(true)))
}

/// `jq.snooze(id, token, delay)` (delay sent in whole milliseconds): whether it put the job
/// back. Retried on connection errors until `deadline`.
pub(crate) async fn snooze(conn: &mut Conn, deadline: Instant, id: i64, token: Uuid, delay: Duration) -> Result<bool, CallErr> {
    let delay = format!("{} milliseconds", delay.as_millis());
    let rows = conn
        .query_retrying(deadline, "SELECT jq.snooze($1::int8, $2::uuid, $3::text::interval) AS snoozed",
            &[(&id, Type::INT8), (&token, Type::UUID), (&delay, Type::TEXT)],
        )
        .await?;
    Ok(rows.first().is_some_and(|r| r.get::<_, Option<bool>>("snoozed") == Some(true)))
}

/// Whether the database has the `jq` extension.
pub(crate) async fn jq_installed(conn: &mut Conn) -> Result<bool, QueryError> {
    let rows = conn
        .query("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'jq'", &[])
        .await?;
    Ok(!rows.is_empty())
}

/// The first of `queues` this role cannot see in `jq.queue_stats` (which shows the queues it
/// holds a jq.grant on), if any.
pub(crate) async fn first_missing_queue(conn: &mut Conn, queues: &[String]) -> Result<Option<String>, QueryError> {
    let rows = conn
        .query(
            // Per queue named (a LATERAL with the name pushed into the view): the view's figures of
            // the other queues are not computed.
            "SELECT u.q FROM unnest($1::text[]) WITH ORDINALITY AS u(q, i) \
             LEFT JOIN LATERAL (SELECT s.queue FROM jq.queue_stats s WHERE s.queue = u.q LIMIT 1) v ON true \
             WHERE v.queue IS NULL ORDER BY u.i",
            &[(&queues, Type::TEXT_ARRAY)],
        )
        .await?;
    Ok(rows.first().map(|r| r.get("q")))
}

/// Whether this jq's `jq.claim` has the long-poll `wait` parameter.
/// Whether `jq.claim` has the long-poll `wait` parameter, and whether its rows carry the
/// attempt's wall `timeout` (jq with job kinds).
pub(crate) async fn claim_features(conn: &mut Conn) -> Result<(bool, bool), QueryError> {
    let rows = conn
        .query(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc \
             WHERE pronamespace = 'jq'::regnamespace AND proname = 'claim' AND 'wait' = ANY (proargnames)) AS has_wait, \
             EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.typrelid = a.attrelid \
             WHERE t.oid = 'jq.claimed_job'::regtype AND a.attname = 'timeout' AND NOT a.attisdropped) AS has_timeout",
            &[],
        )
        .await?;
    Ok(rows.first().map_or((false, false), |r| (r.get("has_wait"), r.get("has_timeout"))))
}

/// What a worker tells `jq.register_worker` about itself.
pub(crate) struct WorkerInfo<'a> {
    pub name: &'a str,
    pub hostname: &'a str,
    pub pid: i32,
    pub client_version: &'a str,
    pub queues: &'a [String],
    pub concurrency: i32,
}

/// `jq.register_worker(…)`: the new worker id and the beat interval in seconds
/// (`jq.worker_beat_interval()`), read in the same statement. Bounded by the call timeout.
pub(crate) async fn register_worker(conn: &mut Conn, w: &WorkerInfo<'_>) -> Result<(Uuid, f64), QueryError> {
    let rows = conn
        .query(
            "SELECT jq.register_worker($1::text, $2::text, $3::int4, $4::text, $5::text[], $6::int4) AS id, \
                    extract(epoch FROM jq.worker_beat_interval())::float8 AS every",
            &[(&w.name, Type::TEXT), (&w.hostname, Type::TEXT), (&w.pid, Type::INT4),
              (&w.client_version, Type::TEXT), (&w.queues, Type::TEXT_ARRAY), (&w.concurrency, Type::INT4)],
        )
        .await?;
    let row = rows.first().expect("one row");
    Ok((row.get("id"), row.get("every")))
}

/// `jq.worker_beat(id, in_flight, rss_bytes)`: false when the worker is unknown (pruned) or no
/// longer ours, i.e. it must register again. Bounded by the call timeout.
pub(crate) async fn worker_beat(conn: &mut Conn, id: Uuid, in_flight: i32, rss_bytes: i64) -> Result<bool, QueryError> {
    let rows = conn
        .query("SELECT jq.worker_beat($1::uuid, $2::int4, $3::int8) AS ok",
               &[(&id, Type::UUID), (&in_flight, Type::INT4), (&rss_bytes, Type::INT8)])
        .await?;
    Ok(rows.first().is_some_and(|r| r.get::<_, Option<bool>>("ok") == Some(true)))
}

/// `jq.deregister_worker(id)`: whether it marked the worker stopped. Bounded by the call timeout.
pub(crate) async fn deregister_worker(conn: &mut Conn, id: Uuid) -> Result<bool, QueryError> {
    let rows = conn.query("SELECT jq.deregister_worker($1::uuid) AS ok", &[(&id, Type::UUID)]).await?;
    Ok(rows.first().is_some_and(|r| r.get::<_, Option<bool>>("ok") == Some(true)))
}
