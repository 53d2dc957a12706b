//! Heartbeats: a task of their own, on a connection of their own, renews the leases of the jobs
//! the worker holds (running, or waiting for their outcome to be reported) in one
//! `jq.heartbeat` statement per round, cancels the handlers of jobs an operator cancelled or
//! whose lease was lost, and schedules each job's next heartbeat from the lease the server
//! granted.
//!
//! Invariant: nothing but a heartbeat's own round trip delays a heartbeat — not outcomes
//! waiting to be reported, not a report being retried, not a long-poll claim (tests/stress.rs:
//! a 12 s job keeps its 3 s lease while 20,000 instant failures are reported).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::options::Opts;
use super::state::{Entry, Shared};
use crate::api::{self, Beat};
use crate::conn::Conn;

/// The heartbeat task: runs until `stop` fires (once every outcome has been reported),
/// heartbeating jobs as they fall due.
pub(super) async fn run(shared: Arc<Shared>, opts: Arc<Opts>, mut conn: Conn, stop: CancellationToken) {
    loop {
        let wake = next_wake(&shared);
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            // New jobs: their first heartbeat may be due before `wake`.
            _ = shared.claimed.notified() => {}
            // A progress report to send at once (Job::set_progress_now).
            _ = shared.progress_now.notified() => {}
            _ = tokio::time::sleep_until(wake.into()) => tokio::select! {
                _ = stop.cancelled() => break,
                _ = heartbeat(&shared, &opts, &mut conn) => {}
            },
        }
    }
}

/// When the earliest heartbeat falls due, but at most a second from now (a safety net: new
/// jobs also wake the task through `shared.claimed`).
pub(super) fn next_wake(shared: &Shared) -> Instant {
    let far = Instant::now() + Duration::from_secs(1);
    let jobs = shared.jobs.lock().unwrap();
    jobs.values().filter(|e| beats(e)).map(|e| due_at(e)).min().map_or(far, |t| t.min(far))
}

/// When a job's heartbeat falls due: now for an urgent progress report, else on schedule.
fn due_at(e: &Entry) -> Instant {
    if e.progress.urgent() { Instant::now() } else { e.next_heartbeat }
}

/// Whether a job is heartbeated: its lease is not known lost, and its outcome is not being
/// reported right now (a report in flight ends the lease anyway; leaving it alone keeps the
/// heartbeat and the report from locking the same rows at once).
fn beats(e: &Entry) -> bool {
    !e.lost && !e.reporting
}

/// Heartbeats every job due within the next 250 ms, in one statement.
pub(super) async fn heartbeat(shared: &Shared, opts: &Opts, conn: &mut Conn) {
    if opts.breaks.no_heartbeat_on_shutdown() && shared.stopping.load(Ordering::SeqCst) {
        // Negative control: stop heartbeating at shutdown; push the due times out so the
        // reporter does not spin.
        for e in shared.jobs.lock().unwrap().values_mut() {
            e.next_heartbeat = Instant::now() + Duration::from_secs(3600);
        }
        return;
    }
    let (ids, tokens, earliest) = due(shared, Instant::now() + Duration::from_millis(250));
    if ids.is_empty() {
        return;
    }
    let progress: Vec<Option<serde_json::Value>> = {
        let jobs = shared.jobs.lock().unwrap();
        ids.iter().map(|id| jobs.get(id).and_then(|e| e.progress.take())).collect()
    };
    let extend: Option<f64> = opts.lease.map(|l| l.as_secs_f64());
    let sent = Instant::now();
    let at_most = bound(earliest, opts);
    let result = api::heartbeat(conn, &ids, &tokens, extend, &progress, at_most).await.map_err(|e| e.to_string());
    let mut jobs = shared.jobs.lock().unwrap();
    match result {
        Ok(beats) => {
            for beat in beats {
                if let Some(e) = jobs.get_mut(&beat.id) {
                    apply(e, &beat, sent, opts);
                }
            }
        }
        Err(msg) => {
            tracing::warn!(error = %msg, jobs = ids.len(), "heartbeat failed; retrying in 1 s");
            retry_soon(&mut jobs, &ids);
            for (id, p) in ids.iter().zip(progress) {
                if let (Some(e), Some(p)) = (jobs.get(id), p) {
                    e.progress.restore(p);
                }
            }
        }
    }
}

/// The jobs (ids and tokens, by id) whose heartbeat is due by `horizon`, and the earliest
/// local end of their leases.
fn due(shared: &Shared, horizon: Instant) -> (Vec<i64>, Vec<Uuid>, Instant) {
    let jobs = shared.jobs.lock().unwrap();
    let due: Vec<(&i64, &Entry)> = jobs.iter().filter(|(_, e)| beats(e) && due_at(e) <= horizon).collect();
    let earliest = due.iter().map(|(_, e)| e.deadline).min().unwrap_or_else(Instant::now);
    let mut due: Vec<(i64, Uuid)> = due.into_iter().map(|(id, e)| (*id, e.token)).collect();
    due.sort_unstable();
    let (ids, tokens) = due.into_iter().unzip();
    (ids, tokens, earliest)
}

/// Shortest bound of a heartbeat call.
const MIN_BOUND: Duration = Duration::from_millis(500);

/// How long a heartbeat whose earliest lease ends at `earliest` may wait for its answer: the
/// call timeout, but at most half of what is left of that lease (at least [`MIN_BOUND`]), so a
/// heartbeat lost on a half-open connection leaves the other half to reconnect and heartbeat
/// again before the lease runs out (`retry_soon`). Checked by tests/half_open.rs
/// `a_long_job_keeps_its_lease_across_a_frozen_connection` (control `heartbeat_full_timeout`:
/// the call timeout alone).
fn bound(earliest: Instant, opts: &Opts) -> Duration {
    if opts.breaks.heartbeat_full_timeout() {
        return Duration::MAX;
    }
    (earliest.saturating_duration_since(Instant::now()) / 2).max(MIN_BOUND)
}

/// Records one heartbeat's answer: a lost lease cancels the handler; a renewed one sets the
/// lease and the next heartbeat; a cancel request cancels the handler.
fn apply(e: &mut Entry, beat: &Beat, sent: Instant, opts: &Opts) {
    let id = beat.id;
    if beat.progress_refused {
        tracing::warn!(job = id, "progress not stored: over jq.max_progress_bytes() (64 KiB of JSON text)");
    }
    if e.reporting {
        // Its outcome went out meanwhile: the report's answer, not this one, settles the job.
        return;
    }
    match beat.lease_left {
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
            if beat.cancel_requested == Some(true) && !e.cancel.is_cancelled() {
                tracing::info!(job = id, "cancel requested: cancelling its handler");
                e.cancel.cancel();
            }
        }
    }
}

/// After a failed heartbeat: retry in 1 s, but never wait past half of what is left of a
/// lease, and not sooner than 100 ms.
fn retry_soon(jobs: &mut HashMap<i64, Entry>, ids: &[i64]) {
    let retry = Instant::now() + Duration::from_secs(1);
    for id in ids {
        if let Some(e) = jobs.get_mut(id) {
            e.next_heartbeat = retry.min(Instant::now() + e.deadline.saturating_duration_since(Instant::now()) / 2);
            if e.next_heartbeat < Instant::now() + Duration::from_millis(100) {
                e.next_heartbeat = Instant::now() + Duration::from_millis(100);
            }
        }
    }
}
