//! The worker's entry in jq's fleet registry (`jq.fleet`, sql/fleet.sql): registered when the
//! reporter starts, a beat every `jq.worker_beat_interval()` with the jobs held and the
//! process's resident memory, registered again when a beat answers false (the row was pruned),
//! deregistered when the reporter ends (a graceful shutdown: every outcome reported).
//!
//! All on the reporter's connection, one bounded single-statement call each (no session state:
//! works through a transaction-mode pooler). The registry is for operators only: a failed call
//! is logged once and tried again at the next beat, and never holds up claims, heartbeats or
//! outcomes for more than one call timeout. A jq without the registry (an older version) turns
//! it off for the run. Checked by tests/fleet.rs (controls `no_fleet_beat`, `no_deregister`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::options::{host_name, Opts};
use super::state::Shared;
use crate::api::{self, WorkerInfo};
use crate::conn::{Conn, QueryError};

/// The interval used until the server told its own (and after a failed registration).
const DEFAULT_EVERY: Duration = Duration::from_secs(5);

/// This worker's registration: its id once registered, and when the next call is due.
pub(super) struct Fleet {
    enabled: bool,
    id: Option<Uuid>,
    every: Duration,
    next: Instant,
    /// A failure was logged and no call has succeeded since: the next ones are quiet.
    failing: bool,
}

impl Fleet {
    /// Registration on (`opts.register`) or off; the first call is due at once.
    pub(super) fn new(opts: &Opts) -> Fleet {
        Fleet { enabled: opts.register, id: None, every: DEFAULT_EVERY, next: Instant::now(), failing: false }
    }

    /// When the next registration or beat is due (far away when registration is off).
    pub(super) fn due_at(&self) -> Instant {
        if self.enabled { self.next } else { Instant::now() + Duration::from_secs(3600) }
    }

    /// Registers, or beats, if that is due: one call, bounded by the call timeout.
    pub(super) async fn tick(&mut self, shared: &Arc<Shared>, opts: &Opts, conn: &mut Conn) {
        if !self.enabled || Instant::now() < self.next {
            return;
        }
        self.next = Instant::now() + self.every;
        let r = match self.id {
            None => self.register(opts, conn).await,
            Some(id) => self.beat(id, shared, opts, conn).await,
        };
        match r {
            Ok(()) => self.failing = false,
            Err(e) => self.failed(&e),
        }
    }

    async fn register(&mut self, opts: &Opts, conn: &mut Conn) -> Result<(), QueryError> {
        let hostname = host_name().unwrap_or_else(|| "unknown".into());
        let info = WorkerInfo {
            name: &opts.worker_name,
            hostname: &hostname,
            pid: std::process::id() as i32,
            client_version: env!("CARGO_PKG_VERSION"),
            queues: &opts.queues,
            concurrency: opts.concurrency.min(1_000_000) as i32,
        };
        let (id, every) = api::register_worker(conn, &info).await?;
        self.every = Duration::from_secs_f64(every.clamp(0.1, 3600.0));
        self.next = Instant::now() + self.every;
        self.id = Some(id);
        tracing::info!(worker_id = %id, every = ?self.every, "registered in jq.fleet");
        Ok(())
    }

    async fn beat(&mut self, id: Uuid, shared: &Arc<Shared>, opts: &Opts, conn: &mut Conn) -> Result<(), QueryError> {
        if opts.breaks.no_fleet_beat() {
            return Ok(());
        }
        let in_flight = shared.jobs.lock().unwrap().len().min(i32::MAX as usize) as i32;
        if !api::worker_beat(conn, id, in_flight, rss_bytes()).await? {
            // Pruned (or a restore, or no longer ours): a new row, now.
            tracing::info!(worker_id = %id, "jq.fleet no longer has this worker: registering again");
            self.id = None;
            return self.register(opts, conn).await;
        }
        Ok(())
    }

    /// Marks the worker stopped, at the end of a graceful shutdown.
    pub(super) async fn deregister(&mut self, opts: &Opts, conn: &mut Conn) {
        let Some(id) = self.id.take() else { return };
        if opts.breaks.no_deregister() {
            return;
        }
        match api::deregister_worker(conn, id).await {
            Ok(_) => tracing::debug!(worker_id = %id, "deregistered from jq.fleet"),
            Err(e) => tracing::warn!(error = %e, "could not deregister from jq.fleet; the entry goes stale"),
        }
    }

    /// Logs the first failure of a run of them; turns registration off for a jq without it.
    fn failed(&mut self, e: &QueryError) {
        if let QueryError::Db(db) = e {
            if db.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_FUNCTION) {
                tracing::info!("this jq has no worker registry (jq.register_worker): not registering");
                self.enabled = false;
                return;
            }
        }
        if !self.failing {
            tracing::warn!(error = %e, "jq.fleet registration or beat failed; retrying every beat (jobs are unaffected)");
            self.failing = true;
        }
    }
}

/// This process's resident memory in bytes (`VmRSS` of /proc/self/status), 0 where unknown.
pub(super) fn rss_bytes() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            let kb: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb.saturating_mul(1024))
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn rss_is_read_on_linux() {
        let rss = super::rss_bytes();
        assert!(rss > 1 << 20, "rss {rss}");
    }
}
