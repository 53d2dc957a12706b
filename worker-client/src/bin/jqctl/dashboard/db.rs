//! The dashboard's database connection: one tokio-postgres client shared by all requests
//! (queries from concurrent requests are pipelined on it), replaced when it is closed.
//! Every statement is sent with `query_typed` (unnamed, nothing kept on the server), so the
//! dashboard also works through a transaction-mode pooler.

use std::sync::Arc;

use tokio::sync::Mutex;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};

use crate::{Cli, CliError};

/// The connection and how to make it again.
pub struct Db {
    config: worker_client::ConnConfig,
    client: Mutex<Arc<Client>>,
}

/// A parameter with its type, as `query_typed` takes it.
pub type Param<'a> = (&'a (dyn ToSql + Sync), Type);

impl Db {
    /// Connects as jqctl does (--database-url, DATABASE_URL, libpq variables) and checks jq.
    pub async fn connect(cli: &Cli) -> Result<Db, CliError> {
        let mut config = worker_client::config_from_env(cli.database_url.as_deref())?;
        if config.pg().get_application_name() == Some("jq-worker-client") {
            config.pg_mut().application_name("jqctl dashboard");
        }
        let client = crate::connect(cli).await?;
        Ok(Db { config, client: Mutex::new(Arc::new(client)) })
    }

    /// The current client, reconnected first if the connection was lost.
    async fn client(&self) -> Result<Arc<Client>, tokio_postgres::Error> {
        let mut guard = self.client.lock().await;
        if guard.is_closed() {
            match worker_client::connect(&self.config).await {
                Ok(c) => *guard = Arc::new(c),
                Err(e) => {
                    tracing::warn!("dashboard: reconnect failed: {e}");
                }
            }
        }
        Ok(guard.clone())
    }

    /// Rows of `sql` with typed parameters.
    pub async fn rows(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, tokio_postgres::Error> {
        self.client().await?.query_typed(sql, params).await
    }

    /// At most one row.
    pub async fn opt(&self, sql: &str, params: &[Param<'_>]) -> Result<Option<Row>, tokio_postgres::Error> {
        self.client().await?.query_typed_opt(sql, params).await
    }
}
