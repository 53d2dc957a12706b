//! A worker client for [jq](https://github.com/), the job queue inside PostgreSQL.
//!
//! Embed a [`Worker`] in any tokio service: register handlers by job kind (with a fallback per
//! queue), pick queues, concurrency, lease and claim batch size, and call [`Worker::run`]. The
//! worker loops on `jq.claim`, runs handlers concurrently, keeps their leases alive with
//! `jq.heartbeat`, reports with `jq.complete_many` / `jq.fail`, and on SIGTERM or SIGINT shuts
//! down gracefully, releasing (never failing) the jobs it could not finish. It owns no queue
//! SQL: it only calls `jq.*` functions with parameters.
//!
//! The same crate builds the `jqctl` command line (feature `cli`, on by default).
//!
//! The design — the loop, the heartbeat and shutdown rules, the libraries and why — is in
//! `docs/worker-client.md` of the jq repository.
//!
//! # Example
//!
//! A complete worker program. It needs a PostgreSQL with jq and a queue `emails`
//! (`SELECT jq.create_queue('emails')`), found through `DATABASE_URL` or the libpq
//! environment variables:
//!
//! ```no_run
//! use std::time::Duration;
//! use worker_client::{config_from_env, Job, Worker};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let config = config_from_env(std::env::var("DATABASE_URL").ok().as_deref())?;
//!     let worker = Worker::builder(config)
//!         .queue("emails")
//!         // Jobs enqueued with kind => 'welcome'.
//!         .handler("welcome", |job: Job| async move {
//!             let to = job.payload["to"].as_str().ok_or("payload has no \"to\"")?;
//!             // ... send the mail; watch job.cancelled() in long work ...
//!             Ok(Some(serde_json::json!({ "sent_to": to })))
//!         })
//!         // Any other kind in the queue.
//!         .fallback("emails", |job: Job| async move {
//!             Err(format!("unknown email kind {}", job.kind).into())
//!         })
//!         .concurrency(8)
//!         .lease(Duration::from_secs(60))
//!         .shutdown_grace(Duration::from_secs(20))
//!         .build()?;
//!     let stats = worker.run().await?; // until SIGTERM / SIGINT
//!     eprintln!("{stats:?}");
//!     Ok(())
//! }
//! ```

#![warn(missing_docs)]

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

mod api;
mod cancel;
mod config;
mod conn;
mod progress;
mod statement;
mod tls;
mod worker;

pub use config::{
    config_from_env, describe_target, ConnConfig, CALL_TIMEOUT_ENV, REGISTER_ENV, DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_KEEPALIVES_IDLE, DEFAULT_KEEPALIVES_INTERVAL, DEFAULT_KEEPALIVES_RETRIES, DEFAULT_TCP_USER_TIMEOUT,
};
pub use conn::{abandon, connect, connect_abortable, connect_error};
pub use statement::{StatementMode, STATEMENT_MODE_ENV};
pub use tls::{RootCert, SslMode, TlsSettings};
pub use worker::{RunStats, Worker, WorkerBuilder};

/// The error type handlers return: any error, turned into the `jq.fail` message with its
/// `Display` text (and its sources', joined with `: `).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a handler returns: `Ok(result)` completes the job with `result` stored in
/// `jq.jobs.result` (`None` stores SQL NULL); `Err(e)` fails it with `e`'s message.
pub type HandlerResult = Result<Option<serde_json::Value>, BoxError>;

/// A handler's "not yet": return `Err(Snooze(delay).into())` and the worker calls
/// `jq.snooze(id, token, delay)`: the job is due again after `delay`, the attempt is not charged,
/// and the execution is recorded with outcome `snoozed` (docs/flow-control.md). Counted in
/// [`RunStats::snoozed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snooze(pub Duration);

impl std::fmt::Display for Snooze {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "snoozed for {}", format_duration(self.0))
    }
}

impl std::error::Error for Snooze {}

/// The boxed future a [`Handler`] returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = HandlerResult> + Send + 'static>>;

/// Runs jobs. Implemented for every `Fn(Job) -> impl Future<Output = HandlerResult>` closure
/// or function that is `Send + Sync + 'static`, so you rarely implement it yourself.
///
/// The handler runs in a tokio task of its own: a panic fails the job with the panic message;
/// the worker's per-job timeout drops the future and fails the job.
///
/// # Example
///
/// ```
/// use worker_client::{Handler, HandlerFuture, Job};
///
/// // A handler with state, implemented by hand.
/// struct Resize { max_side: u32 }
///
/// impl Handler for Resize {
///     fn call(&self, job: Job) -> HandlerFuture {
///         let max_side = self.max_side;
///         Box::pin(async move {
///             let side = job.payload["side"].as_u64().unwrap_or(0) as u32;
///             Ok(Some(serde_json::json!({ "side": side.min(max_side) })))
///         })
///     }
/// }
///
/// // The same as a closure.
/// fn takes_handler<H: Handler>(_: H) {}
/// takes_handler(Resize { max_side: 512 });
/// takes_handler(|job: Job| async move { Ok(Some(job.payload)) });
/// ```
pub trait Handler: Send + Sync + 'static {
    /// Starts running `job`; the returned future's output decides the job's outcome.
    fn call(&self, job: Job) -> HandlerFuture;
}

