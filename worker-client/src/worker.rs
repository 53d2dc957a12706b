//! The worker: builder, claim loop, job supervision, and the reporter (heartbeats, completes,
//! fails, releases). docs/worker-client.md describes the design; this file is the code.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Config, NoTls, Row};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::conn::{describe, is_transient, Backoff, Conn, QueryError};
use crate::{BoxError, Error, Handler, Job};

/// Largest `n` jq.claim accepts (`jq.max_claim_batch()`).
const MAX_CLAIM_BATCH: usize = 1000;
/// Most outcomes reported in one round trip.
const REPORT_BATCH: usize = 500;

/// Configures a [`Worker`]: its connection, queues, handlers and timings.
///
/// Obtained from [`Worker::builder`]. Every setting has a default except the queues and the
/// handlers; [`WorkerBuilder::build`] checks that there is at least one of each.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use worker_client::{config_from_env, Job, Worker};
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let worker = Worker::builder(config_from_env(Some("postgresql://postgres@127.0.0.1/app"))?)
///     .queue("emails")
///     .handler("welcome", |job: Job| async move {
///         println!("welcome mail for {}", job.payload["to"]);
///         Ok(None)
///     })
///     .concurrency(8)
///     .lease(Duration::from_secs(60))
///     .shutdown_grace(Duration::from_secs(20))
///     .job_timeout(Duration::from_secs(300))
///     .build()?;
/// worker.run().await?;
/// # Ok(())
/// # }
/// ```
pub struct WorkerBuilder {
    config: Config,
    queues: Vec<String>,
    handlers: HashMap<String, Arc<dyn Handler>>,
    fallbacks: HashMap<String, Arc<dyn Handler>>,
    concurrency: usize,
    claim_batch: Option<usize>,
    lease: Option<Duration>,
    heartbeat_interval: Option<Duration>,
    shutdown_grace: Duration,
    abort_timeout: Duration,
    job_timeout: Option<Duration>,
    worker_name: Option<String>,
    idle_wait: Duration,
    poll_min: Duration,
    poll_max: Duration,
}

impl WorkerBuilder {
    /// Adds a queue to claim from. With several queues, each claim takes jobs from them in the
    /// order they were added (`jq.claim(text[], …)`: earlier queues first).
    pub fn queue(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        if !self.queues.contains(&name) {
            self.queues.push(name);
        }
        self
    }

    /// Adds several queues, as [`WorkerBuilder::queue`] does one.
    pub fn queues<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for n in names {
            self = self.queue(n);
        }
        self
    }

    /// Registers the handler for jobs of `kind` (in any of the worker's queues). A job's kind
    /// defaults to its queue's name when it was enqueued without one.
    pub fn handler<H: Handler>(mut self, kind: impl Into<String>, handler: H) -> Self {
        self.handlers.insert(kind.into(), Arc::new(handler));
        self
    }

    /// Registers the handler for jobs of `queue` whose kind has no handler of its own. A job
    /// with neither is failed with the message `no handler for kind …` (so it ends dead and
    /// visible rather than circulating).
    pub fn fallback<H: Handler>(mut self, queue: impl Into<String>, handler: H) -> Self {
        self.fallbacks.insert(queue.into(), Arc::new(handler));
        self
    }

    /// How many handlers run at once (default 4). The worker claims only up to the free slots.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Most jobs taken by one `jq.claim` call (default: the concurrency, at most 1000).
    pub fn claim_batch(mut self, n: usize) -> Self {
        self.claim_batch = Some(n);
        self
    }

    /// Lease length asked for at claim and at each heartbeat (default: the queue's `lease`).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Time between heartbeats of a running job (default: a third of its lease, so two
    /// heartbeats can be lost before the lease expires). Always capped at half the lease.
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.heartbeat_interval = Some(every);
        self
    }

    /// After a shutdown request, how long running handlers may take to finish (default 30 s).
    /// The worker stops claiming at once, keeps heartbeating, and when the grace period is
    /// over cancels the remaining handlers' tokens and releases their jobs with `jq.release`.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// After the grace period, how long a cancelled handler may take to return before its task
    /// is dropped (default 2 s). Whatever it returns then, an error included, its job is
    /// released, not failed; a success is still completed.
    pub fn abort_timeout(mut self, timeout: Duration) -> Self {
        self.abort_timeout = timeout;
        self
    }

    /// Per-job time limit (default none). A handler still running after it is cancelled and
    /// dropped, and the job is failed with `timed out after …`.
    pub fn job_timeout(mut self, timeout: Duration) -> Self {
        self.job_timeout = Some(timeout);
        self
    }

    /// The `worker` name passed to `jq.claim`, for operators (default `HOSTNAME-PID`).
    pub fn worker_name(mut self, name: impl Into<String>) -> Self {
        self.worker_name = Some(name.into());
        self
    }

    /// How long one idle claim may wait for a job when jq's `jq.claim` has a `wait`
    /// parameter (long poll; default 5 s). Without it the worker polls instead, see
    /// [`WorkerBuilder::poll_interval`].
    pub fn idle_wait(mut self, wait: Duration) -> Self {
        self.idle_wait = wait;
        self
    }

    /// Bounds of the idle poll used when `jq.claim` has no `wait` parameter (default 50 ms to
    /// 1 s): after each empty claim the delay doubles up to `max`, with jitter; a claim that
    /// returns jobs resets it.
    pub fn poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.poll_min = min;
        self.poll_max = max.max(min);
        self
    }

    /// Checks the settings and returns the worker.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when there is no queue or no handler, the concurrency or the claim
    /// batch is 0, the batch is over 1000, or a lease or interval is zero.
    pub fn build(self) -> Result<Worker, Error> {
        if self.queues.is_empty() {
            return Err(Error::Config("no queue to work: add one with .queue(…)".into()));
        }
        if self.handlers.is_empty() && self.fallbacks.is_empty() {
            return Err(Error::Config("no handler: add one with .handler(kind, …) or .fallback(queue, …)".into()));
        }
        if self.concurrency == 0 {
            return Err(Error::Config("concurrency must be at least 1".into()));
        }
        let claim_batch = self.claim_batch.unwrap_or(self.concurrency).min(self.concurrency);
        if claim_batch == 0 || claim_batch > MAX_CLAIM_BATCH {
            return Err(Error::Config(format!("claim batch must be between 1 and {MAX_CLAIM_BATCH}")));
        }
        if self.lease.is_some_and(|l| l < Duration::from_millis(100)) {
            return Err(Error::Config("lease must be at least 100 ms".into()));
        }
        if self.heartbeat_interval.is_some_and(|h| h.is_zero()) || self.poll_min.is_zero() {
            return Err(Error::Config("heartbeat and poll intervals must be over zero".into()));
        }
        if self.job_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::Config("job timeout must be over zero".into()));
        }
        let worker_name = self.worker_name.unwrap_or_else(default_worker_name);
        if worker_name.is_empty() || worker_name.chars().count() > 200 {
            return Err(Error::Config("worker name must have 1 to 200 characters".into()));
        }
        Ok(Worker {
            config: self.config,
            opts: Arc::new(Opts {
                queues: self.queues,
                handlers: self.handlers,
                fallbacks: self.fallbacks,
                concurrency: self.concurrency,
                claim_batch,
                lease: self.lease,
                heartbeat_interval: self.heartbeat_interval,
                shutdown_grace: self.shutdown_grace,
                abort_timeout: self.abort_timeout,
                job_timeout: self.job_timeout,
                worker_name,
                idle_wait: self.idle_wait,
                poll_min: self.poll_min,
                poll_max: self.poll_max,
                breaks: Breaks::from_env(),
            }),
        })
    }
}

