//! One handler's run: in a task of its own (so a panic is caught), under the job timeout and
//! the shutdown's hard stop, turned into the [`Outcome`] the reporter records.

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
    pub(super) timeout: Option<Duration>,
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

/// Runs one handler in a task of its own (so a panic is caught) under the job timeout, and
/// sends its outcome to the reporter.
pub(super) async fn supervise(s: Supervise) {
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
