//! What one connection is doing, as its server's timeouts need to know: when it
//! last received bytes, how many requests are in service, how many request bodies
//! are still arriving; and the wrappers of its socket and of its request bodies
//! that keep that up to date (the body's also enforcing `read_timeout`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

pub struct Activity {
    opened: Instant,
    /// Milliseconds since `opened` of the last bytes received.
    last_read: AtomicU64,
    /// Milliseconds since `opened` of the last time no request was in service.
    idle_since: AtomicU64,
    requests: AtomicUsize,
    receiving: AtomicUsize,
    /// Bytes of the request bodies still arriving.
    arriving_bytes: AtomicU64,
    served: AtomicBool,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            opened: Instant::now(),
            last_read: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            requests: AtomicUsize::new(0),
            receiving: AtomicUsize::new(0),
            arriving_bytes: AtomicU64::new(0),
            served: AtomicBool::new(false),
        })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn since(&self, millis: &AtomicU64) -> Duration {
        Duration::from_millis(self.now().saturating_sub(millis.load(Ordering::Acquire)))
    }

    /// How long the connection has received nothing.
    pub fn silent_for(&self) -> Duration {
        self.since(&self.last_read)
    }

    /// How long no request has been in service; `None` while one is.
    pub fn idle_for(&self) -> Option<Duration> {
        (self.requests.load(Ordering::Acquire) == 0).then(|| self.since(&self.idle_since))
    }

    /// Whether a request ever reached the server on this connection.
    pub fn served(&self) -> bool {
        self.served.load(Ordering::Acquire)
    }

    /// Whether a request body has not arrived in full.
    pub fn receiving(&self) -> bool {
        self.receiving.load(Ordering::Acquire) > 0
    }

    /// Counts a request in service until the returned guard is dropped.
    pub fn request(self: &Arc<Self>) -> InService {
        self.served.store(true, Ordering::Release);
        self.requests.fetch_add(1, Ordering::AcqRel);
        InService(Arc::clone(self))
    }
}

/// A request in service on its connection.
pub struct InService(Arc<Activity>);

impl Drop for InService {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.idle_since.store(activity.now(), Ordering::Release);
        activity.requests.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's socket, noting when bytes arrive.
pub struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Tracked<S> {
    pub fn new(inner: S, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            let now = self.activity.now();
            self.activity.last_read.store(now, Ordering::Release);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
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

/// A request body that did not arrive within `read_timeout` of its headers.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?} (read_timeout)")]
pub struct ReadTimeout(pub Duration);

/// A request body cut off because the bodies arriving on its connection took more
/// than the connection's share of memory.
#[derive(Debug, thiserror::Error)]
#[error("the request bodies arriving on this connection hold more than its {0} bytes")]
pub struct ConnectionShare(pub u64);

/// A request body as its handler reads it: counted as arriving until its end is
/// read or it is dropped, and cut off with [`ReadTimeout`] when it takes too long,
/// or with [`ConnectionShare`] when its connection's bodies hold too much.
pub struct TrackedBody {
    inner: Incoming,
    activity: Option<Arc<Activity>>,
    deadline: Option<(Pin<Box<Sleep>>, Duration)>,
    max_arriving_bytes: Option<u64>,
    /// This body's bytes counted in its connection's arriving bytes.
    counted: u64,
}

impl TrackedBody {
    pub fn new(
        inner: Incoming,
        activity: &Arc<Activity>,
        read_timeout: Option<Duration>,
        max_arriving_bytes: Option<u64>,
    ) -> Self {
        let arriving = !inner.is_end_stream();
        if arriving {
            activity.receiving.fetch_add(1, Ordering::AcqRel);
        }
        Self {
            inner,
            activity: arriving.then(|| Arc::clone(activity)),
            deadline: read_timeout
                .filter(|_| arriving)
                .map(|after| (Box::pin(tokio::time::sleep(after)), after)),
            max_arriving_bytes,
            counted: 0,
        }
    }

    fn arrived(&mut self) {
        if let Some(activity) = self.activity.take() {
            activity.receiving.fetch_sub(1, Ordering::AcqRel);
            activity
                .arriving_bytes
                .fetch_sub(self.counted, Ordering::AcqRel);
        }
        self.deadline = None;
    }

    /// Counts `bytes` more as arriving on the connection; false past its share.
    fn within_share(&mut self, bytes: u64) -> bool {
        let Some(activity) = &self.activity else {
            return true;
        };
        self.counted += bytes;
        let total = activity.arriving_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.max_arriving_bytes.is_none_or(|share| total <= share)
    }
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        self.arrived();
    }
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match polled {
            Poll::Ready(None) => {
                self.arrived();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(err))) => {
                self.arrived();
                Poll::Ready(Some(Err(err.into())))
            }
            Poll::Ready(Some(Ok(frame))) => {
                let bytes = frame.data_ref().map_or(0, |data| data.len() as u64);
                if !self.inner.is_end_stream() && !self.within_share(bytes) {
                    let share = self.max_arriving_bytes.unwrap_or_default();
                    self.arrived();
                    return Poll::Ready(Some(Err(ConnectionShare(share).into())));
                }
                if self.inner.is_end_stream() {
                    self.arrived();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                let expired = match &mut self.deadline {
                    Some((sleep, after)) => sleep.as_mut().poll(cx).is_ready().then_some(*after),
                    None => None,
                };
                match expired {
                    Some(after) => {
                        self.arrived();
                        Poll::Ready(Some(Err(ReadTimeout(after).into())))
                    }
                    None => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
