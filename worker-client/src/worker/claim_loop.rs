//! The claim loop: waits for free handler slots, and for room among the jobs the worker holds
//! (backpressure: outcomes not yet reported hold theirs), claims up to that many jobs with one
//! `jq.claim`, and starts a supervised handler per job. Idle, it long-polls (`wait`) when jq
//! has it, else polls with backoff; a lost connection is re-established with backoff.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::options::Opts;
use super::state::{Entry, Finished, Outcome, Shared};
use super::supervise::{job_limit, supervise, Supervise};
use crate::api::{self, Claimed};
use crate::conn::{describe, is_transient, Backoff, Conn, QueryError};
use crate::Job;

/// What the claim loop owns: its connection, the slots of the handlers, and the senders and
/// tokens it hands to each job's supervisor.
pub(super) struct ClaimLoop {
    pub(super) shared: Arc<Shared>,
    pub(super) opts: Arc<Opts>,
    pub(super) conn: Conn,
    /// `jq.claim` has the long-poll `wait` parameter.
    pub(super) has_wait: bool,
    /// `jq.claim`'s rows carry the attempt's wall timeout (jq with job kinds).
    pub(super) has_timeout: bool,
    pub(super) tx: mpsc::UnboundedSender<Finished>,
    /// One permit per handler slot (the concurrency).
    pub(super) slots: Arc<Semaphore>,
    /// One permit per job held, from claim until its outcome is reported: the concurrency
    /// plus [`super::MAX_UNREPORTED`] (`None` under the negative control `starving_reporter`).
    pub(super) room: Option<Arc<Semaphore>>,
    /// Stop claiming (shutdown has started).
    pub(super) stop: CancellationToken,
    /// Drop the handlers still running (the abort timeout passed).
    pub(super) hard_stop: CancellationToken,
}

/// The loop's delays between claims.
struct Pace {
    /// Idle polling when jq.claim cannot wait.
    poll: Backoff,
    /// After a failed claim or connection.
    reconnect: Backoff,
    /// The last claim did not fill its slots: the next one may long-poll.
    idle: bool,
}

impl Pace {
    /// The pause after a claim that returned `got` of `n` jobs, if any.
    fn after_claim(&mut self, cl: &ClaimLoop, got: usize, n: usize, started: Instant) -> Option<Duration> {
        if cl.has_wait {
            self.idle = got < n;
            // A wait that returned at once with nothing must not spin.
            (got == 0 && started.elapsed() < Duration::from_millis(10)).then_some(cl.opts.poll_min)
        } else if got == 0 {
            Some(self.poll.next_delay())
        } else {
            self.poll.reset();
            None
        }
    }
}

/// Runs until `cl.stop` fires. Jobs claimed while stopping are released at once.
pub(super) async fn claim_loop(mut cl: ClaimLoop) {
    let call = api::ClaimCall::new(cl.opts.queues.len() > 1, cl.has_wait, cl.has_timeout);
    let lease: Option<f64> = cl.opts.lease.map(|l| l.as_secs_f64());
    let mut pace = Pace {
        poll: Backoff::new(cl.opts.poll_min, cl.opts.poll_max),
        reconnect: Backoff::new(Duration::from_millis(100), Duration::from_secs(5)),
        idle: false,
    };
    loop {
        let Some(permits) = take_slots(&cl).await else { break };
        let n = permits.len();
        let Some(room) = take_room(&cl, n).await else { break };
        let wait: Option<f64> = (cl.has_wait && pace.idle).then(|| cl.opts.idle_wait.as_secs_f64());
        let started = Instant::now();
        let (queues, worker) = (&cl.opts.queues, &cl.opts.worker_name);
        // A cancelled wait returns the jobs it claimed anyway: they are released below.
        let result = call.run(&mut cl.conn, queues, worker, n as i32, lease, wait, &cl.stop).await;
        let pause = match result {
            Ok(jobs) => {
                pace.reconnect.reset();
                let got = jobs.len();
                start_jobs(&cl, jobs, permits, room);
                pace.after_claim(&cl, got, n, started)
            }
            Err(e) => {
                drop(permits);
                if matches!(e, QueryError::Db(_)) && cl.stop.is_cancelled() {
                    break;
                }
                log_claim_error(&e);
                Some(pace.reconnect.next_delay())
            }
        };
        if let Some(d) = pause {
            if sleep_or_stop(d, &cl.stop).await {
                break;
            }
        }
    }
}

/// Waits for one free slot, then takes as many more as are free, up to the claim batch;
/// `None` when `cl.stop` fires first.
async fn take_slots(cl: &ClaimLoop) -> Option<Vec<OwnedSemaphorePermit>> {
    let first = tokio::select! {
        biased;
        _ = cl.stop.cancelled() => return None,
        p = cl.slots.clone().acquire_owned() => p.expect("semaphore never closed"),
    };
    let mut permits = vec![first];
    while permits.len() < cl.opts.claim_batch {
        match cl.slots.clone().try_acquire_owned() {
            Ok(p) => permits.push(p),
            Err(_) => break,
        }
    }
    Some(permits)
}

