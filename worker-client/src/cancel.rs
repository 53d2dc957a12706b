//! Cancelling a running statement (the long-poll claim at shutdown) in a way PgBouncer honours.
//!
//! tokio-postgres' `CancelToken::cancel_query` sends the CancelRequest, then shuts the socket
//! down and closes it at once. PostgreSQL acts on the request anyway, but PgBouncer (1.18)
//! forwards it only later, over a server connection it opens for it, and drops it when the
//! client end has closed by then ("closing because: client unexpected eof"): the claim kept
//! waiting and the worker's shutdown took the whole `idle_wait`. libpq's `PQcancel` instead
//! waits for the other end to close the connection, which both PostgreSQL and PgBouncer do
//! once they have handled the request; [`cancel`] does the same, bounded by
//! [`CANCEL_WAIT`]. Checked by tests/pooler.rs `pickup_through_pgbouncer` (the worker stops
//! within 20 s of SIGTERM although its claim waits up to 30 s).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::Host;
use tokio_postgres::{CancelToken, Config, NoTls};

/// Longest wait for the server (or pooler) to close the cancel connection.
pub(crate) const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// Sends `token`'s CancelRequest to the first host of `config` and waits until the other end
/// closes the connection (at most [`CANCEL_WAIT`]). Errors are logged, not returned: the
/// caller waits for its statement to end either way.
pub(crate) async fn cancel(config: &Config, token: &CancelToken) {
    let r = tokio::time::timeout(CANCEL_WAIT, send(config, token)).await;
    match r {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "cancel request failed"),
        Err(_) => tracing::debug!("cancel request: no answer within {CANCEL_WAIT:?}"),
    }
}

async fn send(config: &Config, token: &CancelToken) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    match config.get_hosts().first() {
        Some(Host::Tcp(host)) => {
            let stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            token.cancel_query_raw(WaitForClose(stream), NoTls).await?;
        }
        #[cfg(unix)]
        Some(Host::Unix(dir)) => {
            let stream = tokio::net::UnixStream::connect(dir.join(format!(".s.PGSQL.{port}"))).await?;
            token.cancel_query_raw(WaitForClose(stream), NoTls).await?;
        }
        None => return Err("no host to send the cancel request to".into()),
    }
    Ok(())
}

/// A stream whose shutdown waits for the other end to close instead of closing this end: what
/// `cancel_query_raw` calls after writing the request.
struct WaitForClose<S>(S);

impl<S: AsyncRead + Unpin> AsyncRead for WaitForClose<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WaitForClose<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    /// Reads (and discards) until end of stream: the peer has handled the request.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut scratch = [0u8; 64];
        loop {
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.0).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => continue,
                // a reset is the other end closing too
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::ConnectionReset => return Poll::Ready(Ok(())),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
