//! The worker: [`Worker`] and its run, from start-up checks to shutdown. Each part has a file:
//!
//! | file | part |
//! |---|---|
//! | builder.rs | [`WorkerBuilder`]: settings and their checks |
//! | options.rs | the checked settings the tasks read |
//! | state.rs | shared state: leased jobs, counters, outcomes, [`RunStats`] |
//! | startup.rs | start-up checks (jq installed, queues visible, long poll available) |
//! | claim_loop.rs | the claim loop: claims into free slots and starts handlers |
//! | supervise.rs | one handler's run: panic, timeout and abort turned into an outcome |
//! | reporter.rs | the reporter task: outcomes (complete, fail, release, snooze), batched |
//! | heartbeat.rs | the heartbeat task: leases of the jobs held, on a connection of its own |
//! | fleet.rs | the worker's entry in jq.fleet: register, beat, deregister (on the reporter's connection) |
//! | shutdown.rs | signals, grace period and abort |
//! | breaks.rs | negative-control switches (feature `test-breaks` only) |
//!
//! docs/worker-client.md describes the design.

mod breaks;
mod builder;
mod claim_loop;
mod fleet;
mod heartbeat;
mod options;
mod reporter;
mod shutdown;
mod startup;
mod state;
mod supervise;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};
use crate::ConnConfig;
use tokio_util::sync::CancellationToken;

pub use builder::WorkerBuilder;
pub use state::RunStats;

use crate::Error;
use claim_loop::{claim_loop, ClaimLoop};
use options::Opts;
use state::{Finished, Shared};

/// Most outcomes waiting to be reported before the claim loop pauses: a worker holds at most
/// its concurrency plus this many jobs (claim_loop.rs, `take_room`). One full report batch:
/// enough that claims rarely wait on a healthy reporter, few enough that the heartbeat of all
/// of them stays one small statement.
pub(crate) const MAX_UNREPORTED: usize = reporter::REPORT_BATCH;

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
    config: ConnConfig,
    opts: Arc<Opts>,
}

impl Worker {
    /// Starts configuring a worker that connects with `config` (see
    /// [`crate::config_from_env`]). The worker uses three connections: one for claims, one
    /// for outcomes and one for heartbeats.
    pub fn builder(config: impl Into<ConnConfig>) -> WorkerBuilder {
        WorkerBuilder::new(config.into())
    }

    /// Runs until SIGTERM or SIGINT (Ctrl-C), then shuts down gracefully (see
    /// [`Worker::run_until`]).
    ///
    /// # Errors
    ///
    /// As [`Worker::run_until`].
    pub async fn run(self) -> Result<RunStats, Error> {
        self.run_until(shutdown::signal()).await
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
    /// While running, a lost connection (PostgreSQL restarted, backend terminated, or a call
    /// with no answer within its bound, see [`WorkerBuilder::call_timeout`]) is re-established
    /// with jittered exponential backoff (100 ms to 5 s); leases cover the gap.
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
        let (claim_conn, has_wait, has_timeout) = startup::check(&self.config, &opts).await?;
        let shared = Arc::new(Shared::new());
        let (tx, rx) = mpsc::unbounded_channel::<Finished>();
        let stop_claiming = CancellationToken::new();
        let hard_stop = CancellationToken::new();
        let slots = Arc::new(Semaphore::new(opts.concurrency));
        let starving = opts.breaks.starving_reporter();
        let room = (!starving).then(|| Arc::new(Semaphore::new(opts.concurrency + MAX_UNREPORTED)));

        let reporter = tokio::spawn(reporter::run(
            shared.clone(),
            opts.clone(),
            opts.report_conn(&self.config),
            rx,
        ));
        let beats_done = CancellationToken::new();
        let beats = (!starving).then(|| {
            let conn = opts.report_conn(&self.config);
            tokio::spawn(heartbeat::run(shared.clone(), opts.clone(), conn, beats_done.clone()))
        });
        let mut claimer = tokio::spawn(claim_loop(ClaimLoop {
            shared: shared.clone(),
            opts: opts.clone(),
            conn: claim_conn,
            has_wait,
            has_timeout,
            tx,
            slots: slots.clone(),
            room,
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
        shutdown::finish_handlers(&shared, &opts, &slots, &hard_stop).await;
        if let Err(e) = reporter.await {
            tracing::error!(error = %e, "reporter ended unexpectedly");
        }
        // Every outcome is reported: no lease is left to renew.
        beats_done.cancel();
        if let Some(beats) = beats {
            if let Err(e) = beats.await {
                tracing::error!(error = %e, "heartbeat task ended unexpectedly");
            }
        }
        let stats = shared.counters.snapshot();
        tracing::info!(?stats, "worker stopped");
        Ok(stats)
    }
}
