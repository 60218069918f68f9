//! Accepting connections, bounded against clients that never finish: at most
//! [`ConnectionLimits::max_connections`] open at once (one more is closed at once, before a byte
//! is read, and counted), a request head that has not fully arrived within
//! [`ConnectionLimits::header_timeout`] closes the connection (also a keep-alive connection idle
//! that long between requests), a request body that has not fully arrived within
//! [`ConnectionLimits::body_timeout`] is answered 408 (see [`super::body_deadline`]), and a
//! response the client stops reading for [`ConnectionLimits::write_timeout`] closes the
//! connection ([`WriteDeadline`]; each connection's kernel send buffer is fixed at
//! [`ConnectionLimits::send_buffer_bytes`], since the kernel would otherwise grow it to
//! megabytes and hide a stalled reader for tens of seconds — and hold that much memory per
//! connection). Slow or silent clients therefore hold a connection for a
//! bounded time and never hold engine sequences beyond it (a streaming response whose client
//! stopped reading ends its sequences: [`super::sse`]).
//!
//! `axum::serve` has none of these bounds (its hyper connections get no timer, so hyper's own
//! header timeout never fires); this is its accept loop with them, HTTP/1.1 only.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, Semaphore};

/// The bounds on connections; see the module doc.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub write_timeout: Duration,
    /// `SO_SNDBUF` of every connection.
    pub send_buffer_bytes: usize,
    /// How long a shutdown waits for open connections to finish before it drops them.
    pub shutdown_grace: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            send_buffer_bytes: 256 << 10,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// Serve `router` on `listener` until `shutdown` resolves; then stop accepting, let open
/// connections finish their requests (up to `shutdown_grace`) and return. `refused` is called
/// for each connection closed because `max_connections` were open.
pub async fn serve_bounded(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ConnectionLimits,
    refused: impl Fn() + Send + 'static,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let max = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let open = Arc::new(Semaphore::new(max));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors and the like: the error is the host's, not a client's; wait
                // for connections to close instead of spinning.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            refused();
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let _ = nix::sys::socket::setsockopt(&stream, nix::sys::socket::sockopt::SndBuf, &limits.send_buffer_bytes);
        let io = TokioIo::new(WriteDeadline::new(stream, limits.write_timeout));
        let service = TowerToHyperService::new(router.clone());
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            let mut conn = std::pin::pin!(builder.serve_connection(io, service));
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stop.wait_for(|s| *s) => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every permit back: every connection closed (or the grace period over).
    let _ = tokio::time::timeout(limits.shutdown_grace, open.acquire_many(max as u32)).await;
    Ok(())
}

/// A stream whose writes fail with `TimedOut` once one has waited `timeout` for the client to
/// read: a client that stops reading a response cannot hold its connection (and the response's
/// producer) forever.
pub struct WriteDeadline<S> {
    inner: S,
    timeout: Duration,
    /// Armed while a write is pending; cleared when one completes.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub fn new(inner: S, timeout: Duration) -> Self {
        WriteDeadline { inner, timeout, stalled: None }
    }

    /// Called when the inner write is pending: arm the deadline, or fail once it has passed.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client has not read the response for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Pending => this.pending(cx),
            done => {
                this.stalled = None;
                done
            }
        }
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.pending(cx),
            done => {
                this.stalled = None;
                done
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending => this.pending(cx),
            done => {
                this.stalled = None;
                done
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::WriteDeadline;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A writer whose reader stops reading fails after the timeout; one whose reader reads does not.
    #[tokio::test]
    async fn a_write_the_reader_never_takes_times_out() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut w = WriteDeadline::new(a, Duration::from_millis(100));
        // The buffer fills; the next write waits for a reader that never comes.
        w.write_all(&[0u8; 64]).await.unwrap();
        let err = w.write_all(&[1u8; 8]).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        // Read and the same stream writes again (the deadline is per stalled write).
        let mut buf = [0u8; 64];
        b.read_exact(&mut buf).await.unwrap();
        w.write_all(&[2u8; 8]).await.unwrap();
    }
}