/// Waits until `n` more jobs may be held (outcomes waiting to be reported hold their room, so
/// claims pause while more than [`super::MAX_UNREPORTED`] wait); `None` when `cl.stop` fires
/// first. Without a room semaphore (the control `starving_reporter`), never waits.
/// Checked by tests/stress.rs.
async fn take_room(cl: &ClaimLoop, n: usize) -> Option<Vec<Option<OwnedSemaphorePermit>>> {
    let Some(room) = &cl.room else { return Some((0..n).map(|_| None).collect()) };
    let mut many = tokio::select! {
        biased;
        _ = cl.stop.cancelled() => return None,
        p = room.clone().acquire_many_owned(n as u32) => p.expect("semaphore never closed"),
    };
    let mut one_each = Vec::with_capacity(n);
    while many.num_permits() > 1 {
        one_each.push(many.split(1));
    }
    one_each.push(Some(many));
    Some(one_each)
}

fn log_claim_error(e: &QueryError) {
    match e {
        QueryError::Connect(e) => tracing::warn!(error = %e, "cannot connect; retrying"),
        QueryError::Db(e) if is_transient(e) => {
            tracing::warn!(error = %describe(e), "claim: connection lost; reconnecting")
        }
        QueryError::Db(e) => tracing::error!(error = %describe(e), "claim failed; retrying"),
        QueryError::TimedOut(_) => tracing::warn!(error = %e, "claim: no answer; reconnecting"),
    }
}

/// Starts each claimed job on a slot and a room of its own; unused ones are freed.
fn start_jobs(
    cl: &ClaimLoop,
    jobs: Vec<Claimed>,
    mut permits: Vec<OwnedSemaphorePermit>,
    mut room: Vec<Option<OwnedSemaphorePermit>>,
) {
    let got = jobs.len();
    for job in jobs {
        let permit = permits.pop().expect("at most n rows");
        start_job(cl, job, permit, room.pop().expect("as many as slots"));
    }
    if got > 0 {
        cl.shared.claimed.notify_one();
    }
}

/// Sleeps; true when `stop` fired first.
async fn sleep_or_stop(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = stop.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

/// Records the lease of one claimed job, then releases it (claimed while stopping), fails it
/// (no handler for its kind) or spawns its supervised handler.
fn start_job(cl: &ClaimLoop, c: Claimed, permit: OwnedSemaphorePermit, room: Option<OwnedSemaphorePermit>) {
    let now = Instant::now();
    let id = c.id;
    let lease = Duration::from_secs_f64(c.lease_left.unwrap_or(0.0).max(0.05));
    let cancel = CancellationToken::new();
    let report = std::sync::Arc::new(crate::progress::ProgressSlot::new(cl.shared.progress_now.clone()));
    cl.shared.counters.claimed.fetch_add(1, Ordering::Relaxed);
    cl.shared.jobs.lock().unwrap().insert(
        id,
        Entry {
            token: c.token,
            deadline: now + lease,
            lease,
            next_heartbeat: now + cl.opts.heartbeat_every(lease),
            cancel: cancel.clone(),
            done: false,
            aborting: false,
            lost: false,
            reporting: false,
            _room: room,
            progress: report.clone(),
        },
    );
    let handler = cl.opts.handler_for(&c.queue, &c.kind);
    let early = if cl.stop.is_cancelled() {
        // Claimed while stopping: hand it straight back.
        Some(Outcome::Release)
    } else if handler.is_none() {
        let msg = format!("no handler for kind {:?} in queue {:?} on worker {}", c.kind, c.queue, cl.opts.worker_name);
        tracing::warn!(job = id, "{msg}");
        Some(Outcome::Failed(msg))
    } else {
        None
    };
    if let Some(outcome) = early {
        cl.shared.jobs.lock().unwrap().get_mut(&id).expect("just inserted").done = true;
        let _ = cl.tx.send(Finished { id, outcome });
        return;
    }
    let job = Job {
        id,
        queue: c.queue,
        kind: c.kind,
        payload: c.payload,
        attempt: c.attempt,
        max_attempts: c.max_attempts,
        priority: c.priority,
        progress: c.progress,
        cancel: cancel.clone(),
        report,
    };
    tracing::debug!(job = id, kind = %job.kind, attempt = job.attempt, "claimed");
    let fut = handler.expect("checked above").call(job);
    tokio::spawn(supervise(Supervise {
        id,
        shared: cl.shared.clone(),
        cancel,
        timeout: job_limit(cl.opts.job_timeout, c.timeout.map(Duration::from_secs_f64)),
        abort: cl.opts.abort_timeout,
        hard_stop: cl.hard_stop.clone(),
        tx: cl.tx.clone(),
        permit,
        break_fail_on_shutdown: cl.opts.breaks.fail_on_shutdown(),
        fut,
    }));
}
