//! How the library sends its statements ([`StatementMode`]) and which server errors say that a
//! named prepared statement cannot be used on this connection, so that it falls back to
//! unnamed statements (see `Conn` in conn.rs, which alone sends statements).

use std::fmt;
use std::str::FromStr;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use crate::Error;

/// The environment variable [`StatementMode::from_env`] reads.
pub const STATEMENT_MODE_ENV: &str = "JQ_STATEMENT_MODE";

/// A statement parameter with the PostgreSQL type it is sent as. Every statement of the
/// library casts its parameters (`$1::int8`), so the types are known without asking the
/// server; the unprepared mode needs them (`query_typed`), the prepared one passes them to
/// `prepare_typed`.
pub(crate) type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// How a worker's connections send the library's statements.
///
/// - [`StatementMode::Prepared`] (the default): each statement is prepared once per
///   connection (a named server-side statement) and then only bound and executed. Fastest
///   directly against PostgreSQL, or through a pooler that keeps prepared statements
///   (PgBouncer 1.21+ with `max_prepared_statements`, or any pooler in session mode).
/// - [`StatementMode::Unprepared`]: every call is one unnamed Parse/Bind/Execute in one round
///   trip (tokio-postgres' `query_typed`); nothing outlives the call on the server, so it
///   works through any transaction-mode pooler (PgBouncer 1.18 of Debian 12 included). The
///   server parses and plans each call again.
///
/// A connection in prepared mode that the server tells its statement does not exist (26000),
/// already exists (42P05) or takes other parameters (a Bind refused with 08P01) switches to
/// unprepared for the rest of its life and sends that statement once more, unnamed: those
/// errors come from Parse or Bind, before the statement ran, so the retry cannot run it twice.
/// See docs/worker-client.md, "Through a pooler".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StatementMode {
    /// Named statements prepared once per connection and kept (the default).
    #[default]
    Prepared,
    /// Unnamed statements, parsed and run in one round trip, kept nowhere.
    Unprepared,
}

impl StatementMode {
    /// The mode named in `JQ_STATEMENT_MODE` (`prepared` or `unprepared`), `None` when it is
    /// unset or empty.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for any other value.
    pub fn from_env() -> Result<Option<StatementMode>, Error> {
        match std::env::var(STATEMENT_MODE_ENV) {
            Ok(v) if !v.trim().is_empty() => {
                v.parse().map(Some).map_err(|e: Error| Error::Config(format!("{STATEMENT_MODE_ENV}: {e}")))
            }
            _ => Ok(None),
        }
    }
}

impl FromStr for StatementMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<StatementMode, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "prepared" => Ok(StatementMode::Prepared),
            "unprepared" => Ok(StatementMode::Unprepared),
            other => Err(Error::Config(format!("unknown statement mode {other:?}: expected prepared or unprepared"))),
        }
    }
}

impl fmt::Display for StatementMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StatementMode::Prepared => "prepared",
            StatementMode::Unprepared => "unprepared",
        })
    }
}

/// True for the errors that say this connection's named statements are not its own: the
/// server the call reached does not have the statement (26000 — a transaction-mode pooler
/// without prepared-statement support sent the Bind to another server connection, or a
/// `DISCARD ALL` / `DEALLOCATE ALL` ran), has one of that name already (42P05 — another client
/// of the pooler prepared it there), or has one of that name taking other parameters (08P01
/// "bind message supplies N parameters, but prepared statement … requires M"). Each is raised
/// at Parse or Bind, before anything ran. Checked by conn.rs's tests
/// `a_forgotten_statement_switches_to_unprepared` and tests/pooler.rs.
pub(crate) fn is_foreign_statement(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|db| {
        *db.code() == SqlState::INVALID_SQL_STATEMENT_NAME
            || *db.code() == SqlState::DUPLICATE_PSTATEMENT
            // the routine is not translated (lc_messages); the message is, so it is a fallback
            || (*db.code() == SqlState::PROTOCOL_VIOLATION
                && (db.routine() == Some("exec_bind_message") || db.message().starts_with("bind message")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_bad_ones_are_one_line_errors() {
        assert_eq!("prepared".parse::<StatementMode>().unwrap(), StatementMode::Prepared);
        assert_eq!(" Unprepared ".parse::<StatementMode>().unwrap(), StatementMode::Unprepared);
        let e = "unnamed".parse::<StatementMode>().unwrap_err().to_string();
        assert!(e.contains("expected prepared or unprepared") && !e.contains('\n'), "{e}");
    }
}
