//! The dashboard's database connections: a small pool (deadpool) of tokio-postgres clients,
//! made as jqctl makes its connection. Each query runs in a transaction of its own on a
//! connection of its own, under `SET LOCAL statement_timeout` (`--query-timeout`): a query
//! stuck behind a lock (an open REINDEX, a VACUUM FULL, an ALTER TABLE queued behind a report)
//! ends at the timeout with 57014, shown as a 503 page, and every other request goes on on the
//! pool's other connections (tests/dashboard.rs, a_page_behind_a_lock_fails_after_its_timeout_and_others_answer).
//! `SET LOCAL` ends with the transaction, so nothing is left on a server connection that a
//! transaction-mode pooler hands to its next client. Every statement is sent with
//! `query_typed` (unnamed, nothing kept on the server).

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};

use crate::{Cli, CliError};

/// Connections the dashboard keeps at most: enough for a page's concurrent reads beside a
/// request stuck behind a lock.
const POOL_SIZE: usize = 4;

/// A parameter with its type, as `query_typed` takes it.
pub type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// Why a query failed: the server's error, or (Other) no connection to run it on or an answer of
/// the wrong shape.
#[derive(Debug)]
pub enum Error {
    Pg(tokio_postgres::Error),
    Other(String),
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Error {
        Error::Pg(e)
    }
}

impl Error {
    /// The SQLSTATE, when the server raised the error.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Pg(e) => e.as_db_error().map(|d| d.code().code()),
            Error::Other(_) => None,
        }
    }

    /// One line for an error page.
    pub fn describe(&self) -> String {
        match self {
            Error::Pg(e) => crate::describe(e),
            Error::Other(m) => m.clone(),
        }
    }
}

/// One pooled connection. `clean` is false from BEGIN until COMMIT or ROLLBACK has answered.
pub struct Conn {
    client: Client,
    clean: bool,
}

/// A connection taken from the pool for one query. A request dropped before its COMMIT or
/// ROLLBACK answered (its HTTP client went away) leaves the connection inside a transaction,
/// whose locks would keep jq's history tables from being truncated while it idles in the pool:
/// such a connection leaves the pool and closes, which ends the transaction on the server
/// (tests/dashboard.rs, a_page_behind_a_lock_fails_after_its_timeout_and_others_answer).
struct Checkout(Option<managed::Object<Manager>>);

impl Drop for Checkout {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            // Negative control `dashboard_keeps_dirty`: such a connection goes back to the pool.
            if !conn.clean && !super::security::broken("dashboard_keeps_dirty") {
                drop(managed::Object::take(conn));
            }
        }
    }
}

/// Makes connections as jqctl does and takes back only clean, open ones.
pub struct Manager {
    config: worker_client::ConnConfig,
}

impl managed::Manager for Manager {
    type Type = Conn;
    type Error = worker_client::Error;

    async fn create(&self) -> Result<Conn, worker_client::Error> {
        Ok(Conn { client: worker_client::connect(&self.config).await?, clean: true })
    }

    async fn recycle(&self, c: &mut Conn, _: &Metrics) -> RecycleResult<worker_client::Error> {
        if c.client.is_closed() || !c.clean {
            return Err(RecycleError::message("closed, or left inside a transaction"));
        }
        Ok(())
    }
}

/// The pool and the statement timeout of its queries.
pub struct Db {
    pool: managed::Pool<Manager>,
    timeout_s: u32,
}

impl Db {
    /// Checks jq once as jqctl does (--database-url, DATABASE_URL, libpq variables); connections
    /// are then made as requests need them. `timeout_s`: seconds each query may run, 0 = no limit.
    pub async fn connect(cli: &Cli, timeout_s: u32) -> Result<Db, CliError> {
        let mut config = worker_client::config_from_env(cli.database_url.as_deref())?;
        if config.pg().get_application_name() == Some("jq-worker-client") {
            config.pg_mut().application_name("jqctl dashboard");
        }
        drop(crate::connect(cli).await?);
        let pool = managed::Pool::builder(Manager { config })
            .max_size(POOL_SIZE)
            .build()
            .map_err(|e| CliError(format!("dashboard connection pool: {e}")))?;
        Ok(Db { pool, timeout_s })
    }

    /// Rows of `sql` with typed parameters, in a transaction of its own under the timeout.
    pub async fn rows(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, Error> {
        let conn = self.pool.get().await.map_err(|e| Error::Other(format!("no database connection: {e}")))?;
        let mut checkout = Checkout(Some(conn));
        let Some(conn) = checkout.0.as_mut() else { unreachable!("set just above") };
        conn.clean = false;
        // Negative control `dashboard_no_timeout`: no statement timeout.
        let timeout_s = if super::security::broken("dashboard_no_timeout") { 0 } else { self.timeout_s };
        // Negative control `dashboard_session_timeout`: a session-wide SET, which outlives the
        // transaction on a pooled server connection (tests/pooler.rs).
        let scope = if super::security::broken("dashboard_session_timeout") { "" } else { "LOCAL " };
        conn.client.batch_execute(&format!("BEGIN; SET {scope}statement_timeout = '{timeout_s}s'")).await?;
        match conn.client.query_typed(sql, params).await {
            Ok(rows) => {
                conn.client.batch_execute("COMMIT").await?;
                conn.clean = true;
                Ok(rows)
            }
            Err(e) => {
                if conn.client.batch_execute("ROLLBACK").await.is_ok() {
                    conn.clean = true;
                }
                Err(e.into())
            }
        }
    }

    /// At most one row.
    pub async fn opt(&self, sql: &str, params: &[Param<'_>]) -> Result<Option<Row>, Error> {
        let mut rows = self.rows(sql, params).await?;
        if rows.len() > 1 {
            return Err(Error::Other(format!("expected at most one row, got {}", rows.len())));
        }
        Ok(rows.pop())
    }
}
