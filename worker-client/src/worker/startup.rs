//! Start-up checks: the server answers, jq is installed, the queues exist for this role, and
//! whether `jq.claim` can long-poll.

use std::time::Duration;

use crate::ConnConfig;

use super::options::Opts;
use crate::api;
use crate::conn::Conn;
use crate::Error;

/// Runs [`preflight`] on the claim loop's connection and returns that connection and whether
/// `jq.claim` has the long-poll `wait` parameter.
///
/// A server that is down or a database without jq fails the start at once, with one line. A
/// connection lost during these checks (backend terminated, server restarting) is retried like
/// any later one, up to 5 times: a `pg_terminate_backend` racing the start must not make
/// `jqctl work` exit (tests/reconnect.rs `terminated_backends_jobs_still_picked_up`).
pub(super) async fn check(config: &ConnConfig, opts: &Opts) -> Result<(Conn, bool, bool), Error> {
    let mut conn = opts.claim_conn(config);
    let mut attempt = 0u32;
    let (has_wait, has_timeout) = loop {
        match preflight(&mut conn, config, &opts.queues).await {
            Err(Error::Db(msg)) if attempt < 5 => tracing::warn!(error = %msg, "start-up check failed; retrying"),
            Err(Error::Connect { reason, .. }) if attempt > 0 && attempt < 5 => {
                tracing::warn!(error = %reason, "reconnecting for the start-up check")
            }
            r => break r?,
        }
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
    };
    tracing::info!(
        queues = ?opts.queues, concurrency = opts.concurrency, worker = %opts.worker_name,
        long_poll = has_wait, statements = %conn.mode(), "worker started"
    );
    Ok((conn, has_wait, has_timeout))
}

/// Connects, checks that jq is installed and the queues exist (as this role sees them:
/// `jq.queue_stats` shows the queues it holds a jq.grant on), and tells whether `jq.claim`
/// has the long-poll `wait` parameter and returns the attempts' wall timeouts.
async fn preflight(conn: &mut Conn, config: &ConnConfig, queues: &[String]) -> Result<(bool, bool), Error> {
    conn.get().await?;
    if !api::jq_installed(conn).await? {
        return Err(Error::NotInstalled(config.pg().get_dbname().unwrap_or("?").to_string()));
    }
    if let Some(q) = api::first_missing_queue(conn, queues).await? {
        return Err(Error::QueueNotFound(q));
    }
    Ok(api::claim_features(conn).await?)
}
