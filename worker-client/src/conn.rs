//! One connection owned by one task, reconnected on demand, and the error classification that
//! decides between "reconnect and retry" and "this call is wrong".

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio::task::AbortHandle;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, Row, Statement};
use tokio_util::sync::CancellationToken;

use crate::statement::{is_foreign_statement, Param, StatementMode};
use crate::{ConnConfig, Error};

/// Connects once, with TLS as `config` says (docs/worker-client.md, "TLS"), spawning the
/// connection's I/O task on the current runtime.
///
/// # Errors
///
/// [`Error::Connect`] (one line) when the server cannot be reached, refuses the connection,
/// or its certificate does not verify; [`Error::Config`] when the root certificate file cannot
/// be read or `verify-ca` / `verify-full` has none.
pub async fn connect(config: &ConnConfig) -> Result<Client, Error> {
    crate::tls::connect(config.pg(), config.tls()).await.map(|(client, _io)| client)
}

/// [`connect`], also returning the handle of the connection's I/O task, for a caller that may
/// have to give the connection up in the middle of a call ([`abandon`]).
///
/// # Errors
///
/// As [`connect`].
pub async fn connect_abortable(config: &ConnConfig) -> Result<(Client, AbortHandle), Error> {
    crate::tls::connect(config.pg(), config.tls()).await
}

/// Gives up a connection whose statement may still be running: sends its cancel request on a
/// task of its own (best effort, bounded by [`crate::cancel::CANCEL_WAIT`]; a backend waiting
/// for a lock does not notice a closed socket, so without it the statement would run on) and
/// closes the socket by aborting `io`. Needs a tokio runtime.
pub fn abandon(client: Client, io: AbortHandle, config: std::sync::Arc<ConnConfig>) {
    spawn_cancel(&client, config);
    io.abort();
}

/// Sends `client`'s cancel request on a task of its own (best effort).
fn spawn_cancel(client: &Client, config: std::sync::Arc<ConnConfig>) {
    let token = client.cancel_token();
    tokio::spawn(async move {
        if let Err(e) = crate::tls::send_cancel(&token, config.pg(), config.tls()).await {
            tracing::debug!(error = %e, "cancel request of an abandoned call failed");
        }
    });
}

/// [`Error::Connect`] for a failed connection attempt to `config`, as one line: the server's
/// message with its SQLSTATE, or the chain of I/O causes.
pub fn connect_error(config: &Config, e: &tokio_postgres::Error) -> Error {
    let target = crate::describe_target(config);
    let reason = match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(inner) = src {
                let t = inner.to_string();
                if !s.contains(&t) {
                    s = format!("{s}: {t}");
                }
                src = inner.source();
            }
            s
        }
    };
    Error::Connect { target, reason }
}

/// True when the error says the connection (or the server) is gone or not accepting work right
/// now, so the call should be retried on a new connection rather than reported as wrong.
pub(crate) fn is_transient(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.as_db_error() {
        // Not a server error: I/O, protocol, timeout — the connection is suspect.
        None => e.code().is_none(),
        Some(db) => {
            let code = db.code().code();
            code.starts_with("08")            // connection exception
                || code == "57P01"           // admin_shutdown (pg_terminate_backend, fast stop)
                || code == "57P02"           // crash_shutdown
                || code == "57P03"           // cannot_connect_now (starting up)
                || code == "53300"           // too_many_connections
                || code == "40001"           // serialization_failure: retry is the documented cure
                || code == "40P01"           // deadlock_detected
                // query_canceled: an administrator's pg_cancel_backend, or the 0.1.0 -> 0.2.0
                // upgrade cancelling calls that wait for it (docs/upgrades.md); the retry backs
                // off and gives up at the call's deadline.
                || code == "57014"
        }
    }
}

/// A server error as one line: `message (SQLSTATE xxxxx)`; other errors as their text.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => match std::error::Error::source(e) {
            Some(src) => format!("{e}: {src}"),
            None => e.to_string(),
        },
    }
}

