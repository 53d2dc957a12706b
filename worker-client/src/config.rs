//! Connection settings: a URL or `key=value` string, completed from the libpq environment
//! variables the way `psql` completes them, with libpq's TLS settings beside them.

use std::time::Duration;

use tokio_postgres::config::Host;
use tokio_postgres::Config;

use crate::tls::{params, TlsSettings};
use crate::Error;

/// Builds connection settings the way libpq-based tools such as `psql` do.
///
/// `url` is a `postgresql://` URL or a `key=value` connection string (for example the value of
/// `DATABASE_URL`); `None` means "only the environment". Every setting the string leaves out is
/// taken from the libpq environment variables `PGHOST` (a comma-separated list; a value starting
/// with `/` is a Unix-socket directory), `PGPORT`, `PGUSER`, `PGDATABASE`, `PGPASSWORD`,
/// `PGAPPNAME`, `PGOPTIONS`, `PGCONNECT_TIMEOUT`, `PGSSLMODE` and `PGSSLROOTCERT`, and then from
/// libpq's defaults: the socket directory `/var/run/postgresql` when it exists (else
/// `localhost`), port 5432, the operating system user (`USER`), and a database named like the
/// user. The connect timeout defaults to 10 seconds ([`DEFAULT_CONNECT_TIMEOUT`]) so that an
/// unreachable server gives an error rather than a hang; it bounds the whole attempt (TCP
/// connect, TLS, start-up, authentication), per host.
///
/// `sslmode` (disable, prefer — the default —, require, verify-ca, verify-full) and
/// `sslrootcert` (a PEM file, or `system`) mean what they mean to libpq; see [`TlsSettings`] and
/// docs/worker-client.md, "TLS".
///
/// # Errors
///
/// [`Error::Config`] when `url`, `PGPORT`, `PGCONNECT_TIMEOUT` or the TLS settings cannot be
/// parsed.
///
/// # Example
///
/// ```
/// let config = worker_client::config_from_env(Some("postgresql://postgres@127.0.0.1:5432/app")).unwrap();
/// assert_eq!(config.pg().get_dbname(), Some("app"));
/// assert_eq!(worker_client::describe_target(config.pg()), "127.0.0.1:5432");
/// ```
pub fn config_from_env(url: Option<&str>) -> Result<ConnConfig, Error> {
    let ssl = params::extract(url.unwrap_or("").trim())?;
    let mut config = match ssl.rest.as_str() {
        "" => Config::new(),
        rest => rest.parse::<Config>().map_err(|e| Error::Config(format!("invalid database URL: {e}")))?,
    };
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());

    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        match env("PGHOST") {
            Some(hosts) => {
                for h in hosts.split(',') {
                    if h.starts_with('/') {
                        config.host_path(h);
                    } else {
                        config.host(h);
                    }
                }
            }
            None if std::path::Path::new("/var/run/postgresql").is_dir() => {
                config.host_path("/var/run/postgresql");
            }
            None => {
                config.host("localhost");
            }
        }
    }
    if config.get_ports().is_empty() {
        if let Some(p) = env("PGPORT") {
            let port = p
                .parse::<u16>()
                .map_err(|_| Error::Config(format!("PGPORT is not a port number: {p:?}")))?;
            config.port(port);
        }
    }
    if config.get_user().is_none() {
        let user = env("PGUSER").or_else(|| env("USER")).unwrap_or_else(|| "postgres".into());
        config.user(user);
    }
    if config.get_dbname().is_none() {
        let db = env("PGDATABASE").unwrap_or_else(|| config.get_user().unwrap_or("postgres").to_string());
        config.dbname(db);
    }
    if config.get_password().is_none() {
        if let Some(p) = env("PGPASSWORD") {
            config.password(p);
        }
    }
    if config.get_application_name().is_none() {
        config.application_name(env("PGAPPNAME").unwrap_or_else(|| "jq-worker-client".into()));
    }
    if config.get_options().is_none() {
        if let Some(o) = env("PGOPTIONS") {
            config.options(o);
        }
    }
    if config.get_connect_timeout().is_none() {
        let secs = match env("PGCONNECT_TIMEOUT") {
            Some(t) => t
                .parse::<u64>()
                .map_err(|_| Error::Config(format!("PGCONNECT_TIMEOUT is not a number of seconds: {t:?}")))?,
            None => DEFAULT_CONNECT_TIMEOUT.as_secs(),
        };
        if secs > 0 {
            config.connect_timeout(Duration::from_secs(secs));
        }
    }
    default_keepalives(&mut config, &ssl.rest);
    let tls = TlsSettings::resolve(ssl.sslmode, ssl.sslrootcert)?;
    config.ssl_mode(tls.pg_mode());
    Ok(ConnConfig { pg: config, tls })
}

