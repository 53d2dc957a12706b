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

use tokio_postgres::config::{Host, SslMode as PgSslMode};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{CancelToken, Client, Config, NoTls, Socket};

pub use settings::{RootCert, SslMode, TlsSettings};

use crate::conn::{connect_error, describe};
use crate::Error;

/// Connects with `config` and `tls` and spawns the connection's I/O task; `prefer` retries
/// plain once when the TLS attempt failed (libpq does the same).
pub(crate) async fn connect(config: &Config, tls: &TlsSettings) -> Result<Client, Error> {
    let tls = connector::effective(config, tls);
    let mut pg = config.clone();
    if tls.mode == SslMode::Disable || breaks::no_tls() {
        pg.ssl_mode(PgSslMode::Disable);
        return spawn(&pg, NoTls).await.map_err(|e| connect_error(config, &e));
    }
    pg.ssl_mode(tls.pg_mode());
    let attempted = Arc::new(AtomicBool::new(false));
    let connector = tried::Tried::new(connector::build(&tls)?, attempted.clone());
    match spawn(&pg, connector).await {
        Ok(client) => Ok(client),
        Err(e) if tls.mode == SslMode::Prefer && attempted.load(Ordering::SeqCst) && !breaks::prefer_no_fallback() => {
            tracing::debug!(error = %describe(&e), "TLS attempt failed; sslmode=prefer retries without TLS");
            pg.ssl_mode(PgSslMode::Disable);
            spawn(&pg, NoTls).await.map_err(|plain| Error::Connect {
                target: crate::describe_target(config),
                reason: format!("{} (and over TLS: {})", describe(&plain), shorten(&describe(&e))),
            })
        }
        Err(e) => Err(tls_error(config, &tls, &e, attempted.load(Ordering::SeqCst))),
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

/// Connects and spawns the connection's I/O task on the current runtime.
async fn spawn<T>(config: &Config, tls: T) -> Result<Client, tokio_postgres::Error>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let (client, connection) = config.connect(tls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "connection closed");
        }
    });
    Ok(client)
}

/// Sends the cancel request for `token`'s query, over TLS when its connection used TLS (the
/// token carries the mode that connection was made with). Failures are logged: the caller
/// waits for the query to end either way.
pub(crate) async fn cancel(token: &CancelToken, config: &Config, tls: &TlsSettings) {
    let tls = connector::effective(config, tls);
    // crate::cancel::send waits for the other end to close, as PgBouncer needs (src/cancel.rs)
    let r = if tls.mode == SslMode::Disable || breaks::cancel_no_tls() {
        crate::cancel::send(token, config, NoTls).await
    } else {
        match connector::build(&tls) {
            Ok(c) => crate::cancel::send(token, config, c).await,
            Err(e) => return tracing::warn!(error = %e, "cancel request not sent"),
        }
    };
    if let Err(e) = r {
        tracing::warn!(error = %e, "cancel request failed");
    }
}

/// True when every host of `config` is a Unix-domain socket: libpq never uses TLS on those.
fn unix_only(config: &Config) -> bool {
    let hosts = config.get_hosts();
    !hosts.is_empty() && config.get_hostaddrs().is_empty() && hosts.iter().all(|h| !matches!(h, Host::Tcp(_)))
}