fn default_worker_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into());
    let mut name = format!("{host}-{}", std::process::id());
    name.truncate(200);
    name
}

struct Opts {
    queues: Vec<String>,
    handlers: HashMap<String, Arc<dyn Handler>>,
    fallbacks: HashMap<String, Arc<dyn Handler>>,
    concurrency: usize,
    claim_batch: usize,
    lease: Option<Duration>,
    heartbeat_interval: Option<Duration>,
    shutdown_grace: Duration,
    abort_timeout: Duration,
    job_timeout: Option<Duration>,
    worker_name: String,
    idle_wait: Duration,
    poll_min: Duration,
    poll_max: Duration,
    breaks: Breaks,
}

/// Deliberately broken variants for the tests' negative controls, chosen with the environment
/// variable `JQ_CLIENT_BREAK` (never set in production). Each names a bug a test must catch.
#[derive(Default, Clone, Copy)]
struct Breaks {
    /// `fail_on_shutdown`: a handler aborted by shutdown is failed instead of released — the
    /// bug seed A's ADR-007 records (a handler that rejects on abort went down the retry path;
    /// seen only in a container). tests/shutdown.rs must fail with it.
    fail_on_shutdown: bool,
    /// `no_heartbeat_on_shutdown`: heartbeats stop when shutdown starts (field case Q04), so
    /// jobs finishing within the grace period lose their leases. tests/shutdown.rs must fail.
    no_heartbeat_on_shutdown: bool,
    /// `no_reconnect`: the claim connection is never re-established once lost, so the worker
    /// stays up but claims nothing more. tests/reconnect.rs must fail with it.
    no_reconnect: bool,
}

impl Breaks {
    fn from_env() -> Breaks {
        let v = std::env::var("JQ_CLIENT_BREAK").unwrap_or_default();
        let b = Breaks {
            fail_on_shutdown: v == "fail_on_shutdown",
            no_heartbeat_on_shutdown: v == "no_heartbeat_on_shutdown",
            no_reconnect: v == "no_reconnect",
        };
        if !v.is_empty() {
            tracing::warn!(variant = %v, "JQ_CLIENT_BREAK is set: running a deliberately broken worker");
        }
        b
    }
}

impl Opts {
    fn heartbeat_every(&self, lease: Duration) -> Duration {
        let half = lease / 2;
        self.heartbeat_interval.unwrap_or(lease / 3).min(half).max(Duration::from_millis(50))
    }

    fn handler_for(&self, queue: &str, kind: &str) -> Option<Arc<dyn Handler>> {
        self.handlers.get(kind).or_else(|| self.fallbacks.get(queue)).cloned()
    }
}

/// Counts of what one [`Worker::run`] did, returned when it ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Jobs claimed.
    pub claimed: u64,
    /// Jobs completed (`jq.complete_many` / `jq.complete` returned them).
    pub completed: u64,
    /// Jobs failed with `jq.fail` (handler error, panic, timeout, missing handler).
    pub failed: u64,
    /// Jobs handed back with `jq.release` (shutdown), attempt not charged.
    pub released: u64,
    /// Jobs put back with `jq.snooze` (the handler returned [`crate::Snooze`]), attempt not
    /// charged.
    pub snoozed: u64,
    /// Jobs whose lease was lost (a heartbeat or the final call found the job no longer
    /// running under this worker's token); their outcome was not recorded by this worker.
    pub lost: u64,
}