/// Where `config` points, for messages: `host:port` or `socket-dir:port`, comma-separated when
/// several hosts are given.
///
/// # Example
///
/// ```
/// let mut config = tokio_postgres::Config::new();
/// config.host("db.internal").port(6432);
/// assert_eq!(worker_client::describe_target(&config), "db.internal:6432");
/// ```
pub fn describe_target(config: &Config) -> String {
    let ports = config.get_ports();
    let port = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    let mut parts = Vec::new();
    for (i, h) in config.get_hosts().iter().enumerate() {
        match h {
            Host::Tcp(name) => parts.push(format!("{name}:{}", port(i))),
            #[cfg(unix)]
            Host::Unix(path) => parts.push(format!("{}:{}", path.display(), port(i))),
        }
    }
    if parts.is_empty() {
        for (i, a) in config.get_hostaddrs().iter().enumerate() {
            parts.push(format!("{a}:{}", port(i)));
        }
    }
    parts.join(",")
}

/// How long one connection attempt may take (TCP connect, TLS, start-up and authentication)
/// when `connect_timeout` / `PGCONNECT_TIMEOUT` sets none. A worker never waits longer for a
/// connection: `PGCONNECT_TIMEOUT=0`, libpq's "wait forever", means this default too.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a worker's database call may go without an answer before its connection is
/// dropped and the call retried on a new one, unless `JQ_CALL_TIMEOUT` or
/// `WorkerBuilder::call_timeout` says otherwise. A long-poll claim gets its wait on top.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The environment variable the worker's call timeout is read from (a duration: `5s`,
/// `2500ms`), when `WorkerBuilder::call_timeout` was not called.
pub const CALL_TIMEOUT_ENV: &str = "JQ_CALL_TIMEOUT";

/// The environment variable that turns a worker's fleet registration off (`0`, `false`, `no`,
/// `off`) or on, when [`crate::WorkerBuilder::register`] was not called.
pub const REGISTER_ENV: &str = "JQ_REGISTER";

/// Keepalive probes start after this much silence on a connection, unless `keepalives_idle` is
/// given (libpq's default is the kernel's, usually two hours).
pub const DEFAULT_KEEPALIVES_IDLE: Duration = Duration::from_secs(5);
/// Interval between unanswered keepalive probes, unless `keepalives_interval` is given.
pub const DEFAULT_KEEPALIVES_INTERVAL: Duration = Duration::from_secs(2);
/// Unanswered probes after which the kernel drops the connection, unless `keepalives_retries`
/// is given.
pub const DEFAULT_KEEPALIVES_RETRIES: u32 = 3;
/// How long sent data may stay unacknowledged before the kernel drops the connection, unless
/// `tcp_user_timeout` is given.
pub const DEFAULT_TCP_USER_TIMEOUT: Duration = Duration::from_secs(20);

