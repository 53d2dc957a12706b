//! The `native-tls` connector for one connection attempt, configured from [`TlsSettings`] the
//! way libpq configures OpenSSL.

use std::path::{Path, PathBuf};

use native_tls::{Certificate, TlsConnector};
use postgres_native_tls::MakeTlsConnector;
use tokio_postgres::Config;

use super::{breaks, RootCert, SslMode, TlsSettings};
use crate::Error;

/// The settings actually used for `config`: plain for Unix-domain sockets (libpq never asks
/// for TLS on them, whatever `sslmode` says).
pub(crate) fn effective(config: &Config, tls: &TlsSettings) -> TlsSettings {
    if super::unix_only(config) {
        TlsSettings { mode: SslMode::Disable, ..tls.clone() }
    } else {
        tls.clone()
    }
}

/// The connector for `tls` (not `disable`). The root certificate is read on every call, so a
/// reconnect picks up a replaced file.
pub(crate) fn build(tls: &TlsSettings) -> Result<MakeTlsConnector, Error> {
    let mut b = TlsConnector::builder();
    match roots(tls)? {
        Roots::System => {}
        Roots::Certs(certs) => {
            b.disable_built_in_roots(true);
            for c in certs {
                b.add_root_certificate(c);
            }
        }
        // prefer and require without a root certificate: encrypted, not authenticated
        Roots::None => {
            b.danger_accept_invalid_certs(true);
        }
    }
    if tls.mode != SslMode::VerifyFull || breaks::no_hostname_check() {
        b.danger_accept_invalid_hostnames(true);
    }
    if breaks::accept_any_cert() {
        b.danger_accept_invalid_certs(true);
    }
    let connector = b.build().map_err(|e| Error::Config(format!("cannot set up TLS: {e}")))?;
    Ok(MakeTlsConnector::new(connector))
}

enum Roots {
    None,
    System,
    Certs(Vec<Certificate>),
}

/// libpq's rule: a root certificate file that exists is used (so `prefer` and `require`
/// verify the chain too); a missing one is an error only for `verify-ca` and `verify-full`.
fn roots(tls: &TlsSettings) -> Result<Roots, Error> {
    let path = match &tls.root_cert {
        RootCert::System => return Ok(Roots::System),
        RootCert::File(p) => Some(p.clone()),
        RootCert::Default => default_root_cert(),
    };
    match path.as_deref().map(read_certs).transpose()? {
        Some(Some(certs)) => Ok(Roots::Certs(certs)),
        _ if tls.mode.verifies() => Err(Error::Config(format!(
            "sslmode={} needs a root certificate: {} does not exist; set sslrootcert (or PGSSLROOTCERT) \
             to the CA's PEM file, or sslrootcert=system for the system's trusted roots",
            tls.mode.name(),
            path.map_or("~/.postgresql/root.crt".into(), |p| format!("\"{}\"", p.display()))
        ))),
        _ => Ok(Roots::None),
    }
}

/// `~/.postgresql/root.crt`, libpq's default `sslrootcert`.
fn default_root_cert() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".postgresql/root.crt"))
}

/// The certificates in a PEM file; `None` when the file does not exist.
fn read_certs(path: &Path) -> Result<Option<Vec<Certificate>>, Error> {
    let pem = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::Config(format!("cannot read root certificate file \"{}\": {e}", path.display()))),
    };
    let certs = Certificate::stack_from_pem(&pem)
        .map_err(|e| Error::Config(format!("root certificate file \"{}\" is not PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::Config(format!("root certificate file \"{}\" holds no certificate", path.display())));
    }
    Ok(Some(certs))
}
