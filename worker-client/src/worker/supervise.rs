//! One handler's run: in a task of its own (so a panic is caught), under the job's time limit
//! ([`Limit`]: the worker's job timeout or the attempt's wall timeout from its kind) and the
//! shutdown's hard stop, turned into the [`Outcome`] the reporter records.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::state::{Finished, Outcome, Shared};
use crate::BoxError;

/// What a supervisor needs for one job.
pub(super) struct Supervise {
    pub(super) id: i64,
    pub(super) shared: Arc<Shared>,
    pub(super) cancel: CancellationToken,
    pub(super) timeout: Option<Limit>,
    /// How long before the hard limit the handler is asked to stop (the abort timeout).
    pub(super) abort: Duration,
    pub(super) hard_stop: CancellationToken,
    pub(super) tx: mpsc::UnboundedSender<Finished>,
    pub(super) permit: OwnedSemaphorePermit,
    pub(super) break_fail_on_shutdown: bool,
    pub(super) fut: crate::HandlerFuture,
}

/// How the handler's task ended.
enum Ended {
    Returned(Result<Option<Value>, BoxError>),
    Panicked(String),
    TimedOut(Duration),
    Dropped,
}

/// A job's time limit: its handler is dropped (a command: SIGKILL) `at` after it started and
/// asked to stop (its token cancelled; a command: SIGTERM) the abort timeout before that, or
/// halfway for a short limit. `nominal` is the timeout the failure names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Limit {
    pub(super) at: Duration,
    pub(super) nominal: Duration,
}

/// The earlier of the worker's job timeout and the attempt's wall timeout (from its kind, which
/// the database enforces at that instant after the claim): the latter is taken a tenth (at most
/// a second) early, so that the worker's own failure normally ends the attempt before
/// maintenance does. tests/commands.rs, `a_kinds_timeout_stops_the_command_before_the_database_does`.
pub(super) fn job_limit(worker: Option<Duration>, kind: Option<Duration>) -> Option<Limit> {
    let from_worker = worker.map(|t| Limit { at: t, nominal: t });
    let from_kind = kind.filter(|t| !t.is_zero()).map(|t| Limit { at: t - (t / 10).min(Duration::from_secs(1)), nominal: t });
    match (from_worker, from_kind) {
        (Some(a), Some(b)) => Some(if a.at <= b.at { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// Runs one handler in a task of its own (so a panic is caught) under its time limit, and
/// sends its outcome to the reporter.
pub(super) async fn supervise(s: Supervise) {
    let mut inner = tokio::spawn(s.fut);
    let limit = s.timeout;
    let soft = limit.map(|l| l.at - s.abort.min(l.at / 2));
    let timer = async move {
        match soft {
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
            // Asked to stop first (a command gets SIGTERM), dropped at the limit (SIGKILL).
            let l = limit.expect("a timer only with a limit");
            s.cancel.cancel();
            let grace = l.at.saturating_sub(soft.unwrap_or_default());
            if tokio::time::timeout(grace, &mut inner).await.is_err() {
                inner.abort();
                let _ = inner.await;
            }
            Ended::TimedOut(l.nominal)
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
        // A handler aborted by shutdown is not a failed handler, whatever it returns: its job
        // is released (tests/shutdown.rs, control `fail_on_shutdown`).
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

/// The text of a panic payload (`&str` or `String`).
fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".into()
    }
}

/// An error's text and its sources', joined with `: `.
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