/// Sets the keepalive and TCP user timeout defaults above for every parameter the connection
/// string `given` does not name, so a half-open connection (a peer that stops answering without
/// closing) is dropped by the kernel within about 11 s of silence or 20 s of unacknowledged
/// data, not after the kernel's ~2 h keepalive or ~15 min retransmission defaults. Nothing is
/// set when the string says `keepalives=0`.
fn default_keepalives(config: &mut Config, given: &str) {
    if !config.get_keepalives() {
        return;
    }
    let named = |key: &str| given.contains(key);
    if !named("keepalives_idle") {
        config.keepalives_idle(DEFAULT_KEEPALIVES_IDLE);
    }
    if !named("keepalives_interval") {
        config.keepalives_interval(DEFAULT_KEEPALIVES_INTERVAL);
    }
    if !named("keepalives_retries") {
        config.keepalives_retries(DEFAULT_KEEPALIVES_RETRIES);
    }
    match config.get_tcp_user_timeout().copied() {
        // libpq's tcp_user_timeout is in milliseconds; tokio-postgres 0.7 reads the same
        // number as seconds, so N given is turned back into N ms (checked by the test below).
        Some(parsed) if named("tcp_user_timeout") => {
            config.tcp_user_timeout(Duration::from_millis(parsed.as_secs()));
        }
        _ if !named("tcp_user_timeout") => {
            config.tcp_user_timeout(DEFAULT_TCP_USER_TIMEOUT);
        }
        _ => {}
    }
}

/// Where and how to connect: tokio-postgres' [`Config`] and the [`TlsSettings`] it cannot hold
/// (`verify-ca`, `verify-full`, `sslrootcert`). Made by [`config_from_env`], or from a bare
/// `Config` with `From` (its disable, prefer or require; the default root certificate file).
#[derive(Debug, Clone)]
pub struct ConnConfig {
    pg: Config,
    tls: TlsSettings,
}

impl ConnConfig {
    /// Settings from both halves.
    pub fn new(pg: Config, tls: TlsSettings) -> ConnConfig {
        ConnConfig { pg, tls }
    }

    /// The tokio-postgres half: host, port, user, database, …
    pub fn pg(&self) -> &Config {
        &self.pg
    }

    /// The tokio-postgres half, to change (e.g. `application_name`). Its `ssl_mode` is not
    /// used: TLS follows [`ConnConfig::tls`].
    pub fn pg_mut(&mut self) -> &mut Config {
        &mut self.pg
    }

    /// The TLS half.
    pub fn tls(&self) -> &TlsSettings {
        &self.tls
    }
}

impl From<Config> for ConnConfig {
    fn from(pg: Config) -> ConnConfig {
        let tls = TlsSettings::from_pg(&pg);
        ConnConfig { pg, tls }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Defaults apply where the URL names nothing; named parameters are honoured; keepalives=0
    /// leaves keepalives off. Control: without the `default_keepalives` call in
    /// `config_from_env`, the first assertion fails (idle 7200 s, tokio-postgres' default).
    #[test]
    fn keepalive_defaults_and_url_parameters() {
        let c = config_from_env(Some("postgresql://u@h/db")).unwrap();
        assert_eq!(c.pg().get_keepalives_idle(), DEFAULT_KEEPALIVES_IDLE);
        assert_eq!(c.pg().get_keepalives_interval(), Some(DEFAULT_KEEPALIVES_INTERVAL));
        assert_eq!(c.pg().get_keepalives_retries(), Some(DEFAULT_KEEPALIVES_RETRIES));
        assert_eq!(c.pg().get_tcp_user_timeout(), Some(&DEFAULT_TCP_USER_TIMEOUT));

        let url = "postgresql://u@h/db?keepalives_idle=30&keepalives_interval=10&keepalives_retries=4&tcp_user_timeout=60000";
        let c = config_from_env(Some(url)).unwrap();
        assert_eq!(c.pg().get_keepalives_idle(), Duration::from_secs(30));
        assert_eq!(c.pg().get_keepalives_interval(), Some(Duration::from_secs(10)));
        assert_eq!(c.pg().get_keepalives_retries(), Some(4));
        assert_eq!(c.pg().get_tcp_user_timeout(), Some(&Duration::from_millis(60000)));

        let c = config_from_env(Some("postgresql://u@h/db?keepalives=0")).unwrap();
        assert!(!c.pg().get_keepalives());
    }
}
