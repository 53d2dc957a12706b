//! The reporter: the only task that sends outcomes, on a connection of its own (heartbeats
//! have their own task and connection, heartbeat.rs). Outcomes waiting together are reported
//! together, fenced by each job's lease token and retried on connection errors until the lease
//! ends: successes in one `jq.complete_many`, failures in one statement calling `jq.fail` per
//! job, releases and snoozes (rare: shutdown, handlers that ask) one call each.
//!
//! A worker whose handlers fail at once (a downstream outage) produces failures as fast as it
//! claims; reported one round trip each they fell behind without bound, and their leases ran
//! out before they were charged. Batches keep the reporter's pace at the claim loop's, and the
//! claim loop waits when more than [`super::MAX_UNREPORTED`] outcomes wait (claim_loop.rs,
//! `take_room`). Checked by tests/stress.rs.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::fleet::Fleet;
use super::heartbeat::{heartbeat, next_wake};
use super::options::Opts;
use super::state::{Finished, Outcome, Shared};
use crate::api;
use crate::conn::{CallErr, Conn};

/// Most outcomes reported in one round trip.
pub(super) const REPORT_BATCH: usize = 500;

/// Runs until every sender of `rx` is gone (the claim loop and every supervisor ended), i.e.
/// until every claimed job's outcome has been reported.
/// Between outcomes it keeps the worker's fleet entry (fleet.rs): registered first, a beat
/// when one is due (one bounded call: outcomes wait at most that long), deregistered last.
pub(super) async fn run(shared: Arc<Shared>, opts: Arc<Opts>, mut conn: Conn, mut rx: mpsc::UnboundedReceiver<Finished>) {
    let starving = opts.breaks.starving_reporter();
    let mut fleet = Fleet::new(&opts);
    loop {
        fleet.tick(&shared, &opts, &mut conn).await;
        let first = if starving {
            match starving_next(&shared, &opts, &mut conn, &mut rx).await {
                Some(Some(m)) => m,
                Some(None) => continue,
                None => break,
            }
        } else {
            tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => m,
                    None => break,
                },
                _ = tokio::time::sleep_until(fleet.due_at().into()) => continue,
            }
        };
        let mut batch = vec![first];
        while batch.len() < REPORT_BATCH {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        report(&shared, &opts, &mut conn, batch).await;
    }
    // Every sender is gone, so every job's outcome has been reported.
    let left = shared.jobs.lock().unwrap().len();
    if left > 0 {
        tracing::error!(jobs = left, "jobs left without an outcome; their leases will expire");
    }
    fleet.deregister(&opts, &mut conn).await;
}

