//! What the worker's tasks share: the jobs it holds leases on, its counters, and the outcomes
//! on their way from the handlers to the reporter.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Counts of what one [`crate::Worker::run`] did, returned when it ends.
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
    /// running under this worker's token); their outcome was not recorded by this worker —
    /// or was, by an earlier attempt of the same call whose answer never arrived (a call
    /// timed out and retried, docs/worker-client.md "Timeouts": the repeat finds the job
    /// already ended and cannot tell by whom).
    pub lost: u64,
}

/// Running totals behind [`RunStats`].
#[derive(Default)]
pub(super) struct Counters {
    pub(super) claimed: AtomicU64,
    pub(super) completed: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) released: AtomicU64,
    pub(super) snoozed: AtomicU64,
    pub(super) lost: AtomicU64,
}

impl Counters {
    /// The totals now.
    pub(super) fn snapshot(&self) -> RunStats {
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
pub(super) struct Entry {
    pub(super) token: Uuid,
    /// Local estimate of the lease end (send time of the call that set it + remaining lease).
    pub(super) deadline: Instant,
    pub(super) lease: Duration,
    pub(super) next_heartbeat: Instant,
    pub(super) cancel: CancellationToken,
    /// The handler returned (or was dropped); its outcome is on its way to the reporter.
    pub(super) done: bool,
    /// Shutdown cancelled this job's handler after the grace period: its outcome is not a
    /// verdict on the job, so anything but a success becomes a release.
    pub(super) aborting: bool,
    /// A heartbeat found the job no longer running under our token.
    pub(super) lost: bool,
    /// The reporter is sending this job's outcome now: heartbeats leave it alone, so that a
    /// heartbeat and a report never lock the same job rows at once.
    pub(super) reporting: bool,
    /// The job's place among the jobs held by this worker (`None` under the negative control
    /// `starving_reporter`): freed when the entry is removed, i.e. once its outcome has been
    /// reported, so the claim loop cannot run ahead of the reporter (claim_loop.rs, `take_room`).
    pub(super) _room: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Progress the handler reported, sent with the next heartbeat (src/progress.rs).
    pub(super) progress: std::sync::Arc<crate::progress::ProgressSlot>,
}

/// State shared by the claim loop, the supervisors, the reporter and [`super::Worker::run_until`].
pub(super) struct Shared {
    pub(super) jobs: Mutex<HashMap<i64, Entry>>,
    pub(super) counters: Counters,
    /// Shutdown has started (only read by the `no_heartbeat_on_shutdown` negative control).
    pub(super) stopping: AtomicBool,
    /// Wakes the heartbeat task when jobs were claimed, so their first heartbeat is scheduled.
    pub(super) claimed: tokio::sync::Notify,
    /// Wakes the heartbeat task for a progress report to be sent at once.
    pub(super) progress_now: std::sync::Arc<tokio::sync::Notify>,
}

/// What a job's run ended with, for the reporter to record.
pub(super) enum Outcome {
    /// Complete it, with this result.
    Done(Option<Value>),
    /// Fail it with this message.
    Failed(String),
    /// Hand it back (attempt not charged).
    Release,
    /// Put it back for this long (attempt not charged).
    Snooze(Duration),
}

/// A job's outcome, sent to the reporter.
pub(super) struct Finished {
    pub(super) id: i64,
    pub(super) outcome: Outcome,
}

impl Shared {
    /// No job yet, nothing counted.
    pub(super) fn new() -> Shared {
        Shared {
            jobs: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            stopping: AtomicBool::new(false),
            claimed: tokio::sync::Notify::new(),
            progress_now: std::sync::Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Counts one job whose lease was lost.
    pub(super) fn count_lost(&self) {
        self.counters.lost.fetch_add(1, Ordering::Relaxed);
    }
}
