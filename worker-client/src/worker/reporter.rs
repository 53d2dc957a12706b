//! The reporter: the only task that sends heartbeats (heartbeat.rs) and outcomes, on a
//! connection of its own. Outcomes are batched: successes go out in one `jq.complete_many`,
//! failures, releases and snoozes one call each, every call fenced by the job's lease token
//! and retried on connection errors until the lease ends.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::heartbeat::heartbeat;
use super::options::Opts;
use super::state::{Finished, Outcome, Shared};
use crate::api;
use crate::conn::{CallErr, Conn};

/// Most outcomes reported in one round trip.
const REPORT_BATCH: usize = 500;

/// Runs until every sender of `rx` is gone (the claim loop and every supervisor ended), i.e.
/// until every claimed job's outcome has been reported; heartbeats jobs as they fall due.
pub(super) async fn run(shared: Arc<Shared>, opts: Arc<Opts>, mut conn: Conn, mut rx: mpsc::UnboundedReceiver<Finished>) {
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

/// A job whose outcome is being reported: its lease token, and the local end of its lease
/// (the last moment a retried call is worth making).
struct Pending {
    id: i64,
    token: Uuid,
    deadline: Instant,
}

/// Reports one batch of outcomes; jobs whose lease was lost meanwhile are only counted.
async fn report(shared: &Shared, conn: &mut Conn, batch: Vec<Finished>) {
    let mut completes: Vec<(Pending, Option<Value>)> = Vec::new();
    let mut others: Vec<(Pending, Outcome)> = Vec::new();
    {
        let mut jobs = shared.jobs.lock().unwrap();
        for f in batch {
            let Some(e) = jobs.get(&f.id) else { continue };
            if e.lost {
                jobs.remove(&f.id);
                shared.count_lost();
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
                let r = api::release(conn, p.deadline, p.id, p.token).await;
                finish(shared, &p, r, &shared.counters.released, "release");
            }
            Outcome::Snooze(d) => {
                let r = api::snooze(conn, p.deadline, p.id, p.token, d).await;
                finish(shared, &p, r, &shared.counters.snoozed, "snooze");
            }
            Outcome::Done(_) => unreachable!("completes are batched"),
        }
    }
}

/// PostgreSQL text cannot hold NUL: an error message must never be the reason its failure
/// cannot be recorded (tests/handlers.rs, the `nul` job).
fn clean_text(s: &str) -> String {
    s.replace('\0', "\\u0000")
}

async fn fail_one(shared: &Shared, conn: &mut Conn, p: &Pending, msg: &str) {
    let r = api::fail(conn, p.deadline, p.id, p.token, &clean_text(msg)).await;
    finish(shared, p, r, &shared.counters.failed, "fail");
}

/// Records the result of a fenced call: `Ok(true)` counts it in `counter`; otherwise the job
/// was no longer ours, or the call could not be made, and it is counted as lost.
fn finish(shared: &Shared, p: &Pending, r: Result<bool, CallErr>, counter: &AtomicU64, what: &str) {
    shared.jobs.lock().unwrap().remove(&p.id);
    match r {
        Ok(true) => {
            counter.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Ok(false) => tracing::warn!(job = p.id, "{what}: the job was no longer running under our lease"),
        Err(CallErr::GaveUp(e)) => {
            tracing::warn!(job = p.id, error = %e, "{what}: gave up at the end of the lease; the reaper takes the job back")
        }
        Err(CallErr::Refused(e)) => tracing::error!(job = p.id, error = %e, "{what} refused; the job's lease will expire"),
    }
    shared.count_lost();
}

/// Completes one job with `jq.complete`. A handler that succeeded must not run again because
/// its result cannot be stored (a JSON string with `\u0000`, which jsonb refuses with 22P05, or
/// a result over the server's limits): when the server refuses the result, the job is completed
/// with `{"result_not_stored": "<the server's error>"}` instead; only if that is refused too
/// (the job is no longer ours to complete in any form) is it failed.
/// Checked by tests/handlers.rs, `outcomes_of_handlers` (the `nulresult` job runs once).
async fn complete_one(shared: &Shared, conn: &mut Conn, p: Pending, v: Option<Value>) {
    match api::complete(conn, p.deadline, p.id, p.token, &v).await {
        Err(CallErr::Refused(e)) if v.is_some() => {
            tracing::warn!(job = p.id, error = %e, "the handler's result could not be stored; completing the job without it");
            let reason = Some(serde_json::json!({ "result_not_stored": clean_text(&e.to_string()) }));
            match api::complete(conn, p.deadline, p.id, p.token, &reason).await {
                Err(CallErr::Refused(e)) => {
                    fail_one(shared, conn, &p, &format!("the handler succeeded but the job could not be completed: {e}")).await
                }
                r => finish(shared, &p, r, &shared.counters.completed, "complete"),
            }
        }
        Err(CallErr::Refused(e)) => {
            fail_one(shared, conn, &p, &format!("the handler succeeded but the job could not be completed: {e}")).await
        }
        r => finish(shared, &p, r, &shared.counters.completed, "complete"),
    }
}

/// Completes the jobs whose handlers succeeded: one job with `jq.complete`, more in one
/// `jq.complete_many`. For a single job `jq.complete` is the plainer call (no arrays to unnest,
/// no sort) and costs the server about the same (docs/BENCHMARKS.md).
async fn complete_batch(shared: &Shared, conn: &mut Conn, mut completes: Vec<(Pending, Option<Value>)>) {
    if completes.len() == 1 {
        let (p, v) = completes.pop().expect("one");
        return complete_one(shared, conn, p, v).await;
    }
    let ids: Vec<i64> = completes.iter().map(|(p, _)| p.id).collect();
    let tokens: Vec<Uuid> = completes.iter().map(|(p, _)| p.token).collect();
    let results: Vec<Option<Value>> = completes.iter().map(|(_, v)| v.clone()).collect();
    let deadline = completes.iter().map(|(p, _)| p.deadline).max().expect("non-empty");
    match api::complete_many(conn, deadline, &ids, &tokens, &results).await {
        Ok(done) => {
            let done: HashSet<i64> = done.into_iter().collect();
            let mut jobs = shared.jobs.lock().unwrap();
            for (p, _) in &completes {
                jobs.remove(&p.id);
                if done.contains(&p.id) {
                    shared.counters.completed.fetch_add(1, Ordering::Relaxed);
                } else {
                    tracing::warn!(job = p.id, "complete: the job was no longer running under our lease");
                    shared.count_lost();
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
                shared.count_lost();
            }
            tracing::warn!(jobs = completes.len(), error = %e, "complete: gave up at the end of the leases; the jobs will run again");
        }
    }
}
