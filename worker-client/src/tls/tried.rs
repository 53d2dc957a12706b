//! A connector wrapper that records whether the server agreed to TLS, so `sslmode=prefer` can
//! tell a failed TLS attempt (retried plain) from a server it never reached (not retried).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};

/// `inner`, setting `attempted` when a TLS handshake starts (the server answered the
/// SSLRequest with `S`).
#[derive(Clone)]
pub(crate) struct Tried<T> {
    inner: T,
    attempted: Arc<AtomicBool>,
}

impl<T> Tried<T> {
    pub(crate) fn new(inner: T, attempted: Arc<AtomicBool>) -> Tried<T> {
        Tried { inner, attempted }
    }
}

impl<S, T: MakeTlsConnect<S>> MakeTlsConnect<S> for Tried<T> {
    type Stream = T::Stream;
    type TlsConnect = Tried<T::TlsConnect>;
    type Error = T::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Self::TlsConnect, T::Error> {
        Ok(Tried { inner: self.inner.make_tls_connect(domain)?, attempted: self.attempted.clone() })
    }
}

impl<S, T: TlsConnect<S>> TlsConnect<S> for Tried<T> {
    type Stream = T::Stream;
    type Error = T::Error;
    type Future = T::Future;

    fn connect(self, stream: S) -> T::Future {
        self.attempted.store(true, Ordering::SeqCst);
        self.inner.connect(stream)
    }
}
