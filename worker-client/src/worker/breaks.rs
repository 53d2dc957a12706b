//! Deliberately broken variants of the worker for the tests' negative controls, compiled only
//! with the cargo feature `test-breaks` and then chosen with the environment variable
//! `JQ_CLIENT_BREAK`. Without the feature every switch is a constant `false`.

use std::time::Duration;

use crate::ConnConfig;

use crate::conn::Conn;
use crate::StatementMode;

/// The negative-control switches of one worker; each names a bug a test must catch.
#[cfg(feature = "test-breaks")]
#[derive(Default, Clone, Copy)]
pub(super) struct Breaks {
    /// `fail_on_shutdown`: a handler aborted by shutdown is failed instead of released (a
    /// handler that rejects on abort would go down the retry path). tests/shutdown.rs must
    /// fail with it.
    fail_on_shutdown: bool,
    /// `no_heartbeat_on_shutdown`: heartbeats stop when shutdown starts, so jobs finishing
    /// within the grace period lose their leases. tests/shutdown.rs must fail with it.
    no_heartbeat_on_shutdown: bool,
    /// `no_reconnect`: the claim connection is never re-established once lost, so the worker
    /// stays up but claims nothing more. tests/reconnect.rs must fail with it.
    no_reconnect: bool,
    /// `always_prepared`: the worker's connections always prepare their statements and never
    /// fall back to unnamed ones (the client before statement modes). tests/pooler.rs must
    /// fail with it.
    always_prepared: bool,
    /// `starving_reporter`: the reporter as it was before heartbeats had a task of their own:
    /// it heartbeats only when no outcome waits, reports failures one round trip each, and
    /// claims never wait for it. tests/stress.rs must fail with it.
    starving_reporter: bool,
    /// `no_io_deadline`: the worker's calls have no bound, as before call timeouts: a call on
    /// a half-open connection waits forever. tests/half_open.rs must fail with it.
    no_io_deadline: bool,
    /// `heartbeat_full_timeout`: a heartbeat waits the whole call timeout, however little is
    /// left of the leases it renews. tests/half_open.rs
    /// `a_long_job_keeps_its_lease_across_a_frozen_connection` must fail with it.
    heartbeat_full_timeout: bool,
    /// `no_fleet_beat`: the worker registers in jq.fleet but never beats, so its entry never
    /// shows the jobs it holds and goes stale while it runs. tests/fleet.rs must fail with it.
    no_fleet_beat: bool,
    /// `no_deregister`: a graceful shutdown leaves the worker's jq.fleet entry as it was
    /// (it goes stale instead of stopped). tests/fleet.rs must fail with it.
    no_deregister: bool,
}

/// Without the feature `test-breaks`: no switch can be turned on.
#[cfg(not(feature = "test-breaks"))]
#[derive(Default, Clone, Copy)]
pub(super) struct Breaks;

#[cfg(feature = "test-breaks")]
impl Breaks {
    /// Reads `JQ_CLIENT_BREAK` (one variant name, or unset).
    pub(super) fn from_env() -> Breaks {
        let v = std::env::var("JQ_CLIENT_BREAK").unwrap_or_default();
        let b = Breaks {
            fail_on_shutdown: v == "fail_on_shutdown",
            no_heartbeat_on_shutdown: v == "no_heartbeat_on_shutdown",
            no_reconnect: v == "no_reconnect",
            always_prepared: v == "always_prepared",
            starving_reporter: v == "starving_reporter",
            no_io_deadline: v == "no_io_deadline",
            heartbeat_full_timeout: v == "heartbeat_full_timeout",
            no_fleet_beat: v == "no_fleet_beat",
            no_deregister: v == "no_deregister",
        };
        if !v.is_empty() {
            tracing::warn!(variant = %v, "JQ_CLIENT_BREAK is set: running a deliberately broken worker");
        }
        b
    }

    /// Whether an aborted handler's job is failed rather than released.
    pub(super) fn fail_on_shutdown(self) -> bool {
        self.fail_on_shutdown
    }

    /// Whether heartbeats stop once shutdown starts.
    pub(super) fn no_heartbeat_on_shutdown(self) -> bool {
        self.no_heartbeat_on_shutdown
    }

    /// Whether heartbeats, failures and claims work as before the heartbeat task existed.
    pub(super) fn starving_reporter(self) -> bool {
        self.starving_reporter
    }

    /// The bound of the worker's calls: `configured`, or none under `no_io_deadline`.
    pub(super) fn call_timeout(self, configured: Duration) -> Option<Duration> {
        (!self.no_io_deadline).then_some(configured)
    }

    /// Whether a heartbeat waits the whole call timeout whatever is left of its leases.
    pub(super) fn heartbeat_full_timeout(self) -> bool {
        self.heartbeat_full_timeout
    }

    /// Whether the worker's fleet beats are skipped.
    pub(super) fn no_fleet_beat(self) -> bool {
        self.no_fleet_beat
    }

    /// Whether a graceful shutdown skips the fleet deregistration.
    pub(super) fn no_deregister(self) -> bool {
        self.no_deregister
    }

    /// The claim loop's connection: one that never reconnects under `no_reconnect`, one that
    /// never falls back under `always_prepared`.
    pub(super) fn claim_conn(self, config: ConnConfig, mode: StatementMode) -> Conn {
        if self.no_reconnect {
            Conn::broken_once(config, mode)
        } else {
            self.report_conn(config, mode)
        }
    }

    /// The reporter's connection: one that never falls back under `always_prepared`.
    pub(super) fn report_conn(self, config: ConnConfig, mode: StatementMode) -> Conn {
        if self.always_prepared {
            Conn::always_prepared(config)
        } else {
            Conn::new(config, mode)
        }
    }
}

#[cfg(not(feature = "test-breaks"))]
impl Breaks {
    /// No switch: `JQ_CLIENT_BREAK` is not read.
    pub(super) fn from_env() -> Breaks {
        Breaks
    }

    /// Always false.
    pub(super) fn fail_on_shutdown(self) -> bool {
        false
    }

    /// Always false.
    pub(super) fn no_heartbeat_on_shutdown(self) -> bool {
        false
    }

    /// Always false.
    pub(super) fn starving_reporter(self) -> bool {
        false
    }

    /// `configured`.
    pub(super) fn call_timeout(self, configured: Duration) -> Option<Duration> {
        Some(configured)
    }

    /// Always false.
    pub(super) fn heartbeat_full_timeout(self) -> bool {
        false
    }

    /// Always false.
    pub(super) fn no_fleet_beat(self) -> bool {
        false
    }

    /// Always false.
    pub(super) fn no_deregister(self) -> bool {
        false
    }

    /// The claim loop's connection.
    pub(super) fn claim_conn(self, config: ConnConfig, mode: StatementMode) -> Conn {
        Conn::new(config, mode)
    }

    /// The reporter's and the heartbeat task's connection.
    pub(super) fn report_conn(self, config: ConnConfig, mode: StatementMode) -> Conn {
        Conn::new(config, mode)
    }
}
