//! Connections whose client stops reading are closed.
//!
//! Policy: a write that has waited [`DownloadSettings::stall`](engine::settings::DownloadSettings)
//! for the socket to take a byte fails, so hyper drops the connection and, with it, the response
//! body: a streamed download's slot and database connection come back. The request timeout
//! cannot do this: it ends when the handler returns, before a streamed body is sent, and
//! hyper stops polling a body while the socket is full, so no timer inside the body would run.
//! Pages fit in the socket buffers and never wait that long.

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    time::Sleep,
};

/// A stream whose writes fail once one has been pending for `limit`.
pub struct StallGuard<S> {
    inner: S,
    limit: Duration,
    /// Running while a write or flush is pending; cleared by any progress.
    waiting: Option<Pin<Box<Sleep>>>,
}

impl<S> StallGuard<S> {
    pub fn new(inner: S, limit: Duration) -> Self {
        Self { inner, limit, waiting: None }
    }

    fn progress<T>(&mut self, polled: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.waiting = None;
            return polled;
        }
        let limit = self.limit;
        let timer = self.waiting.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.waiting = None;
                tracing::info!(limit_secs = limit.as_secs(), "closing a connection whose client stopped reading");
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the client stopped reading")))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallGuard<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallGuard<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.progress(polled, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.progress(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.progress(polled, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.progress(polled, cx)
    }
}

/// A TCP listener whose connections are [`StallGuard`]ed.
pub struct StallListener {
    inner: TcpListener,
    limit: Duration,
}

impl StallListener {
    pub fn new(inner: TcpListener, limit: Duration) -> Self {
        Self { inner, limit }
    }
}

impl axum::serve::Listener for StallListener {
    type Io = StallGuard<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        (StallGuard::new(io, self.limit), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_write_the_reader_never_takes_fails_after_the_limit_and_one_it_takes_does_not() {
        let (ours, mut theirs) = tokio::io::duplex(16);
        let mut guarded = StallGuard::new(ours, Duration::from_millis(200));
        guarded.write_all(b"0123456789").await.unwrap();
        let mut got = [0u8; 10];
        theirs.read_exact(&mut got).await.unwrap();
        let started = std::time::Instant::now();
        let err = guarded.write_all(&[0u8; 64]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(200));
    }
}
