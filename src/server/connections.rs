//! A cap on open hook connections. Each accepted connection holds a slot for as long as
//! it is open; a connection accepted while every slot is taken is closed at once, before
//! any byte of it is read, so idle or slow connections cannot pile up without bound.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Hands out one slot per connection (see the module docs).
#[derive(Clone)]
pub struct ConnectionLimit {
    slots: Arc<Semaphore>,
    max: usize,
}

impl ConnectionLimit {
    pub fn new(max: usize) -> ConnectionLimit {
        ConnectionLimit {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// Connections open right now.
    pub fn open(&self) -> usize {
        self.max.saturating_sub(self.slots.available_permits())
    }
}

impl<I, S> Accept<I, S> for ConnectionLimit {
    type Stream = Counted<I>;
    type Service = S;
    type Future = std::future::Ready<io::Result<(Counted<I>, S)>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        std::future::ready(match self.slots.clone().try_acquire_owned() {
            Ok(slot) => Ok((
                Counted {
                    inner: stream,
                    _slot: slot,
                },
                service,
            )),
            Err(_) => {
                tracing::warn!(
                    limit = self.max,
                    "hook connection refused: too many open connections"
                );
                Err(io::Error::other(format!(
                    "more than {} open hook connections",
                    self.max
                )))
            }
        })
    }
}

/// A connection that gives its slot back when it is dropped.
pub struct Counted<I> {
    inner: I,
    _slot: OwnedSemaphorePermit,
}

impl<I: AsyncRead + Unpin> AsyncRead for Counted<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Counted<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
