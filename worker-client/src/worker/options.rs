//! The checked settings every task of a running worker reads.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::breaks::Breaks;
use crate::conn::Conn;
use crate::{ConnConfig, Handler, StatementMode};

/// This machine's host name: `HOSTNAME`, else /etc/hostname; `None` when neither has one.
pub(super) fn host_name() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// `HOSTNAME:PID` (at most 200 characters), `worker:PID` without a host name: the name recorded
/// with each claim and in the fleet registry.
pub(super) fn default_worker_name() -> String {
    let host = host_name().unwrap_or_else(|| "worker".into());
    let pid = std::process::id().to_string();
    let mut name: String = host.chars().take(200 - pid.len() - 1).collect();
    name.push(':');
    name.push_str(&pid);
    name
}

/// A worker's settings after [`super::WorkerBuilder::build`] checked them.
pub(super) struct Opts {
    pub(super) queues: Vec<String>,
    pub(super) handlers: HashMap<String, Arc<dyn Handler>>,
    pub(super) fallbacks: HashMap<String, Arc<dyn Handler>>,
    pub(super) concurrency: usize,
    pub(super) claim_batch: usize,
    pub(super) lease: Option<Duration>,
    pub(super) heartbeat_interval: Option<Duration>,
    pub(super) shutdown_grace: Duration,
    pub(super) abort_timeout: Duration,
    pub(super) job_timeout: Option<Duration>,
    pub(super) worker_name: String,
    pub(super) idle_wait: Duration,
    pub(super) poll_min: Duration,
    pub(super) poll_max: Duration,
    pub(super) statement_mode: StatementMode,
    /// The bound of one database call (a long-poll claim: plus its wait).
    pub(super) call_timeout: Duration,
    /// Register in jq's fleet registry (worker/fleet.rs).
    pub(super) register: bool,
    pub(super) breaks: Breaks,
}

impl Opts {
    /// Time from a lease renewal to the next heartbeat: the set interval (default a third of
    /// the lease), at most half the lease, at least 50 ms.
    pub(super) fn heartbeat_every(&self, lease: Duration) -> Duration {
        let half = lease / 2;
        self.heartbeat_interval.unwrap_or(lease / 3).min(half).max(Duration::from_millis(50))
    }

    /// The claim loop's connection to `config`, its calls bounded by the call timeout.
    pub(super) fn claim_conn(&self, config: &ConnConfig) -> Conn {
        let conn = self.breaks.claim_conn(config.clone(), self.statement_mode);
        conn.with_call_timeout(self.breaks.call_timeout(self.call_timeout))
    }

    /// A connection of the reporter or the heartbeat task, as [`Opts::claim_conn`].
    pub(super) fn report_conn(&self, config: &ConnConfig) -> Conn {
        let conn = self.breaks.report_conn(config.clone(), self.statement_mode);
        conn.with_call_timeout(self.breaks.call_timeout(self.call_timeout))
    }

    /// The handler of `kind`, else the fallback of `queue`.
    pub(super) fn handler_for(&self, queue: &str, kind: &str) -> Option<Arc<dyn Handler>> {
        self.handlers.get(kind).or_else(|| self.fallbacks.get(queue)).cloned()
    }
}