/// The negative control `starving_reporter`: the reporter as it was, sending heartbeats itself
/// and only when no outcome waits (so a steady stream of outcomes starves them). The next
/// outcome (`Some(Some)`), a heartbeat round done (`Some(None)`), or the end (`None`).
async fn starving_next(
    shared: &Shared,
    opts: &Opts,
    conn: &mut Conn,
    rx: &mut mpsc::UnboundedReceiver<Finished>,
) -> Option<Option<Finished>> {
    let wake = next_wake(shared);
    tokio::select! {
        biased;
        msg = rx.recv() => msg.map(Some),
        _ = shared.claimed.notified() => Some(None),
        _ = tokio::time::sleep_until(wake.into()) => {
            heartbeat(shared, opts, conn).await;
            Some(None)
        }
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
async fn report(shared: &Shared, opts: &Opts, conn: &mut Conn, batch: Vec<Finished>) {
    let mut completes: Vec<(Pending, Option<Value>)> = Vec::new();
    let mut fails: Vec<(Pending, String)> = Vec::new();
    let mut others: Vec<(Pending, Outcome)> = Vec::new();
    {
        let mut jobs = shared.jobs.lock().unwrap();
        for f in batch {
            let Some(e) = jobs.get_mut(&f.id) else { continue };
            if e.lost {
                jobs.remove(&f.id);
                shared.count_lost();
                continue;
            }
            e.reporting = true;
            let p = Pending { id: f.id, token: e.token, deadline: e.deadline };
            match f.outcome {
                Outcome::Done(v) => completes.push((p, v)),
                Outcome::Failed(msg) => fails.push((p, msg)),
                o => others.push((p, o)),
            }
        }
    }

    if !completes.is_empty() {
        complete_batch(shared, conn, completes).await;
    }
    if opts.breaks.starving_reporter() {
        // The control: one round trip per failure, as before.
        for (p, msg) in fails {
            fail_one(shared, conn, &p, &msg).await;
        }
    } else if !fails.is_empty() {
        fail_batch(shared, conn, fails).await;
    }
    for (p, outcome) in others {
        match outcome {
            Outcome::Release => {
                let r = api::release(conn, p.deadline, p.id, p.token).await;
                finish(shared, &p, r, &shared.counters.released, "release");
            }
            Outcome::Snooze(d) => {
                let r = api::snooze(conn, p.deadline, p.id, p.token, d).await;
                finish(shared, &p, r, &shared.counters.snoozed, "snooze");
            }
            Outcome::Done(_) | Outcome::Failed(_) => unreachable!("completes and failures are batched"),
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
        Ok(done) => settle_many(shared, completes.iter().map(|(p, _)| p.id), done, &shared.counters.completed, "complete"),
        Err(CallErr::Refused(e)) => {
            // One bad result (e.g. a JSON string jsonb refuses) must not strand the others:
            // complete one by one, and fail the job whose result cannot be stored.
            tracing::warn!(error = %e, "complete_many refused; completing one by one");
            for (p, v) in completes {
                complete_one(shared, conn, p, v).await;
            }
        }
        Err(CallErr::GaveUp(e)) => give_up_many(shared, completes.iter().map(|(p, _)| p.id), &e.to_string(), "complete"),
    }
}

/// Fails the jobs whose handlers failed, one `jq.fail` each in one statement (in id order, so
/// its row locks are taken in the order a heartbeat takes them); one alone with `jq.fail`.
async fn fail_batch(shared: &Shared, conn: &mut Conn, mut fails: Vec<(Pending, String)>) {
    if fails.len() == 1 {
        let (p, msg) = fails.pop().expect("one");
        return fail_one(shared, conn, &p, &msg).await;
    }
    fails.sort_unstable_by_key(|(p, _)| p.id);
    let ids: Vec<i64> = fails.iter().map(|(p, _)| p.id).collect();
    let tokens: Vec<Uuid> = fails.iter().map(|(p, _)| p.token).collect();
    let messages: Vec<String> = fails.iter().map(|(_, m)| clean_text(m)).collect();
    let deadline = fails.iter().map(|(p, _)| p.deadline).max().expect("non-empty");
    match api::fail_many(conn, deadline, &ids, &tokens, &messages).await {
        Ok(failed) => settle_many(shared, ids.iter().copied(), failed, &shared.counters.failed, "fail"),
        Err(CallErr::Refused(e)) => {
            // Whatever one job's call raised must not strand the others.
            tracing::warn!(error = %e, "failing a batch was refused; failing one by one");
            for (p, msg) in fails {
                fail_one(shared, conn, &p, &msg).await;
            }
        }
        Err(CallErr::GaveUp(e)) => give_up_many(shared, ids.iter().copied(), &e.to_string(), "fail"),
    }
}

/// Records a batch call's answer: the jobs in `done` are counted in `counter`, the others were
/// no longer running under our lease and are counted as lost.
fn settle_many(shared: &Shared, ids: impl Iterator<Item = i64>, done: Vec<i64>, counter: &AtomicU64, what: &str) {
    let done: HashSet<i64> = done.into_iter().collect();
    let mut jobs = shared.jobs.lock().unwrap();
    for id in ids {
        jobs.remove(&id);
        if done.contains(&id) {
            counter.fetch_add(1, Ordering::Relaxed);
        } else {
            tracing::warn!(job = id, "{what}: the job was no longer running under our lease");
            shared.count_lost();
        }
    }
}

/// A batch call given up at the end of the leases: every job in it is counted as lost.
fn give_up_many(shared: &Shared, ids: impl Iterator<Item = i64>, error: &str, what: &str) {
    let mut jobs = shared.jobs.lock().unwrap();
    let mut n = 0;
    for id in ids {
        jobs.remove(&id);
        shared.count_lost();
        n += 1;
    }
    tracing::warn!(jobs = n, error = %error, "{what}: gave up at the end of the leases; the jobs will run again");
}
