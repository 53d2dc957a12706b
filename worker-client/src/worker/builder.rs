//! [`WorkerBuilder`]: the settings of a [`Worker`], checked by [`WorkerBuilder::build`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::ConnConfig;

use super::breaks::Breaks;
use super::options::{default_worker_name, Opts};
use super::Worker;
use crate::{Error, Handler, StatementMode};

/// Largest `n` jq.claim accepts (`jq.max_claim_batch()`).
const MAX_CLAIM_BATCH: usize = 1000;

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
    config: ConnConfig,
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
    statement_mode: Option<StatementMode>,
    call_timeout: Option<Duration>,
    register: Option<bool>,
}

impl WorkerBuilder {
    /// The defaults: concurrency 4, grace 30 s, abort timeout 2 s, idle wait 5 s, idle poll
    /// 50 ms to 1 s; no queue, no handler.
    pub(super) fn new(config: ConnConfig) -> WorkerBuilder {
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
            statement_mode: None,
            call_timeout: None,
            register: None,
        }
    }

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

    /// The worker's name, for operators: passed to `jq.claim` (the `worker` column of its jobs)
    /// and registered in `jq.fleet` (default `HOSTNAME:PID`).
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

    /// How the worker's connections send their statements (default: `JQ_STATEMENT_MODE` when
    /// set, else [`StatementMode::Prepared`]). Use [`StatementMode::Unprepared`] behind a
    /// transaction-mode pooler without prepared-statement support (PgBouncer before 1.21, or
    /// without `max_prepared_statements`); a prepared connection falls back to it by itself
    /// when the server forgets its statements (see [`StatementMode`]).
    pub fn statement_mode(mut self, mode: StatementMode) -> Self {
        self.statement_mode = Some(mode);
        self
    }

    /// How long one database call may go without an answer (default: `JQ_CALL_TIMEOUT` when
    /// set, else [`crate::DEFAULT_CALL_TIMEOUT`], 5 s). A long-poll claim gets its wait on top;
    /// a heartbeat gets at most half of what is left of the earliest lease it renews (at least
    /// 500 ms). A call with no answer by then — a server or path that stopped answering without
    /// closing the connection (a frozen proxy, a dropped NAT entry, a paused VM) — drops its
    /// connection, which is reconnected with backoff, and the call is retried on the new one
    /// (an outcome until its lease ends; it is fenced by the lease token, so one that ran after
    /// all changes nothing the second time). Too short, a slow but healthy server gets its
    /// calls cut and retried; see docs/worker-client.md, "Timeouts".
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// Whether the worker registers in jq's fleet registry (`jq.fleet`, `jqctl workers`):
    /// default on, unless `JQ_REGISTER` is `0`, `false`, `no` or `off`. A registered worker
    /// beats every `jq.worker_beat_interval()` (5 s) on its outcome connection with the jobs it
    /// holds and its resident memory, and deregisters when it shuts down gracefully. A failing
    /// registry call is logged and retried at the next beat; it never stops job processing.
    pub fn register(mut self, on: bool) -> Self {
        self.register = Some(on);
        self
    }

    /// Checks the settings and returns the worker.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when there is no queue or no handler, the concurrency or the claim
    /// batch is 0, the batch is over 1000, a lease or interval is zero, the call timeout is
    /// under 100 ms, or a setting left to the environment is invalid there
    /// (`JQ_STATEMENT_MODE`, `JQ_CALL_TIMEOUT`, `JQ_REGISTER`).
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
        let statement_mode = match self.statement_mode {
            Some(m) => m,
            None => StatementMode::from_env()?.unwrap_or_default(),
        };
        let call_timeout = match self.call_timeout {
            Some(t) => t,
            None => call_timeout_from_env()?.unwrap_or(crate::DEFAULT_CALL_TIMEOUT),
        };
        if call_timeout < Duration::from_millis(100) {
            return Err(Error::Config("call timeout must be at least 100 ms".into()));
        }
        let register = match self.register {
            Some(on) => on,
            None => register_from_env()?.unwrap_or(true),
        };
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
                statement_mode,
                call_timeout,
                register,
                breaks: Breaks::from_env(),
            }),
        })
    }
}

/// The duration in `JQ_CALL_TIMEOUT`, `None` when it is unset or empty.
fn call_timeout_from_env() -> Result<Option<Duration>, Error> {
    match std::env::var(crate::CALL_TIMEOUT_ENV) {
        Ok(v) if !v.trim().is_empty() => crate::parse_duration(&v)
            .map(Some)
            .map_err(|e| Error::Config(format!("{}: {e}", crate::CALL_TIMEOUT_ENV))),
        _ => Ok(None),
    }
}

/// `JQ_REGISTER` as a boolean, `None` when it is unset or empty.
fn register_from_env() -> Result<Option<bool>, Error> {
    match std::env::var(crate::REGISTER_ENV) {
        Ok(v) if !v.trim().is_empty() => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Some(true)),
            "0" | "false" | "no" | "off" => Ok(Some(false)),
            _ => Err(Error::Config(format!("{}: expected 0 or 1, got {v:?}", crate::REGISTER_ENV))),
        },
        _ => Ok(None),
    }
}