/// A lazily (re)connected client owned by one task, with the statements it prepared: the one
/// place that decides how the library's statements (all in api.rs) are sent.
///
/// In [`StatementMode::Prepared`] the worker's hot calls (claim, complete, heartbeat) are
/// prepared once per connection and then only bound and executed: one round trip per call,
/// and PostgreSQL neither parses nor plans the statement again; keeping them roughly halved
/// the client's database CPU per job (docs/BENCHMARKS.md). In
/// [`StatementMode::Unprepared`] each call is one unnamed Parse/Bind/Execute round trip
/// (`query_typed`), which a transaction-mode pooler without prepared-statement support can
/// route anywhere. A prepared connection that meets a statement that is not its own
/// ([`is_foreign_statement`]) switches to unprepared for good ([`Conn::fall_back`]).
///
/// Every call is bounded ([`Conn::query_bounded`]): a call with no answer within its bound
/// (connecting included) fails with [`QueryError::TimedOut`] and the connection is abandoned —
/// its statement cancelled (best effort), its socket closed — never used again, so no later
/// call can read an earlier call's late answer.
pub(crate) struct Conn {
    /// Shared so that a cancellable call can hold it while the client borrows `self`.
    config: std::sync::Arc<ConnConfig>,
    mode: StatementMode,
    client: Option<Client>,
    /// The client's I/O task: aborted to close the socket when a call times out.
    io: Option<AbortHandle>,
    /// The bound of one call ([`crate::DEFAULT_CALL_TIMEOUT`] unless set); `None` only under
    /// the negative control `no_io_deadline`.
    call_timeout: Option<Duration>,
    /// Statements prepared on `client`, by SQL text; emptied with the client.
    statements: HashMap<String, Statement>,
    /// Negative control only (`JQ_CLIENT_BREAK=no_reconnect`): never connect a second time.
    #[cfg(feature = "test-breaks")]
    once: bool,
    #[cfg(feature = "test-breaks")]
    connected_before: bool,
    /// Negative control only (`JQ_CLIENT_BREAK=always_prepared`): never fall back.
    #[cfg(feature = "test-breaks")]
    never_fall_back: bool,
}

impl Conn {
    pub(crate) fn new(config: impl Into<ConnConfig>, mode: StatementMode) -> Conn {
        Conn {
            config: std::sync::Arc::new(config.into()),
            mode,
            client: None,
            io: None,
            call_timeout: Some(crate::DEFAULT_CALL_TIMEOUT),
            statements: HashMap::new(),
            #[cfg(feature = "test-breaks")]
            once: false,
            #[cfg(feature = "test-breaks")]
            connected_before: false,
            #[cfg(feature = "test-breaks")]
            never_fall_back: false,
        }
    }

    /// A connection that is never re-established once lost: the `no_reconnect` negative
    /// control of tests/reconnect.rs.
    #[cfg(feature = "test-breaks")]
    pub(crate) fn broken_once(config: ConnConfig, mode: StatementMode) -> Conn {
        Conn { once: true, ..Conn::new(config, mode) }
    }

    /// A connection that always prepares and never falls back to unnamed statements (the
    /// client before statement modes): the `always_prepared` negative control of
    /// tests/pooler.rs.
    #[cfg(feature = "test-breaks")]
    pub(crate) fn always_prepared(config: ConnConfig) -> Conn {
        Conn { never_fall_back: true, ..Conn::new(config, StatementMode::Prepared) }
    }

    /// This connection with another call bound (`None`: unbounded, the negative control
    /// `no_io_deadline` only).
    pub(crate) fn with_call_timeout(self, call_timeout: Option<Duration>) -> Conn {
        Conn { call_timeout, ..self }
    }

    /// How this connection sends statements now.
    pub(crate) fn mode(&self) -> StatementMode {
        self.mode
    }

    /// The current client, connecting first when there is none or it has closed.
    pub(crate) async fn get(&mut self) -> Result<&Client, Error> {
        if self.client.as_ref().is_some_and(|c| c.is_closed()) {
            self.reset();
        }
        if self.client.is_none() {
            #[cfg(feature = "test-breaks")]
            {
                if self.once && self.connected_before {
                    return Err(Error::Config("reconnecting is disabled (JQ_CLIENT_BREAK=no_reconnect)".into()));
                }
                self.connected_before = true;
            }
            let (client, io) = crate::tls::connect(self.config.pg(), self.config.tls()).await?;
            self.client = Some(client);
            self.io = Some(io);
            tracing::debug!(target = %crate::describe_target(self.config.pg()), mode = %self.mode, "connected");
        }
        Ok(self.client.as_ref().expect("just connected"))
    }