#[derive(Default)]
struct Counters {
    claimed: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    released: AtomicU64,
    snoozed: AtomicU64,
    lost: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> RunStats {
        RunStats {
            claimed: self.claimed.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            released: self.released.load(Ordering::Relaxed),
            snoozed: self.snoozed.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
        }
    }
}

/// A job this worker holds a lease on, from claim until its outcome is reported.
struct Entry {
    token: Uuid,
    /// Local estimate of the lease end (send time of the call that set it + remaining lease).
    deadline: Instant,
    lease: Duration,
    next_heartbeat: Instant,
    cancel: CancellationToken,
    /// The handler returned (or was dropped); its outcome is on its way to the reporter.
    done: bool,
    /// Shutdown cancelled this job's handler after the grace period: its outcome is not a
    /// verdict on the job (ADR-007), so anything but a success becomes a release.
    aborting: bool,
    /// A heartbeat found the job no longer running under our token.
    lost: bool,
}

struct Shared {
    jobs: Mutex<HashMap<i64, Entry>>,
    counters: Counters,
    /// Shutdown has started (only read by the `no_heartbeat_on_shutdown` negative control).
    stopping: std::sync::atomic::AtomicBool,
    /// Wakes the reporter when jobs were claimed, so their first heartbeat is scheduled.
    claimed: tokio::sync::Notify,
}

enum Outcome {
    Done(Option<Value>),
    Failed(String),
    Release,
    Snooze(Duration),
}

struct Finished {
    id: i64,
    outcome: Outcome,
}

/// A worker: claims jobs from its queues and runs their handlers until shut down.
///
/// Build one with [`Worker::builder`]; run it with [`Worker::run`] (until SIGTERM or SIGINT)
/// or [`Worker::run_until`] (until a future of yours completes).
///
/// # Example
///
/// A complete program (it needs a running PostgreSQL with jq and a queue `thumbnails`):
///
/// ```no_run
/// use worker_client::{config_from_env, Job, Worker};
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     // DATABASE_URL, or PGHOST/PGPORT/PGUSER/PGDATABASE/PGPASSWORD as for psql.
///     let config = config_from_env(std::env::var("DATABASE_URL").ok().as_deref())?;
///     let worker = Worker::builder(config)
///         .queue("thumbnails")
///         .handler("thumbnails", |job: Job| async move {
///             let path = job.payload["path"].as_str().ok_or("payload has no path")?;
///             tokio::select! {
///                 _ = job.cancelled() => Err("cancelled".into()),
///                 _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {
///                     Ok(Some(serde_json::json!({ "thumbnail": format!("{path}.thumb") })))
///                 }
///             }
///         })
///         .build()?;
///     let stats = worker.run().await?;
///     println!("completed {} jobs", stats.completed);
///     Ok(())
/// }
/// ```
pub struct Worker {
    config: Config,
    opts: Arc<Opts>,
}

impl Worker {
    /// Starts configuring a worker that connects with `config` (see
    /// [`crate::config_from_env`]). The worker uses two connections: one for claims and one
    /// for heartbeats and outcomes.
    pub fn builder(config: Config) -> WorkerBuilder {
        WorkerBuilder {
            config,
            queues: Vec::new(),
            handlers: HashMap::new(),
            fallbacks: HashMap::new(),
            concurrency: 4,
            claim_batch: None,
            lease: None,
            heartbeat_interval: None,
            shutdown_grace: Duration::from_secs(30),
            abort_timeout: Duration::from_secs(2),
            job_timeout: None,
            worker_name: None,
            idle_wait: Duration::from_secs(5),
            poll_min: Duration::from_millis(50),
            poll_max: Duration::from_secs(1),
        }
    }

    /// Runs until SIGTERM or SIGINT (Ctrl-C), then shuts down gracefully (see
    /// [`Worker::run_until`]).
    ///
    /// # Errors
    ///
    /// As [`Worker::run_until`].
    pub async fn run(self) -> Result<RunStats, Error> {
        self.run_until(shutdown_signal()).await
    }

