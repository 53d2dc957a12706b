//! TLS for every connection the crate makes (worker, `jqctl` commands, metrics, query cancel),
//! with libpq's `sslmode` and `sslrootcert` semantics, through `native-tls` (the system's
//! OpenSSL) and `postgres-native-tls`. tokio-postgres' own `Config` knows only disable, prefer
//! and require; [`TlsSettings`] keeps the rest beside it in [`crate::ConnConfig`].
//!
//! Invariants, each checked by a test in tests/tls.rs:
//! - `verify-full` checks the chain against the root certificate and the host name against the
//!   certificate (`wrong_ca_and_wrong_host_are_one_line_errors`);
//! - `require`, `verify-ca` and `verify-full` never fall back to a plain connection
//!   (`require_works_without_a_ca_and_never_falls_back`);
//! - `prefer` falls back to a plain connection when the TLS attempt fails
//!   (`prefer_falls_back_to_plain_when_tls_is_refused`);
//! - the cancel request of a waiting claim goes over TLS too
//!   (`a_job_flows_through_a_worker_over_verify_full`).

mod breaks;
mod connector;
pub(crate) mod params;
mod settings;
mod tried;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;

use tokio_postgres::config::{Host, SslMode as PgSslMode};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{CancelToken, Client, Config, NoTls, Socket};

pub use settings::{RootCert, SslMode, TlsSettings};

use crate::conn::{connect_error, describe};
use crate::Error;

/// Connects with `config` and `tls` and spawns the connection's I/O task; `prefer` retries
/// plain once when the TLS attempt failed (libpq does the same). Each attempt, start-up and
/// authentication included, is bounded by [`connect_bound`]. Returns the client and the handle
/// of its I/O task: aborting it closes the socket at once, even with a request in flight.
pub(crate) async fn connect(config: &Config, tls: &TlsSettings) -> Result<(Client, AbortHandle), Error> {
    let tls = connector::effective(config, tls);
    let mut pg = config.clone();
    if tls.mode == SslMode::Disable || breaks::no_tls() {
        pg.ssl_mode(PgSslMode::Disable);
        return spawn(&pg, NoTls).await.map_err(|e| e.into_error(config));
    }
    pg.ssl_mode(tls.pg_mode());
    let attempted = Arc::new(AtomicBool::new(false));
    let connector = tried::Tried::new(connector::build(&tls)?, attempted.clone());
    match spawn(&pg, connector).await {
        Ok(client) => Ok(client),
        Err(Failed::Pg(e))
            if tls.mode == SslMode::Prefer && attempted.load(Ordering::SeqCst) && !breaks::prefer_no_fallback() =>
        {
            tracing::debug!(error = %describe(&e), "TLS attempt failed; sslmode=prefer retries without TLS");
            pg.ssl_mode(PgSslMode::Disable);
            spawn(&pg, NoTls).await.map_err(|plain| Error::Connect {
                target: crate::describe_target(config),
                reason: format!("{} (and over TLS: {})", plain.reason(), shorten(&describe(&e))),
            })
        }
        Err(Failed::Pg(e)) => Err(tls_error(config, &tls, &e, attempted.load(Ordering::SeqCst))),
        Err(f) => Err(f.into_error(config)),
    }
}

/// [`connect_error`], plus the TLS settings when the failure came in the TLS handshake (a
/// certificate that does not verify, say), so the one line says what was checked against what.
fn tls_error(config: &Config, tls: &TlsSettings, e: &tokio_postgres::Error, attempted: bool) -> Error {
    match connect_error(config, e) {
        Error::Connect { target, reason } if attempted && e.as_db_error().is_none() => {
            Error::Connect { target, reason: format!("{} ({})", shorten(&reason), tls.describe()) }
        }
        other => other,
    }
}

/// OpenSSL's verification failure, `…:certificate verify failed:…:1889: (hostname mismatch)`,
/// as `the server certificate does not verify: hostname mismatch`; other text unchanged.
fn shorten(reason: &str) -> String {
    match (reason.contains("certificate verify failed"), reason.rfind(" (")) {
        (true, Some(i)) if reason.ends_with(')') => {
            format!("the server certificate does not verify: {}", &reason[i + 2..reason.len() - 1])
        }
        _ => reason.to_owned(),
    }
}