    /// Forgets the client after an error that makes it suspect; the next [`Conn::get`]
    /// reconnects.
    pub(crate) fn reset(&mut self) {
        self.client = None;
        self.io = None;
        self.statements.clear();
    }

    /// Gives up the connection after a call went unanswered within its bound: sends a cancel
    /// request for whatever the server is still running for it (in a task of its own, bounded
    /// by [`crate::cancel::CANCEL_WAIT`]; on a live server it stops the statement, so a late
    /// claim cannot take jobs for nobody), closes the socket by aborting its I/O task, and
    /// forgets the client: the next call reconnects.
    fn abandon(&mut self) {
        if let Some(client) = self.client.take() {
            spawn_cancel(&client, std::sync::Arc::clone(&self.config));
        }
        if let Some(io) = self.io.take() {
            io.abort();
        }
        self.reset();
    }

    /// Switches this connection to [`StatementMode::Unprepared`] for the rest of its life (a
    /// pooler in front of the server stays there across reconnects) and drops what it had
    /// prepared. Returns false, changing nothing, when it was not in prepared mode (or under
    /// the `always_prepared` control), so a call falls back at most once: never a retry storm.
    fn fall_back(&mut self, why: &tokio_postgres::Error) -> bool {
        #[cfg(feature = "test-breaks")]
        if self.never_fall_back {
            return false;
        }
        if self.mode != StatementMode::Prepared {
            return false;
        }
        tracing::warn!(
            error = %describe(why),
            "the server does not hold this connection's prepared statements (a transaction-mode pooler?): \
             sending unprepared statements from now on; set JQ_STATEMENT_MODE=unprepared to start that way"
        );
        self.mode = StatementMode::Unprepared;
        self.statements.clear();
        true
    }

    /// The current client (connecting first if needed) and `sql` prepared on it with the
    /// parameter `types`, from the cache after the first call on this connection.
    async fn prepared(&mut self, sql: &str, types: &[Type]) -> Result<(&Client, Statement), QueryError> {
        self.get().await.map_err(QueryError::Connect)?;
        let st = match self.statements.get(sql) {
            Some(st) => st.clone(),
            None => {
                let prepared = self.client.as_ref().expect("connected above").prepare_typed(sql, types).await;
                match prepared {
                    Ok(st) => {
                        self.statements.insert(sql.to_owned(), st.clone());
                        st
                    }
                    Err(e) => {
                        if is_transient(&e) {
                            self.reset();
                        }
                        return Err(QueryError::Db(e));
                    }
                }
            }
        };
        Ok((self.client.as_ref().expect("connected above"), st))
    }

    /// Runs `sql` in this connection's mode. A statement the server says is not this
    /// connection's ([`is_foreign_statement`]) makes a prepared connection fall back and run
    /// it once more, unnamed; a kept statement whose result type changed
    /// ([`is_changed_result`]) is prepared again and run once more. Both errors come from
    /// Parse or Bind, before anything ran.
    ///
    /// Bounded by the call timeout, connecting included ([`Conn::query_bounded`]).
    pub(crate) async fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, QueryError> {
        self.query_bounded(sql, params, None, Bound::Call).await
    }

    /// Runs `sql` as [`Conn::query`] does within `bound`; when `cancel_on` fires first, cancels
    /// it on the server and returns what it ended with (rows it returned anyway included).
    /// With no answer within the bound the connection is abandoned ([`Conn::abandon`]) and
    /// the call fails with [`QueryError::TimedOut`]. Checked by tests/half_open.rs.
    pub(crate) async fn query_bounded(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        cancel_on: Option<&CancellationToken>,
        bound: Bound,
    ) -> Result<Vec<Row>, QueryError> {
        let Some(limit) = bound.limit(self.call_timeout) else {
            return self.query_unbounded(sql, params, cancel_on).await;
        };
        match tokio::time::timeout(limit, self.query_unbounded(sql, params, cancel_on)).await {
            Ok(r) => r,
            Err(_) => {
                self.abandon();
                Err(QueryError::TimedOut(limit))
            }
        }
    }