    /// Runs until `shutdown` completes, then shuts down gracefully:
    ///
    /// 1. no new claims (an idle long-poll claim is cancelled; jobs it returned anyway are
    ///    released);
    /// 2. running handlers get [`WorkerBuilder::shutdown_grace`] to finish, their leases still
    ///    heartbeated, their outcomes reported as usual;
    /// 3. then their cancellation tokens are cancelled and they get
    ///    [`WorkerBuilder::abort_timeout`] more; a handler still running is dropped;
    /// 4. every job not completed by then is released with `jq.release` (attempt not
    ///    charged) — never failed for the shutdown;
    /// 5. it returns once every claimed job has been reported.
    ///
    /// While running, a lost connection (PostgreSQL restarted, backend terminated) is
    /// re-established with jittered exponential backoff (100 ms to 5 s); leases cover the gap.
    /// An outcome that cannot be reported before its lease ends is given up: the reaper hands
    /// the job out again.
    ///
    /// # Errors
    ///
    /// Only at start: [`Error::Connect`] when the first connection fails,
    /// [`Error::NotInstalled`] when the database has no jq, [`Error::QueueNotFound`] for a
    /// queue that does not exist, [`Error::Db`] for another error of those checks.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use worker_client::{config_from_env, Job, Worker};
    ///
    /// # async fn example() -> Result<(), worker_client::Error> {
    /// let worker = Worker::builder(config_from_env(None)?)
    ///     .queue("reports")
    ///     .fallback("reports", |job: Job| async move { Ok(Some(job.payload.clone())) })
    ///     .build()?;
    /// // Stop after a minute (a service would pass its own shutdown future).
    /// let stats = worker.run_until(tokio::time::sleep(Duration::from_secs(60))).await?;
    /// assert_eq!(stats.claimed, stats.completed + stats.failed + stats.released + stats.snoozed + stats.lost);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_until<F>(self, shutdown: F) -> Result<RunStats, Error>
    where
        F: Future<Output = ()> + Send,
    {
        let opts = self.opts.clone();
        let mut claim_conn = if opts.breaks.no_reconnect {
            Conn::broken_once(self.config.clone())
        } else {
            Conn::new(self.config.clone())
        };
        // A server that is down or a database without jq fails the start at once, with one
        // line. But a connection lost during these checks (terminated, server restarting) is
        // retried like any later one: seen in the Q12 test, a `pg_terminate_backend` racing the
        // start made `jqctl work` exit.
        let mut attempt = 0u32;
        let has_wait = loop {
            match preflight(&mut claim_conn, &self.config, &opts.queues).await {
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
            long_poll = has_wait, "worker started"
        );

        let shared = Arc::new(Shared {
            jobs: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            stopping: std::sync::atomic::AtomicBool::new(false),
            claimed: tokio::sync::Notify::new(),
        });
        let (tx, rx) = mpsc::unbounded_channel::<Finished>();
        let stop_claiming = CancellationToken::new();
        let hard_stop = CancellationToken::new();
        let slots = Arc::new(Semaphore::new(opts.concurrency));

        let reporter = tokio::spawn(reporter(shared.clone(), opts.clone(), Conn::new(self.config.clone()), rx));
        let mut claimer = tokio::spawn(claim_loop(ClaimLoop {
            shared: shared.clone(),
            opts: opts.clone(),
            conn: claim_conn,
            has_wait,
            tx,
            slots: slots.clone(),
            stop: stop_claiming.clone(),
            hard_stop: hard_stop.clone(),
        }));

        tokio::pin!(shutdown);
        let claimer_done = tokio::select! {
            _ = &mut shutdown => false,
            r = &mut claimer => {
                if let Err(e) = r { tracing::error!(error = %e, "claim loop ended unexpectedly"); }
                true
            }
        };
        let running = shared.jobs.lock().unwrap().values().filter(|e| !e.done).count();
        tracing::info!(running, grace = ?opts.shutdown_grace, "shutting down: no new claims");
        stop_claiming.cancel();
        shared.stopping.store(true, Ordering::SeqCst);
        if !claimer_done {
            let _ = claimer.await;
        }

        // Grace: handlers finish on their own; the reporter keeps heartbeating.
        let all = opts.concurrency as u32;
        if tokio::time::timeout(opts.shutdown_grace, slots.acquire_many(all)).await.is_err() {
            let mut n = 0;
            for entry in shared.jobs.lock().unwrap().values_mut() {
                if !entry.done {
                    entry.aborting = true;
                    entry.cancel.cancel();
                    n += 1;
                }
            }
            tracing::info!(jobs = n, "grace period over: cancelling handlers; their jobs will be released");
            if tokio::time::timeout(opts.abort_timeout, slots.acquire_many(all)).await.is_err() {
                tracing::warn!("handlers still running after the abort timeout: dropping them");
                hard_stop.cancel();
            }
        }
        if let Err(e) = reporter.await {
            tracing::error!(error = %e, "reporter ended unexpectedly");
        }
        let stats = shared.counters.snapshot();
        tracing::info!(?stats, "worker stopped");
        Ok(stats)
    }
}

/// SIGTERM or SIGINT.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM received"),
                    _ = int.recv() => tracing::info!("SIGINT received"),
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Connects, checks that jq is installed and the queues exist (as this role sees them:
/// `jq.queue_stats` shows the queues it holds a jq.grant on), and tells whether `jq.claim`
/// has the long-poll `wait` parameter.
async fn preflight(conn: &mut Conn, config: &Config, queues: &[String]) -> Result<bool, Error> {
    let dbname = config.get_dbname().unwrap_or("?").to_string();
    let client = conn.get().await?;
    let installed = client
        .query_opt("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'jq'", &[])
        .await
        .map_err(|e| Error::Db(describe(&e)))?;
    if installed.is_none() {
        return Err(Error::NotInstalled(dbname));
    }
    let missing = client
        .query(
            "SELECT q FROM unnest($1::text[]) WITH ORDINALITY AS u(q, i) \
             WHERE NOT EXISTS (SELECT 1 FROM jq.queue_stats s WHERE s.queue = u.q) ORDER BY i",
            &[&queues],
        )
        .await
        .map_err(|e| Error::Db(describe(&e)))?;
    if let Some(row) = missing.first() {
        return Err(Error::QueueNotFound(row.get(0)));
    }
    let has_wait: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc \
             WHERE pronamespace = 'jq'::regnamespace AND proname = 'claim' AND 'wait' = ANY (proargnames))",
            &[],
        )
        .await
        .map_err(|e| Error::Db(describe(&e)))?
        .get(0);
    Ok(has_wait)
}