/// Why one connection attempt failed.
enum Failed {
    /// The driver's error: refused, authentication, TLS, I/O.
    Pg(tokio_postgres::Error),
    /// No connection within the bound (a server or path that accepts but does not answer).
    TimedOut(Duration),
}

impl Failed {
    /// The failure as one line, without the target.
    fn reason(&self) -> String {
        match self {
            Failed::Pg(e) => describe(e),
            Failed::TimedOut(d) => timed_out_reason(*d),
        }
    }

    fn into_error(self, config: &Config) -> Error {
        match self {
            Failed::Pg(e) => connect_error(config, &e),
            Failed::TimedOut(d) => Error::Connect { target: crate::describe_target(config), reason: timed_out_reason(d) },
        }
    }
}

fn timed_out_reason(d: Duration) -> String {
    format!("no connection within {} (connect_timeout)", crate::format_duration(d))
}

/// How long one connection attempt may take, from the TCP connect to the end of
/// authentication: `connect_timeout` ([`crate::DEFAULT_CONNECT_TIMEOUT`] when it is unset, e.g.
/// `PGCONNECT_TIMEOUT=0`) per host named. tokio-postgres applies `connect_timeout` to the TCP
/// connect alone, so a server (or proxy) that accepts and then says nothing would hold the
/// attempt forever. Checked by tests/half_open.rs (`connecting_through_a_frozen_path_is_bounded`).
pub(crate) fn connect_bound(config: &Config) -> Option<Duration> {
    if breaks::no_connect_bound() {
        return None;
    }
    let per_host = config.get_connect_timeout().copied().unwrap_or(crate::DEFAULT_CONNECT_TIMEOUT);
    let hosts = config.get_hosts().len().max(config.get_hostaddrs().len()).max(1);
    Some(per_host * hosts as u32)
}

/// Connects, within [`connect_bound`], and spawns the connection's I/O task on the current
/// runtime.
async fn spawn<T>(config: &Config, tls: T) -> Result<(Client, AbortHandle), Failed>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let attempt = config.connect(tls);
    let (client, connection) = match connect_bound(config) {
        Some(bound) => match tokio::time::timeout(bound, attempt).await {
            Ok(r) => r.map_err(Failed::Pg)?,
            Err(_) => return Err(Failed::TimedOut(bound)),
        },
        None => attempt.await.map_err(Failed::Pg)?,
    };
    let io = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "connection closed");
        }
    });
    Ok((client, io.abort_handle()))
}

/// Sends the cancel request for `token`'s query, over TLS when its connection used TLS (the
/// token carries the mode that connection was made with). Failures are logged: the caller
/// waits for the query to end either way.
pub(crate) async fn cancel(token: &CancelToken, config: &Config, tls: &TlsSettings) {
    if let Err(e) = send_cancel(token, config, tls).await {
        tracing::warn!(error = %e, "cancel request failed");
    }
}

/// Sends the cancel request as [`cancel`] does and says how it went.
pub(crate) async fn send_cancel(token: &CancelToken, config: &Config, tls: &TlsSettings) -> Result<(), String> {
    let tls = connector::effective(config, tls);
    // crate::cancel::send waits for the other end to close, as PgBouncer needs (src/cancel.rs)
    let r = if tls.mode == SslMode::Disable || breaks::cancel_no_tls() {
        crate::cancel::send(token, config, NoTls).await
    } else {
        match connector::build(&tls) {
            Ok(c) => crate::cancel::send(token, config, c).await,
            Err(e) => return Err(format!("cancel request not sent: {e}")),
        }
    };
    r.map_err(|e| e.to_string())
}

/// True when every host of `config` is a Unix-domain socket: libpq never uses TLS on those.
fn unix_only(config: &Config) -> bool {
    let hosts = config.get_hosts();
    !hosts.is_empty() && config.get_hostaddrs().is_empty() && hosts.iter().all(|h| !matches!(h, Host::Tcp(_)))
}