    /// [`Conn::query_bounded`] without the bound: the fallback and re-prepare retries.
    async fn query_unbounded(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        cancel_on: Option<&CancellationToken>,
    ) -> Result<Vec<Row>, QueryError> {
        let kept = self.statements.contains_key(sql);
        match self.run_once(sql, params, cancel_on).await {
            Err(QueryError::Db(e)) if is_foreign_statement(&e) && self.fall_back(&e) => {
                self.run_once(sql, params, cancel_on).await
            }
            Err(QueryError::Db(e)) if kept && is_changed_result(&e) => {
                tracing::debug!(error = %describe(&e), "kept statement refused; preparing it again");
                self.run_once(sql, params, cancel_on).await
            }
            r => r,
        }
    }

    /// One attempt of `sql` in the current mode, cancellable as [`Conn::query_bounded`].
    async fn run_once(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        cancel_on: Option<&CancellationToken>,
    ) -> Result<Vec<Row>, QueryError> {
        // for the cancel request, which cannot borrow self while the query does
        let config = std::sync::Arc::clone(&self.config);
        let r = {
            let (client, statement) = match self.mode {
                StatementMode::Prepared => {
                    let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
                    let (client, st) = self.prepared(sql, &types).await?;
                    (client, Some(st))
                }
                StatementMode::Unprepared => (self.get().await.map_err(QueryError::Connect)?, None),
            };
            let cancel = client.cancel_token();
            let fut = async {
                match &statement {
                    Some(st) => {
                        let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
                        client.query(st, &values).await
                    }
                    None => client.query_typed(sql, params).await,
                }
            };
            tokio::pin!(fut);
            let stop = async {
                match cancel_on {
                    Some(t) => t.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = &mut fut => r,
                _ = stop => {
                    crate::tls::cancel(&cancel, config.pg(), config.tls()).await;
                    fut.await
                }
            }
        };
        self.settle(sql, r).map_err(QueryError::Db)
    }

    /// Runs `sql` as [`Conn::query`] does, reconnecting and retrying on connection errors
    /// (jittered backoff, 100 ms to 5 s) until `deadline`.
    pub(crate) async fn query_retrying(
        &mut self,
        deadline: Instant,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, CallErr> {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            let err = match self.query(sql, params).await {
                Ok(rows) => return Ok(rows),
                // query dropped the suspect connection: retry on a new one
                Err(e @ QueryError::TimedOut(_)) => e.to_string(),
                Err(QueryError::Db(e)) if is_transient(&e) => describe(&e),
                Err(QueryError::Db(e)) => return Err(CallErr::Refused(describe(&e))),
                Err(QueryError::Connect(e)) => e.to_string(),
            };
            let delay = backoff.next_delay();
            if Instant::now() + delay >= deadline {
                return Err(CallErr::GaveUp(err));
            }
            tracing::warn!(error = %err, "report: connection problem; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    /// Looks at a call's result: a server error drops `sql`'s prepared statement, so the next
    /// call prepares it again; an error that makes the connection suspect drops the connection
    /// (and every statement).
    pub(crate) fn settle<T>(&mut self, sql: &str, r: Result<T, tokio_postgres::Error>) -> Result<T, tokio_postgres::Error> {
        if let Err(e) = &r {
            if is_transient(e) {
                self.reset();
            } else {
                self.statements.remove(sql);
            }
        }
        r
    }
}

/// True for the error a kept statement gets when what it returns changed since it was
/// prepared (e.g. after `ALTER EXTENSION jq UPDATE`): 0A000 "cached plan must not change
/// result type", raised by the server's `RevalidateCachedQuery` at Bind, before it runs, so
/// preparing it again and retrying is safe.
pub(crate) fn is_changed_result(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.as_db_error().is_some_and(|db| {
        *db.code() == SqlState::FEATURE_NOT_SUPPORTED
            // the routine is not translated (lc_messages); the message is, so it is a fallback
            && (db.routine() == Some("RevalidateCachedQuery")
                || db.message().starts_with("cached plan must not change result type"))
    })
}

/// Why a [`Conn::query_retrying`] call failed.
#[derive(Debug)]
pub(crate) enum CallErr {
    /// The deadline passed while the server could not be reached.
    GaveUp(String),
    /// The server refused the call itself (not a connection problem).
    Refused(String),
}

impl From<QueryError> for crate::Error {
    fn from(e: QueryError) -> crate::Error {
        match e {
            QueryError::Connect(e) => e,
            QueryError::Db(e) => crate::Error::Db(describe(&e)),
            e @ QueryError::TimedOut(_) => crate::Error::Db(e.to_string()),
        }
    }
}

/// Why a [`Conn::query`] failed.
#[derive(Debug)]
pub(crate) enum QueryError {
    /// No connection could be made.
    Connect(Error),
    /// The server (or the connection) failed the call; see [`is_transient`].
    Db(tokio_postgres::Error),
    /// No answer within this bound: the connection was abandoned ([`Conn::abandon`]); the
    /// call may or may not have run on the server.
    TimedOut(Duration),
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueryError::Connect(e) => write!(f, "{e}"),
            QueryError::Db(e) => f.write_str(&describe(e)),
            QueryError::TimedOut(d) => write!(
                f,
                "no answer from the server within {} (the server or the path to it stopped answering): connection dropped",
                crate::format_duration(*d)
            ),
        }
    }
}

/// What bounds one call: the call timeout, plus the time the statement may rightly take on
/// the server (a long-poll wait), or less (a heartbeat must leave time to retry before the
/// leases it renews run out).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bound {
    /// The call timeout.
    Call,
    /// The call timeout plus this much (a claim's `wait`).
    Plus(Duration),
    /// The call timeout, or this much if less.
    AtMost(Duration),
}

impl Bound {
    /// The limit of a call on a connection whose call timeout is `call_timeout` (`None`: no
    /// limit, the negative control `no_io_deadline`).
    fn limit(self, call_timeout: Option<Duration>) -> Option<Duration> {
        let t = call_timeout?;
        Some(match self {
            Bound::Call => t,
            Bound::Plus(d) => t + d,
            Bound::AtMost(d) => t.min(d),
        })
    }
}

/// Capped exponential backoff with jitter, for reconnects and idle polling.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Backoff {
        Backoff { min, max, next: min }
    }

    /// The next delay, drawn uniformly from [d/2, d] where d doubles from `min` up to `max`.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        let half = d / 2;
        half + half.mul_f64(jitter_fraction())
    }

    pub(crate) fn reset(&mut self) {
        self.next = self.min;
    }
}