struct ClaimLoop {
    shared: Arc<Shared>,
    opts: Arc<Opts>,
    conn: Conn,
    has_wait: bool,
    tx: mpsc::UnboundedSender<Finished>,
    slots: Arc<Semaphore>,
    stop: CancellationToken,
    hard_stop: CancellationToken,
}

const CLAIM_COLUMNS: &str = "id, queue, kind, payload, attempt, max_attempts, lease_token, priority, \
     extract(epoch FROM lease_expires_at - clock_timestamp())::float8";

async fn claim_loop(mut cl: ClaimLoop) {
    let mut poll = Backoff::new(cl.opts.poll_min, cl.opts.poll_max);
    let mut reconnect = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let mut idle = false;
    let single = cl.opts.queues.len() == 1;
    let wait_arg = if cl.has_wait { ", wait => $5::float8 * interval '1 second'" } else { "" };
    let sql = if single {
        format!("SELECT {CLAIM_COLUMNS} FROM jq.claim($1::text, $2::text, $3::int4, $4::float8 * interval '1 second'{wait_arg})")
    } else {
        format!("SELECT {CLAIM_COLUMNS} FROM jq.claim($1::text[], $2::text, $3::int4, $4::float8 * interval '1 second'{wait_arg})")
    };
    let lease_secs: Option<f64> = cl.opts.lease.map(|l| l.as_secs_f64());

    loop {
        let first = tokio::select! {
            biased;
            _ = cl.stop.cancelled() => break,
            p = cl.slots.clone().acquire_owned() => p.expect("semaphore never closed"),
        };
        let mut permits = vec![first];
        while permits.len() < cl.opts.claim_batch {
            match cl.slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let n = permits.len() as i32;
        let wait: Option<f64> = (cl.has_wait && idle).then(|| cl.opts.idle_wait.as_secs_f64());
        let started = Instant::now();
        let result = match cl.conn.prepared(&sql).await {
            Err(QueryError::Connect(e)) => {
                drop(permits);
                tracing::warn!(error = %e, "cannot connect; retrying");
                if sleep_or_stop(reconnect.next_delay(), &cl.stop).await {
                    break;
                }
                continue;
            }
            Err(QueryError::Db(e)) => Err(e),
            Ok((client, statement)) => {
                let cancel = client.cancel_token();
                let queue_single: &str = &cl.opts.queues[0];
                let params: [&(dyn ToSql + Sync); 5] = [
                    if single { &queue_single } else { &cl.opts.queues },
                    &cl.opts.worker_name,
                    &n,
                    &lease_secs,
                    &wait,
                ];
                let params = if cl.has_wait { &params[..] } else { &params[..4] };
                let fut = client.query(&statement, params);
                tokio::pin!(fut);
                tokio::select! {
                    r = &mut fut => r,
                    _ = cl.stop.cancelled(), if wait.is_some() => {
                        // Stop waiting: cancel the statement; if it claimed jobs anyway they come
                        // back below and are released.
                        let _ = cancel.cancel_query(NoTls).await;
                        fut.await
                    }
                }
            }
        };
        // A suspect connection is dropped here (reconnect on the next claim).
        let result = cl.conn.settle(&sql, result);
        match result {
            Ok(rows) => {
                reconnect.reset();
                let got = rows.len();
                for row in rows {
                    let permit = permits.pop().expect("at most n rows");
                    start_job(&cl, row, permit);
                }
                if got > 0 {
                    cl.shared.claimed.notify_one();
                }
                drop(permits);
                if cl.has_wait {
                    idle = got < n as usize;
                    // A wait that returned at once with nothing must not spin.
                    if got == 0 && started.elapsed() < Duration::from_millis(10) && sleep_or_stop(cl.opts.poll_min, &cl.stop).await {
                        break;
                    }
                } else if got == 0 {
                    if sleep_or_stop(poll.next_delay(), &cl.stop).await {
                        break;
                    }
                } else {
                    poll.reset();
                }
            }
            Err(e) => {
                drop(permits);
                if cl.stop.is_cancelled() {
                    break;
                }
                if is_transient(&e) {
                    tracing::warn!(error = %describe(&e), "claim: connection lost; reconnecting");
                } else {
                    tracing::error!(error = %describe(&e), "claim failed; retrying");
                }
                if sleep_or_stop(reconnect.next_delay(), &cl.stop).await {
                    break;
                }
            }
        }
    }
}

/// Sleeps; true when `stop` fired first.
async fn sleep_or_stop(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = stop.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

fn start_job(cl: &ClaimLoop, row: Row, permit: OwnedSemaphorePermit) {
    let now = Instant::now();
    let id: i64 = row.get(0);
    let queue: String = row.get(1);
    let kind: String = row.get(2);
    let token: Uuid = row.get(6);
    let remaining: Option<f64> = row.get(8);
    let lease = Duration::from_secs_f64(remaining.unwrap_or(0.0).max(0.05));
    let cancel = CancellationToken::new();
    cl.shared.counters.claimed.fetch_add(1, Ordering::Relaxed);
    cl.shared.jobs.lock().unwrap().insert(
        id,
        Entry {
            token,
            deadline: now + lease,
            lease,
            next_heartbeat: now + cl.opts.heartbeat_every(lease),
            cancel: cancel.clone(),
            done: false,
            aborting: false,
            lost: false,
        },
    );
    if cl.stop.is_cancelled() {
        // Claimed while stopping: hand it straight back.
        cl.shared.jobs.lock().unwrap().get_mut(&id).expect("just inserted").done = true;
        let _ = cl.tx.send(Finished { id, outcome: Outcome::Release });
        return;
    }
    let Some(handler) = cl.opts.handler_for(&queue, &kind) else {
        cl.shared.jobs.lock().unwrap().get_mut(&id).expect("just inserted").done = true;
        let msg = format!("no handler for kind {kind:?} in queue {queue:?} on worker {}", cl.opts.worker_name);
        tracing::warn!(job = id, "{msg}");
        let _ = cl.tx.send(Finished { id, outcome: Outcome::Failed(msg) });
        return;
    };
    let job = Job {
        id,
        queue,
        kind,
        payload: row.get(3),
        attempt: row.get(4),
        max_attempts: row.get(5),
        priority: row.get(7),
        cancel: cancel.clone(),
    };
    tracing::debug!(job = id, kind = %job.kind, attempt = job.attempt, "claimed");
    let fut = handler.call(job);
    tokio::spawn(supervise(Supervise {
        id,
        shared: cl.shared.clone(),
        cancel,
        timeout: cl.opts.job_timeout,
        hard_stop: cl.hard_stop.clone(),
        tx: cl.tx.clone(),
        permit,
        break_fail_on_shutdown: cl.opts.breaks.fail_on_shutdown,
        fut,
    }));
}

struct Supervise {
    id: i64,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    timeout: Option<Duration>,
    hard_stop: CancellationToken,
    tx: mpsc::UnboundedSender<Finished>,
    permit: OwnedSemaphorePermit,
    break_fail_on_shutdown: bool,
    fut: crate::HandlerFuture,
}

enum Ended {
    Returned(Result<Option<Value>, BoxError>),
    Panicked(String),
    TimedOut(Duration),
    Dropped,
}

/// Runs one handler in a task of its own (so a panic is caught) under the job timeout, and
/// sends its outcome to the reporter.
async fn supervise(s: Supervise) {
    let mut inner = tokio::spawn(s.fut);
    let timeout = s.timeout;
    let timer = async move {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending::<()>().await,
        }
    };
    let ended = tokio::select! {
        r = &mut inner => match r {
            Ok(r) => Ended::Returned(r),
            Err(e) if e.is_panic() => Ended::Panicked(panic_message(e.into_panic())),
            Err(_) => Ended::Dropped,
        },
        _ = timer => {
            s.cancel.cancel();
            inner.abort();
            let _ = inner.await;
            Ended::TimedOut(timeout.unwrap_or_default())
        }
        _ = s.hard_stop.cancelled() => {
            inner.abort();
            let _ = inner.await;
            Ended::Dropped
        }
    };
    let aborting = {
        let mut jobs = s.shared.jobs.lock().unwrap();
        match jobs.get_mut(&s.id) {
            Some(e) => {
                e.done = true;
                e.aborting
            }
            None => false,
        }
    };
    let outcome = match ended {
        Ended::Returned(Ok(v)) => Outcome::Done(v),
        // ADR-007: a handler aborted by shutdown is not a failed handler, whatever it returns.
        _ if aborting && !s.break_fail_on_shutdown => Outcome::Release,
        Ended::Returned(Err(e)) => match e.downcast_ref::<crate::Snooze>() {
            Some(z) => Outcome::Snooze(z.0),
            None => Outcome::Failed(error_chain(&*e)),
        },
        Ended::Panicked(m) => Outcome::Failed(format!("handler panicked: {m}")),
        Ended::TimedOut(t) => Outcome::Failed(format!("timed out after {}", crate::format_duration(t))),
        Ended::Dropped => Outcome::Failed("handler aborted by shutdown".into()),
    };
    drop(s.permit);
    let _ = s.tx.send(Finished { id: s.id, outcome });
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".into()
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// PostgreSQL text cannot hold NUL (field case Q13): an error message must never be the
/// reason its failure cannot be recorded.
fn clean_text(s: &str) -> String {
    s.replace('\0', "\\u0000")
}

// ---------------------------------------------------------------------------------------
// Reporter: the only task that sends heartbeats and outcomes, on a connection of its own.

async fn reporter(shared: Arc<Shared>, opts: Arc<Opts>, mut conn: Conn, mut rx: mpsc::UnboundedReceiver<Finished>) {
    // Never sleep longer than this, whatever the schedule says (a safety net: new jobs also
    // wake the reporter through `shared.claimed`).
    let far = Duration::from_secs(1);
    loop {
        let next_hb = {
            let jobs = shared.jobs.lock().unwrap();
            jobs.values().filter(|e| !e.lost).map(|e| e.next_heartbeat).min()
        };
        let wake = next_hb.unwrap_or_else(|| Instant::now() + far).min(Instant::now() + far);
        tokio::select! {
            biased;
            msg = rx.recv() => match msg {
                Some(m) => {
                    let mut batch = vec![m];
                    while batch.len() < REPORT_BATCH {
                        match rx.try_recv() {
                            Ok(m) => batch.push(m),
                            Err(_) => break,
                        }
                    }
                    report(&shared, &mut conn, batch).await;
                }
                None => break,
            },
            _ = shared.claimed.notified() => {}
            _ = tokio::time::sleep_until(wake.into()) => heartbeat(&shared, &opts, &mut conn).await,
        }
    }
    // Every sender is gone, so every job's outcome has been reported.
    let left = shared.jobs.lock().unwrap().len();
    if left > 0 {
        tracing::error!(jobs = left, "jobs left without an outcome; their leases will expire");
    }
}

/// Heartbeats every job due within the next 250 ms, in one statement.
async fn heartbeat(shared: &Shared, opts: &Opts, conn: &mut Conn) {
    if opts.breaks.no_heartbeat_on_shutdown && shared.stopping.load(Ordering::SeqCst) {
        // Negative control (Q04): stop heartbeating at shutdown; push the due times out so
        // the reporter does not spin.
        for e in shared.jobs.lock().unwrap().values_mut() {
            e.next_heartbeat = Instant::now() + Duration::from_secs(3600);
        }
        return;
    }
    let horizon = Instant::now() + Duration::from_millis(250);
    let (ids, tokens): (Vec<i64>, Vec<Uuid>) = {
        let jobs = shared.jobs.lock().unwrap();
        let mut due: Vec<(i64, Uuid)> =
            jobs.iter().filter(|(_, e)| !e.lost && e.next_heartbeat <= horizon).map(|(id, e)| (*id, e.token)).collect();
        due.sort_unstable();
        due.into_iter().unzip()
    };
    if ids.is_empty() {
        return;
    }
    let extend: Option<f64> = opts.lease.map(|l| l.as_secs_f64());
    let sent = Instant::now();
    let result = conn
        .query(
            "SELECT u.id, h.cancel_requested, extract(epoch FROM h.lease_expires_at - clock_timestamp())::float8 \
             FROM unnest($1::int8[], $2::uuid[]) AS u(id, token) \
             CROSS JOIN LATERAL jq.heartbeat(u.id, u.token, $3::float8 * interval '1 second') AS h",
            &[&ids, &tokens, &extend],
        )
        .await
        .map_err(|e| match e {
            QueryError::Connect(e) => e.to_string(),
            QueryError::Db(e) => describe(&e),
        });
    let mut jobs = shared.jobs.lock().unwrap();
    match result {
        Ok(rows) => {
            for row in rows {
                let id: i64 = row.get(0);
                let cancel_requested: Option<bool> = row.get(1);
                let remaining: Option<f64> = row.get(2);
                let Some(e) = jobs.get_mut(&id) else { continue };
                match remaining {
                    None => {
                        tracing::warn!(job = id, "lease lost (job no longer running under our token): cancelling its handler");
                        e.lost = true;
                        e.cancel.cancel();
                    }
                    Some(r) => {
                        let lease = Duration::from_secs_f64(r.max(0.05));
                        e.lease = lease;
                        e.deadline = sent + lease;
                        e.next_heartbeat = sent + opts.heartbeat_every(lease);
                        if cancel_requested == Some(true) && !e.cancel.is_cancelled() {
                            tracing::info!(job = id, "cancel requested: cancelling its handler");
                            e.cancel.cancel();
                        }
                    }
                }
            }
        }
        Err(msg) => {
            tracing::warn!(error = %msg, jobs = ids.len(), "heartbeat failed; retrying in 1 s");
            let retry = Instant::now() + Duration::from_secs(1);
            for id in &ids {
                if let Some(e) = jobs.get_mut(id) {
                    // Retry soon, but never wait past half of what is left of the lease.
                    e.next_heartbeat = retry.min(Instant::now() + e.deadline.saturating_duration_since(Instant::now()) / 2);
                    if e.next_heartbeat < Instant::now() + Duration::from_millis(100) {
                        e.next_heartbeat = Instant::now() + Duration::from_millis(100);
                    }
                }
            }
        }
    }
}

/// What a report call ended with.
enum CallErr {
    /// The lease deadline passed while the server could not be reached.
    GaveUp(String),
    /// The server refused the call itself (not a connection problem).
    Refused(String),
}

/// Runs one call, reconnecting and retrying on connection errors until `deadline`.
async fn call_retrying(
    conn: &mut Conn,
    deadline: Instant,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, CallErr> {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let err = match conn.query(sql, params).await {
            Ok(rows) => return Ok(rows),
            // conn.query dropped the suspect connection: retry on a new one
            Err(QueryError::Db(e)) if is_transient(&e) => describe(&e),
            Err(QueryError::Db(e)) => return Err(CallErr::Refused(describe(&e))),
            Err(QueryError::Connect(e)) => e.to_string(),
        };
        let delay = backoff.next_delay();
        if Instant::now() + delay >= deadline {
            return Err(CallErr::GaveUp(err));
        }
        tracing::warn!(error = %err, "report: connection problem; retrying");
        tokio::time::sleep(delay).await;
    }
}

struct Pending {
    id: i64,
    token: Uuid,
    deadline: Instant,
}

async fn report(shared: &Shared, conn: &mut Conn, batch: Vec<Finished>) {
    let mut completes: Vec<(Pending, Option<Value>)> = Vec::new();
    let mut others: Vec<(Pending, Outcome)> = Vec::new();
    {
        let mut jobs = shared.jobs.lock().unwrap();
        for f in batch {
            let Some(e) = jobs.get(&f.id) else { continue };
            if e.lost {
                jobs.remove(&f.id);
                shared.counters.lost.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let p = Pending { id: f.id, token: e.token, deadline: e.deadline };
            match f.outcome {
                Outcome::Done(v) => completes.push((p, v)),
                o => others.push((p, o)),
            }
        }
    }

    if !completes.is_empty() {
        complete_batch(shared, conn, completes).await;
    }
    for (p, outcome) in others {
        match outcome {
            Outcome::Failed(msg) => fail_one(shared, conn, &p, &msg).await,
            Outcome::Release => {
                let r = call_retrying(conn, p.deadline, "SELECT jq.release($1, $2)", &[&p.id, &p.token]).await;
                finish(shared, &p, r, |rows| rows.first().is_some_and(|r| r.get::<_, Option<bool>>(0) == Some(true)), &shared.counters.released, "release");
            }
            Outcome::Snooze(d) => {
                let delay = format!("{} milliseconds", d.as_millis());
                let r = call_retrying(conn, p.deadline, "SELECT jq.snooze($1, $2, $3::text::interval)", &[&p.id, &p.token, &delay]).await;
                finish(shared, &p, r, |rows| rows.first().is_some_and(|r| r.get::<_, Option<bool>>(0) == Some(true)), &shared.counters.snoozed, "snooze");
            }
            Outcome::Done(_) => unreachable!("completes are batched"),
        }
    }
}

async fn fail_one(shared: &Shared, conn: &mut Conn, p: &Pending, msg: &str) {
    let msg = clean_text(msg);
    let r = call_retrying(conn, p.deadline, "SELECT jq.fail($1, $2, $3)::text", &[&p.id, &p.token, &msg]).await;
    finish(shared, p, r, |rows| rows.first().is_some_and(|r| r.get::<_, Option<String>>(0).is_some()), &shared.counters.failed, "fail");
}

/// Records the result of a fenced call: `ok` reads whether it acted; otherwise the job was no
/// longer ours (lost).
fn finish(
    shared: &Shared,
    p: &Pending,
    r: Result<Vec<Row>, CallErr>,
    ok: impl Fn(&[Row]) -> bool,
    counter: &AtomicU64,
    what: &str,
) {
    shared.jobs.lock().unwrap().remove(&p.id);
    match r {
        Ok(rows) if ok(&rows) => {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        Ok(_) => {
            tracing::warn!(job = p.id, "{what}: the job was no longer running under our lease");
            shared.counters.lost.fetch_add(1, Ordering::Relaxed);
        }
        Err(CallErr::GaveUp(e)) => {
            tracing::warn!(job = p.id, error = %e, "{what}: gave up at the end of the lease; the reaper takes the job back");
            shared.counters.lost.fetch_add(1, Ordering::Relaxed);
        }
        Err(CallErr::Refused(e)) => {
            tracing::error!(job = p.id, error = %e, "{what} refused; the job's lease will expire");
            shared.counters.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Completes one job with `jq.complete`; a result the server refuses fails the job instead.
async fn complete_one(shared: &Shared, conn: &mut Conn, p: Pending, v: Option<Value>) {
    let r = call_retrying(conn, p.deadline, "SELECT jq.complete($1, $2, $3::jsonb)", &[&p.id, &p.token, &v]).await;
    match r {
        Err(CallErr::Refused(e)) => {
            fail_one(shared, conn, &p, &format!("the handler succeeded but its result could not be stored: {e}")).await
        }
        r => finish(shared, &p, r, |rows| rows.first().is_some_and(|r| r.get::<_, Option<bool>>(0) == Some(true)), &shared.counters.completed, "complete"),
    }
}

/// Completes the jobs whose handlers succeeded: one job with `jq.complete`, more in one
/// `jq.complete_many` (for a single job `jq.complete` is the plainer call, no arrays to unnest
/// and no sort; with one job it costs the server about the same as `complete_many` since
/// `complete_many` keeps one generic plan, docs/BENCHMARKS.md).
async fn complete_batch(shared: &Shared, conn: &mut Conn, mut completes: Vec<(Pending, Option<Value>)>) {
    if completes.len() == 1 {
        let (p, v) = completes.pop().expect("one");
        return complete_one(shared, conn, p, v).await;
    }
    let ids: Vec<i64> = completes.iter().map(|(p, _)| p.id).collect();
    let tokens: Vec<Uuid> = completes.iter().map(|(p, _)| p.token).collect();
    let results: Vec<Option<Value>> = completes.iter().map(|(_, v)| v.clone()).collect();
    let deadline = completes.iter().map(|(p, _)| p.deadline).max().expect("non-empty");
    let r = call_retrying(
        conn,
        deadline,
        "SELECT id FROM jq.complete_many($1::int8[], $2::uuid[], $3::jsonb[]) AS id",
        &[&ids, &tokens, &results],
    )
    .await;
    match r {
        Ok(rows) => {
            let done: std::collections::HashSet<i64> = rows.iter().map(|r| r.get(0)).collect();
            let mut jobs = shared.jobs.lock().unwrap();
            for (p, _) in &completes {
                jobs.remove(&p.id);
                if done.contains(&p.id) {
                    shared.counters.completed.fetch_add(1, Ordering::Relaxed);
                } else {
                    tracing::warn!(job = p.id, "complete: the job was no longer running under our lease");
                    shared.counters.lost.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Err(CallErr::Refused(e)) => {
            // One bad result (e.g. a JSON string jsonb refuses) must not strand the others:
            // complete one by one, and fail the job whose result cannot be stored.
            tracing::warn!(error = %e, "complete_many refused; completing one by one");
            for (p, v) in completes {
                complete_one(shared, conn, p, v).await;
            }
        }
        Err(CallErr::GaveUp(e)) => {
            let mut jobs = shared.jobs.lock().unwrap();
            for (p, _) in &completes {
                jobs.remove(&p.id);
                shared.counters.lost.fetch_add(1, Ordering::Relaxed);
            }
            tracing::warn!(jobs = completes.len(), error = %e, "complete: gave up at the end of the leases; the jobs will run again");
        }
    }
}
