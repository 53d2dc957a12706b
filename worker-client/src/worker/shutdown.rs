//! Shutdown: the signals that start it, and the grace period and abort that end the handlers
//! still running.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::options::Opts;
use super::state::Shared;

/// SIGTERM or SIGINT.
pub(super) async fn signal() {
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

/// Once claiming has stopped: waits up to the grace period for every handler slot to be free
/// (handlers finish on their own; the reporter keeps heartbeating), then marks the jobs still
/// running as aborting and cancels their tokens, waits up to the abort timeout, and then drops
/// the handlers left (`hard_stop`). Aborted jobs are released, not failed (tests/shutdown.rs).
pub(super) async fn finish_handlers(shared: &Shared, opts: &Opts, slots: &Arc<Semaphore>, hard_stop: &CancellationToken) {
    let all = opts.concurrency as u32;
    if tokio::time::timeout(opts.shutdown_grace, slots.acquire_many(all)).await.is_ok() {
        return;
    }
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