/// A number in [0, 1) that differs between calls and processes (not cryptographic: it only
/// spreads workers' retries apart).
pub(crate) fn jitter_fraction() -> f64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test cluster pg_test/run starts (`JQ_TEST_PGHOST` / `JQ_TEST_PGPORT`), database
    /// `postgres`; the tests use temporary tables only.
    fn test_config() -> Config {
        jq_pg_test::conninfo("postgres").parse().expect("test conninfo")
    }

    /// A kept statement whose result type changed (0A000 "cached plan must not change result
    /// type", as after an `ALTER EXTENSION jq UPDATE` that changes what a kept statement
    /// returns) is prepared again and the call succeeds. Seen failing without the retry in
    /// `Conn::query` (the call failed with 0A000 "cached plan must not change result type").
    #[tokio::test]
    async fn a_statement_whose_result_changed_is_prepared_again() {
        let mut conn = Conn::new(test_config(), StatementMode::Prepared);
        conn.query("CREATE TEMP TABLE kept (a int)", &[]).await.expect("create");
        conn.query("INSERT INTO kept VALUES (1)", &[]).await.expect("insert");
        let sql = "SELECT * FROM kept";
        assert_eq!(conn.query(sql, &[]).await.expect("first call")[0].len(), 1);
        conn.query("ALTER TABLE kept ADD COLUMN b int", &[]).await.expect("alter");
        let rows = conn.query(sql, &[]).await.expect("prepared again and run");
        assert_eq!(rows[0].len(), 2);
    }

    /// A kept statement the server has forgotten (26000, as behind a transaction-mode pooler,
    /// or after `DEALLOCATE ALL`) switches the connection to unprepared statements and the
    /// call succeeds, sent once more; from then on nothing named is kept on the server. Seen
    /// failing with `Conn::fall_back` returning false at once (26000 "prepared statement
    /// \"s0\" does not exist").
    #[tokio::test]
    async fn a_forgotten_statement_switches_to_unprepared() {
        let mut conn = Conn::new(test_config(), StatementMode::Prepared);
        let sql = "SELECT 1::int4 + $1::int4";
        let two: i32 = conn.query(sql, &[(&1i32, Type::INT4)]).await.expect("first call")[0].get(0);
        assert_eq!(two, 2);
        conn.get().await.expect("client").batch_execute("DEALLOCATE ALL").await.expect("deallocate");
        let three: i32 = conn.query(sql, &[(&2i32, Type::INT4)]).await.expect("sent again, unprepared")[0].get(0);
        assert_eq!(three, 3);
        assert_eq!(conn.mode(), StatementMode::Unprepared);
        conn.query(sql, &[(&3i32, Type::INT4)]).await.expect("unprepared call");
        let kept: i64 = conn.query("SELECT count(*) FROM pg_prepared_statements", &[]).await.expect("count")[0].get(0);
        assert_eq!(kept, 0);
    }

    /// Unprepared mode leaves no statement on the server; prepared mode keeps one per SQL text.
    #[tokio::test]
    async fn unprepared_mode_keeps_nothing_on_the_server() {
        let count = "SELECT count(*) FROM pg_prepared_statements";
        for (mode, kept) in [(StatementMode::Unprepared, 0i64), (StatementMode::Prepared, 2)] {
            let mut conn = Conn::new(test_config(), mode);
            conn.query("SELECT $1::text", &[(&"x", Type::TEXT)]).await.expect("call");
            let n: i64 = conn.query(count, &[]).await.expect("count")[0].get(0);
            assert_eq!(n, kept, "{mode}");
        }
    }

    /// After its backend is killed, a connection comes back with nothing kept from the old one:
    /// the next calls run on a new backend.
    #[tokio::test]
    async fn a_killed_connection_comes_back() {
        let mut conn = Conn::new(test_config(), StatementMode::Prepared);
        let sql = "SELECT pg_backend_pid()";
        let pid: i32 = conn.query(sql, &[]).await.expect("pid")[0].get(0);
        let other = connect(&test_config().into()).await.expect("second connection");
        other.query("SELECT pg_terminate_backend($1)", &[&pid]).await.expect("terminate");
        // Either the client already saw the connection close (the next call reconnects at
        // once), or the next call fails with a connection error and drops the client.
        let again = match conn.query(sql, &[]).await {
            Ok(rows) => rows[0].get::<_, i32>(0),
            Err(QueryError::Db(e)) if is_transient(&e) => conn.query(sql, &[]).await.expect("reconnected")[0].get(0),
            Err(e) => panic!("{e:?}"),
        };
        assert_ne!(again, pid);
    }

    /// A call with no answer within its bound fails with `TimedOut` at the bound, and the
    /// connection is abandoned: the statement still running for it on the server is cancelled
    /// (its backend is idle again or gone within seconds, not 30 s later), and the next call runs
    /// on a new backend. Seen failing with the cancel request left out of `Conn::abandon` (the
    /// old backend still ran `pg_sleep` when the wait below ran out).
    #[tokio::test]
    async fn an_unanswered_call_is_cut_off_and_its_statement_cancelled() {
        let mut conn = Conn::new(test_config(), StatementMode::Prepared).with_call_timeout(Some(Duration::from_millis(500)));
        let pid: i32 = conn.query("SELECT pg_backend_pid()", &[]).await.expect("pid")[0].get(0);
        let started = Instant::now();
        match conn.query("SELECT pg_sleep(30)", &[]).await {
            Err(QueryError::TimedOut(d)) => assert_eq!(d, Duration::from_millis(500)),
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(5), "cut off after {:?}", started.elapsed());
        let again: i32 = conn.query("SELECT pg_backend_pid()", &[]).await.expect("reconnected")[0].get(0);
        assert_ne!(again, pid);
        let sleeping = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active'";
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let n: i64 = conn.query(sleeping, &[(&pid, Type::INT4)]).await.expect("count")[0].get(0);
            if n == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "backend {pid} still runs the abandoned statement");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
