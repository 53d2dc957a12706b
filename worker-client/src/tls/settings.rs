//! The TLS settings of a connection: libpq's `sslmode` and `sslrootcert`, from a connection
//! string and the environment (`PGSSLMODE`, `PGSSLROOTCERT`).

use std::path::PathBuf;

use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres::Config;

use crate::Error;

/// libpq's `sslmode` values this client supports (`allow` is not one of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain connections only.
    Disable,
    /// TLS when the server offers it, else plain; a failed TLS attempt is retried plain. The
    /// certificate is checked as in `VerifyCa` only when a root certificate file exists.
    Prefer,
    /// TLS or no connection; the certificate is checked as in `VerifyCa` only when a root
    /// certificate file exists (libpq's rule).
    Require,
    /// TLS, and the server certificate must chain to the root certificate.
    VerifyCa,
    /// As `VerifyCa`, and the host name connected to must be in the certificate.
    VerifyFull,
}

impl SslMode {
    /// Parses libpq's spelling (`verify-full`, …).
    pub fn parse(s: &str) -> Result<SslMode, Error> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => return Err(Error::Config("sslmode \"allow\" is not supported; use disable or prefer".into())),
            _ => {
                return Err(Error::Config(format!(
                    "invalid sslmode {s:?}: expected disable, prefer, require, verify-ca or verify-full"
                )))
            }
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    pub(crate) fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// Where the certificates that a server certificate must chain to come from (`sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// libpq's default file, `~/.postgresql/root.crt`, if it exists.
    Default,
    /// A PEM file of one or more certificates; only these are trusted.
    File(PathBuf),
    /// `sslrootcert=system`: the system's trusted roots (OpenSSL's default store).
    System,
}

/// The TLS half of [`crate::ConnConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// What TLS is required and checked.
    pub mode: SslMode,
    /// What the server certificate is checked against.
    pub root_cert: RootCert,
}

impl TlsSettings {
    /// Settings from a connection string's `sslmode` and `sslrootcert` (`None` when absent),
    /// completed from `PGSSLMODE` and `PGSSLROOTCERT`, then libpq's defaults (`prefer`; with
    /// `sslrootcert=system`, `verify-full`, the only mode libpq allows with it).
    pub fn resolve(sslmode: Option<String>, sslrootcert: Option<String>) -> Result<TlsSettings, Error> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let sslmode = sslmode.filter(|_| !super::breaks::ignore_url_sslmode());
        let root_cert = match sslrootcert.or_else(|| env("PGSSLROOTCERT")) {
            None => RootCert::Default,
            Some(s) if s == "system" => RootCert::System,
            Some(s) if s.is_empty() => RootCert::Default,
            Some(s) => RootCert::File(PathBuf::from(s)),
        };
        let mode = match sslmode.or_else(|| env("PGSSLMODE")) {
            Some(m) => SslMode::parse(&m)?,
            None if root_cert == RootCert::System => SslMode::VerifyFull,
            None => SslMode::Prefer,
        };
        if root_cert == RootCert::System && mode != SslMode::VerifyFull {
            return Err(Error::Config(format!(
                "weak sslmode \"{}\" may not be used with sslrootcert=system (use verify-full)",
                mode.name()
            )));
        }
        Ok(TlsSettings { mode, root_cert })
    }

    /// Settings for a bare tokio-postgres `Config`: its disable, prefer or require, and the
    /// default root certificate file.
    pub fn from_pg(config: &Config) -> TlsSettings {
        let mode = match config.get_ssl_mode() {
            PgSslMode::Disable => SslMode::Disable,
            PgSslMode::Require => SslMode::Require,
            _ => SslMode::Prefer,
        };
        TlsSettings { mode, root_cert: RootCert::Default }
    }

    /// The mode tokio-postgres is given: it only decides whether TLS is asked for and
    /// required; the checks are the connector's.
    pub(crate) fn pg_mode(&self) -> PgSslMode {
        match self.mode {
            SslMode::Disable => PgSslMode::Disable,
            SslMode::Prefer => PgSslMode::Prefer,
            _ => PgSslMode::Require,
        }
    }

    /// For error messages: `sslmode=verify-full, sslrootcert=/path`.
    pub(crate) fn describe(&self) -> String {
        let root = match &self.root_cert {
            RootCert::Default => "default".to_string(),
            RootCert::File(p) => p.display().to_string(),
            RootCert::System => "system".to_string(),
        };
        format!("sslmode={}, sslrootcert={root}", self.mode.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(mode: &str, root: &str) -> Result<TlsSettings, String> {
        TlsSettings::resolve(Some(mode.into()), Some(root.into())).map_err(|e| e.to_string())
    }

    /// libpq's rules for `sslrootcert=system`. Seen failing with the weak-mode check removed
    /// (`require` with `system` was accepted).
    #[test]
    fn system_roots_allow_verify_full_only() {
        let s = resolve("verify-full", "system").unwrap();
        assert_eq!((s.mode, s.root_cert), (SslMode::VerifyFull, RootCert::System));
        let e = resolve("require", "system").unwrap_err();
        assert_eq!(e, "weak sslmode \"require\" may not be used with sslrootcert=system (use verify-full)");
        let s = resolve("verify-ca", "/etc/ca.pem").unwrap();
        assert_eq!((s.mode, s.root_cert), (SslMode::VerifyCa, RootCert::File("/etc/ca.pem".into())));
        assert!(resolve("allow", "").unwrap_err().contains("not supported"));
    }
}
