//! Cancelling a running statement (the long-poll claim at shutdown) in a way PgBouncer honours.
//!
//! tokio-postgres' `CancelToken::cancel_query` sends the CancelRequest, then shuts the socket
//! down and closes it at once. PostgreSQL acts on the request anyway, but PgBouncer (1.18)
//! forwards it only later, over a server connection it opens for it, and drops it when the
//! client end has closed by then ("closing because: client unexpected eof"): the claim kept
//! waiting and the worker's shutdown took the whole `idle_wait`. libpq's `PQcancel` instead
//! waits for the other end to close the connection, which both PostgreSQL and PgBouncer do
//! once they have handled the request; [`send`] does the same, bounded by [`CANCEL_WAIT`].
//! Over TLS the request is wrapped the same way, but whether the TLS stream's shutdown reaches
//! the wait is up to the TLS crate (not tested through PgBouncer). Checked by tests/pooler.rs `pickup_through_pgbouncer` (the worker stops
//! within 20 s of SIGTERM although its claim waits up to 30 s).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
#[cfg(unix)]
use tokio::net::UnixStream;
use tokio_postgres::config::Host;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{CancelToken, Config};

/// Longest wait for the server (or pooler) to take the cancel request and close.
pub(crate) const CANCEL_WAIT: Duration = Duration::from_secs(5);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Sends `token`'s CancelRequest to the first host of `config` through `tls` (as the token's
/// connection was made: its SSL mode is in the token) and waits until the other end closes
/// the connection; all of it, the connect included, within [`CANCEL_WAIT`] (a path that
/// accepts and then says nothing must not hold the caller). Called by `tls::cancel`.
pub(crate) async fn send<M>(token: &CancelToken, config: &Config, tls: M) -> Result<(), BoxError>
where
    M: MakeTlsConnect<WaitForClose<Stream>>,
    M::Error: Into<BoxError>,
{
    match tokio::time::timeout(CANCEL_WAIT, send_unbounded(token, config, tls)).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {CANCEL_WAIT:?}").into()),
    }
}

async fn send_unbounded<M>(token: &CancelToken, config: &Config, mut tls: M) -> Result<(), BoxError>
where
    M: MakeTlsConnect<WaitForClose<Stream>>,
    M::Error: Into<BoxError>,
{
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let (stream, host) = match (config.get_hostaddrs().first(), config.get_hosts().first()) {
        (Some(addr), host) => {
            let name = match host {
                Some(Host::Tcp(h)) => h.clone(),
                _ => addr.to_string(),
            };
            (Stream::Tcp(TcpStream::connect((*addr, port)).await?), name)
        }
        (None, Some(Host::Tcp(h))) => (Stream::Tcp(TcpStream::connect((h.as_str(), port)).await?), h.clone()),
        #[cfg(unix)]
        (None, Some(Host::Unix(dir))) => {
            (Stream::Unix(UnixStream::connect(dir.join(format!(".s.PGSQL.{port}"))).await?), String::new())
        }
        (None, None) => return Err("no host to send the cancel request to".into()),
    };
    let connect = tls.make_tls_connect(&host).map_err(Into::into)?;
    token.cancel_query_raw(WaitForClose(stream), connect).await.map_err(Into::into)
}

/// A TCP or Unix-domain stream.
pub(crate) enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(unix)]
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(unix)]
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            #[cfg(unix)]
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(unix)]
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// A stream whose shutdown waits for the other end to close instead of closing this end: what
/// `cancel_query_raw` calls after writing the request.
pub(crate) struct WaitForClose<S>(S);

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
