//! The dashboard's database connections: a small pool (deadpool) of tokio-postgres clients,
//! made as jqctl makes its connection. Each query runs in a transaction of its own on a
//! connection of its own, its statements limited by `--query-timeout` (crate::timeout): a query
//! stuck behind a lock (an open REINDEX, a VACUUM FULL, an ALTER TABLE queued behind a report)
//! ends at the timeout with 57014, shown as a 503 page, and every other request goes on on the
//! pool's other connections (tests/dashboard.rs,
//! a_page_behind_a_lock_fails_after_its_timeout_and_others_answer). The limit ends with the
//! transaction, so nothing is left on a server connection that a transaction-mode pooler hands
//! to its next client (tests/pooler.rs). Every statement is sent with `query_typed` (unnamed,
//! nothing kept on the server).

use std::sync::Arc;
use std::time::Duration;

use deadpool::managed::{self, Metrics, PoolError, RecycleError, RecycleResult};
use tokio::task::AbortHandle;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};

use crate::{Cli, CliError};

/// Connections the dashboard keeps at most: enough for a page's concurrent reads beside a
/// request stuck behind a lock.
const POOL_SIZE: usize = 4;

/// How long a request waits for a free connection with `--query-timeout 0`.
const WAIT_WITHOUT_TIMEOUT: Duration = Duration::from_secs(30);

/// A parameter with its type, as `query_typed` takes it.
pub type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// Why a query failed.
#[derive(Debug)]
pub enum Error {
    /// The server's error, or the connection's.
    Pg(tokio_postgres::Error),
    /// No connection to run it on (the server is down, or every connection stayed busy).
    Unavailable(String),
    /// An answer of the wrong shape.
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
            _ => None,
        }
    }

    /// Whether trying again later may work: no connection, or a connection error (not a
    /// server error, not a wrong answer).
    pub fn unavailable(&self) -> bool {
        match self {
            Error::Pg(e) => e.as_db_error().is_none(),
            Error::Unavailable(_) => true,
            Error::Other(_) => false,
        }
    }

    /// One line for an error page.
    pub fn describe(&self) -> String {
        match self {
            Error::Pg(e) => crate::describe(e),
            Error::Unavailable(m) | Error::Other(m) => m.clone(),
        }
    }
}

/// One pooled connection. `clean` is false from BEGIN until COMMIT or ROLLBACK has answered.
pub struct Conn {
    client: Client,
    /// The connection's I/O task, aborted to close the socket when the connection is given up.
    io: AbortHandle,
    clean: bool,
}

/// Makes connections as jqctl does and takes back only clean, open ones.
pub struct Manager {
    config: Arc<worker_client::ConnConfig>,
}

impl managed::Manager for Manager {
    type Type = Conn;
    type Error = worker_client::Error;

    async fn create(&self) -> Result<Conn, worker_client::Error> {
        let (client, io) = worker_client::connect_abortable(&self.config).await?;
        Ok(Conn { client, io, clean: true })
    }

    async fn recycle(&self, c: &mut Conn, _: &Metrics) -> RecycleResult<worker_client::Error> {
        if c.client.is_closed() || !c.clean {
            return Err(RecycleError::message("closed, or left inside a transaction"));
        }
        Ok(())
    }
}

/// A connection taken from the pool for one query. A request dropped before its COMMIT or
/// ROLLBACK answered (its HTTP client went away) leaves the connection inside a transaction,
/// maybe with its statement still waiting for a lock: such a connection leaves the pool and is
/// given up (its statement cancelled, its socket closed), so no backend is left idling in a
/// transaction, holding locks that keep jq's history tables from being truncated, or waiting
/// on for a page nobody reads (tests/dashboard.rs,
/// a_page_behind_a_lock_fails_after_its_timeout_and_others_answer).
struct Checkout {
    conn: Option<managed::Object<Manager>>,
    config: Arc<worker_client::ConnConfig>,
}

impl Drop for Checkout {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        // Negative controls: `dashboard_keeps_dirty`, such a connection goes back to the pool;
        // `dashboard_drop_without_cancel`, it is dropped (its statement runs on to its end).
        if !conn.clean && !super::security::broken("dashboard_keeps_dirty") {
            let c = managed::Object::take(conn);
            if !super::security::broken("dashboard_drop_without_cancel") {
                worker_client::abandon(c.client, c.io, Arc::clone(&self.config));
            }
        }
    }
}

/// The pool and the statement timeout of its queries.
pub struct Db {
    pool: managed::Pool<Manager>,
    config: Arc<worker_client::ConnConfig>,
    timeout_s: u32,
}

impl Db {
    /// Checks jq once as jqctl does (--database-url, DATABASE_URL, libpq variables); connections
    /// are then made as requests need them. `timeout_s`: seconds each query may run, 0 = no
    /// limit of the dashboard's own; a request waits for a free connection as long (30 s with 0).
    pub async fn connect(cli: &Cli, timeout_s: u32) -> Result<Db, CliError> {
        let mut config = worker_client::config_from_env(cli.database_url.as_deref())?;
        if config.pg().get_application_name() == Some("jq-worker-client") {
            config.pg_mut().application_name("jqctl dashboard");
        }
        drop(crate::connect(cli).await?);
        let config = Arc::new(config);
        let wait = match timeout_s {
            0 => WAIT_WITHOUT_TIMEOUT,
            s => Duration::from_secs(u64::from(s)),
        };
        let pool = managed::Pool::builder(Manager { config: Arc::clone(&config) })
            .max_size(POOL_SIZE)
            .wait_timeout(Some(wait))
            .runtime(deadpool::Runtime::Tokio1)
            .build()
            .map_err(|e| CliError(format!("dashboard connection pool: {e}")))?;
        Ok(Db { pool, config, timeout_s })
    }

    /// Rows of `sql` with typed parameters, in a transaction of its own under the timeout.
    pub async fn rows(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, Error> {
        let conn = self.pool.get().await.map_err(|e| match e {
            PoolError::Timeout(_) => Error::Unavailable(format!(
                "every one of the dashboard's {POOL_SIZE} database connections stayed busy (queries waiting for a lock?)"
            )),
            e => Error::Unavailable(format!("no database connection: {e}")),
        })?;
        let mut checkout = Checkout { conn: Some(conn), config: Arc::clone(&self.config) };
        let Some(conn) = checkout.conn.as_mut() else { unreachable!("set just above") };
        conn.clean = false;
        conn.client.batch_execute(&self.begin()).await?;
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

    /// BEGIN and the transaction's statement timeout. Negative controls: `dashboard_no_timeout`
    /// (no limit), `dashboard_session_timeout` (a session-wide one, which outlives the
    /// transaction on a pooled server connection: tests/pooler.rs).
    fn begin(&self) -> String {
        let secs = if super::security::broken("dashboard_no_timeout") { 0 } else { self.timeout_s };
        let local = !super::security::broken("dashboard_session_timeout");
        format!("BEGIN; {}", crate::timeout::limit_statements(secs, local))
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