impl<F, Fut> Handler for F
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn call(&self, job: Job) -> HandlerFuture {
        Box::pin((self)(job))
    }
}

/// One claimed job, handed to its handler.
///
/// The lease and its token stay with the worker: the handler only returns an outcome, and the
/// worker completes, fails or releases the job.
///
/// # Example
///
/// ```
/// use worker_client::{HandlerResult, Job};
///
/// async fn handle(job: Job) -> HandlerResult {
///     for step in 0..10 {
///         if job.is_cancelled() {
///             // Cancelled by jq.cancel, a lost lease, the timeout or shutdown.
///             return Err(format!("stopped at step {step}").into());
///         }
///         // ... one step of work on job.payload ...
///     }
///     Ok(Some(serde_json::json!({ "id": job.id, "attempt": job.attempt })))
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Job {
    /// The job's id (`jq.jobs.id`).
    pub id: i64,
    /// The queue it was claimed from.
    pub queue: String,
    /// Its kind: what handlers are registered by (the queue name when enqueued without one).
    pub kind: String,
    /// Its payload.
    pub payload: serde_json::Value,
    /// This run's attempt number, 1 on the first run (a run cut short by a crash or a shutdown
    /// is refunded, so the number can repeat).
    pub attempt: i32,
    /// The job's attempt limit: a failure when `attempt == max_attempts` is final (dead).
    pub max_attempts: i32,
    /// The job's priority.
    pub priority: i32,
    /// The progress an earlier attempt of this job reported (`jq.jobs.progress`), to resume
    /// from; `None` if none was reported.
    pub progress: Option<serde_json::Value>,
    pub(crate) cancel: CancellationToken,
    pub(crate) report: std::sync::Arc<progress::ProgressSlot>,
}

impl Job {
    /// Completes when the handler should stop: an operator called `jq.cancel` (seen in a
    /// heartbeat), the lease was lost, the per-job timeout passed, or the shutdown grace period
    /// ended. Whatever the handler returns afterwards, a lost or shut-down job is not failed by
    /// it.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    /// Whether [`Job::cancelled`] has fired.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// A clone of the job's cancellation token, to hand to other tasks.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Reports the job's progress (any JSON: percent, message, checkpoint). It is stored on
    /// the job (`jq.jobs.progress`) by the job's next heartbeat, fenced by its lease, kept across
    /// retries and handed to the next attempt as [`Job::progress`]. Only the latest value is
    /// sent; one not yet sent when the job ends is dropped. A value over
    /// `jq.max_progress_bytes()` (64 KiB of JSON text) is refused by the server and logged.
    pub fn set_progress(&self, value: serde_json::Value) {
        self.report.set(value, false);
    }

    /// As [`Job::set_progress`], but heartbeats the job at once (one round trip) instead of
    /// at its next due heartbeat: for a checkpoint that must be stored before going on.
    pub fn set_progress_now(&self, value: serde_json::Value) {
        self.report.set(value, true);
    }
}

/// Errors of the worker's start and of connection set-up. Once running, the worker does not
/// fail: it logs and retries.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server could not be reached or refused the connection.
    #[error("cannot connect to PostgreSQL at {target}: {reason}")]
    Connect {
        /// Where it tried, as from [`describe_target`].
        target: String,
        /// Why it failed, on one line.
        reason: String,
    },
    /// The database has no `jq` extension.
    #[error("jq is not installed in database \"{0}\" (CREATE EXTENSION jq)")]
    NotInstalled(String),
    /// A queue to work does not exist, or the role may not use it (no jq.grant).
    #[error("queue \"{0}\" does not exist, or this role may not use it (create it with jq.create_queue or jqctl create-queue; grant it with jq.grant)")]
    QueueNotFound(String),
    /// A setting is invalid.
    #[error("{0}")]
    Config(String),
    /// Another server error, as `message (SQLSTATE xxxxx)`.
    #[error("{0}")]
    Db(String),
}

/// Parses a duration written as a number with an optional unit: `ms`, `s` (the default),
/// `m`, `h` or `d`, e.g. `250ms`, `30`, `1.5s`, `5m`.
///
/// # Errors
///
/// A message naming the input when it is not of that form, negative, or not finite.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// assert_eq!(worker_client::parse_duration("250ms"), Ok(Duration::from_millis(250)));
/// assert_eq!(worker_client::parse_duration("2m"), Ok(Duration::from_secs(120)));
/// assert!(worker_client::parse_duration("soon").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("invalid duration {s:?} (examples: 500ms, 30s, 5m, 1h)"))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "" | "s" | "sec" | "secs" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        _ => return Err(format!("invalid duration {s:?}: unknown unit {unit:?} (ms, s, m, h, d)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("invalid duration {s:?}"))
}

/// Writes a duration the way [`parse_duration`] reads it back: `250ms`, `1.5s`, `90s`.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// assert_eq!(worker_client::format_duration(Duration::from_millis(1500)), "1.5s");
/// assert_eq!(worker_client::format_duration(Duration::from_millis(20)), "20ms");
/// ```
pub fn format_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        let s = d.as_secs_f64();
        if s.fract() == 0.0 {
            format!("{}s", d.as_secs())
        } else {
            format!("{s:.1}s")
        }
    }
}
