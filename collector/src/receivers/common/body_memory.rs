//! The memory of request bodies still arriving: counted in the process's memory
//! account as their bytes arrive (for gRPC, the whole message as soon as its
//! length prefix is read, as tonic reserves that much then), released when the
//! body is dropped (read to its end, or abandoned), and refused once a memory
//! limiter of the receiver's pipelines is above its soft limit, so that bodies
//! sent slowly or never finished cannot take the process past the limit.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use opscope_model::memory::{MemoryAccount, MemoryHold};
use opscope_processors::memory_limiter::MemoryLimiter;

use crate::receivers::Consumers;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where the bodies of one receiver's requests are counted and admitted.
#[derive(Clone)]
pub struct BodyMemory {
    limiters: Arc<[MemoryLimiter]>,
    account: MemoryAccount,
}

/// A request body refused because a memory limiter is above its soft limit.
#[derive(Debug, thiserror::Error)]
#[error("opscope is over its memory limit; retry later")]
pub struct OverMemoryLimit;

/// How a body tells its size before it has arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Only by what has arrived.
    Plain,
    /// gRPC's length-prefixed message: its length is reserved once the prefix is read.
    Grpc,
}

/// The 1-byte compression flag and 4-byte length that start a gRPC message.
const GRPC_PREFIX: usize = 5;

impl BodyMemory {
    /// `None` when no pipeline of the receiver has a memory limiter: then nothing
    /// reads the count.
    pub fn of(consumers: &Consumers) -> Option<Self> {
        let limiters: Vec<MemoryLimiter> = (consumers.traces.memory_limiters())
            .chain(consumers.logs.memory_limiters())
            .chain(consumers.metrics.memory_limiters())
            .cloned()
            .collect();
        let account = limiters.first()?.account().clone();
        Some(Self {
            limiters: limiters.into(),
            account,
        })
    }

    /// The lowest soft limit of the receiver's memory limiters.
    pub fn soft_limit(&self) -> u64 {
        (self.limiters.iter())
            .map(|limiter| limiter.limits().soft)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Whether `incoming` more bytes may be taken in now.
    pub fn admits(&self, incoming: u64) -> bool {
        self.limiters.iter().all(|limiter| limiter.admits(incoming))
    }

    /// `body`, its bytes held in the account as they arrive; when a limiter stops
    /// admitting them, the body fails with the error `refused` makes.
    pub fn count<B>(
        &self,
        body: B,
        framing: Framing,
        refused: impl Fn() -> BoxError + Send + Sync + 'static,
    ) -> CountedBody<B> {
        CountedBody {
            inner: body,
            memory: self.clone(),
            hold: MemoryHold::default(),
            arrived: 0,
            framing,
            prefix: Vec::new(),
            announced: 0,
            refused: Box::new(refused),
        }
    }
}

pub struct CountedBody<B> {
    inner: B,
    memory: BodyMemory,
    hold: MemoryHold,
    arrived: u64,
    framing: Framing,
    /// The first bytes of a gRPC body, until its prefix is complete.
    prefix: Vec<u8>,
    /// The message length a gRPC prefix announced.
    announced: u64,
    refused: Box<dyn Fn() -> BoxError + Send + Sync>,
}

impl<B> CountedBody<B> {
    /// Notes `data` as arrived and holds what the body now occupies; false when a
    /// limiter does not admit the growth.
    fn take_in(&mut self, data: &[u8]) -> bool {
        self.arrived = self.arrived.saturating_add(data.len() as u64);
        if self.framing == Framing::Grpc && self.prefix.len() < GRPC_PREFIX {
            let wanted = GRPC_PREFIX - self.prefix.len();
            self.prefix.extend(data.iter().take(wanted));
            if let [_, a, b, c, d] = self.prefix[..] {
                self.announced = u64::from(u32::from_be_bytes([a, b, c, d]));
            }
        }
        let occupied = self.arrived.max(self.announced);
        let growth = occupied.saturating_sub(self.hold.bytes());
        if growth == 0 {
            return true;
        }
        if !self.memory.admits(growth) {
            return false;
        }
        self.hold.absorb(self.memory.account.hold(growth));
        true
    }
}

impl<B> Body for CountedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let frame = match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(err)) => return Poll::Ready(Some(Err(err.into()))),
            None => return Poll::Ready(None),
        };
        if let Some(data) = frame.data_ref()
            && !self.take_in(data.chunk())
        {
            return Poll::Ready(Some(Err((self.refused)())));
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http_body_util::{BodyExt, StreamBody};
    use opscope_processors::memory_limiter::Limits;

    use super::*;

    const KIB: u64 = 1024;

    fn memory(soft: u64) -> BodyMemory {
        let account = MemoryAccount::default();
        let limits = Limits {
            soft,
            hard: 2 * soft,
        };
        let limiter = MemoryLimiter::new(limits, Duration::from_secs(1), account.clone(), 0);
        BodyMemory {
            limiters: Arc::from(vec![limiter]),
            account,
        }
    }

    fn chunks(
        parts: Vec<Vec<u8>>,
    ) -> impl Body<Data = Bytes, Error = std::convert::Infallible> + Unpin {
        let frames = parts
            .into_iter()
            .map(|part| Ok(Frame::data(Bytes::from(part))));
        StreamBody::new(futures_util::stream::iter(frames))
    }

    #[tokio::test]
    async fn bytes_are_held_while_arriving_and_released_with_the_body() {
        let memory = memory(100 * KIB);
        let mut body = memory.count(
            chunks(vec![vec![0; 10 * 1024], vec![0; 20 * 1024]]),
            Framing::Plain,
            || OverMemoryLimit.into(),
        );
        body.frame().await.unwrap().unwrap();
        assert_eq!(memory.account.bytes(), 10 * KIB);
        body.frame().await.unwrap().unwrap();
        assert_eq!(memory.account.bytes(), 30 * KIB);
        drop(body);
        assert_eq!(memory.account.bytes(), 0);
    }

    #[tokio::test]
    async fn a_grpc_message_is_held_whole_from_its_prefix() {
        let memory = memory(100 * KIB);
        let prefix = [&[0u8][..], &(64u32 * 1024).to_be_bytes()[..2]].concat();
        let rest = (64u32 * 1024).to_be_bytes()[2..].to_vec();
        let mut body = memory.count(chunks(vec![prefix, rest]), Framing::Grpc, || {
            OverMemoryLimit.into()
        });
        body.frame().await.unwrap().unwrap();
        assert_eq!(memory.account.bytes(), 3, "the prefix is not complete yet");
        body.frame().await.unwrap().unwrap();
        assert_eq!(memory.account.bytes(), 64 * KIB);
    }

    #[tokio::test]
    async fn a_body_that_would_pass_the_soft_limit_is_refused_and_lets_go() {
        let memory = memory(50 * KIB);
        let others = memory.account.hold(30 * KIB);
        let mut body = memory.count(
            chunks(vec![vec![0; 10 * 1024], vec![0; 20 * 1024]]),
            Framing::Plain,
            || OverMemoryLimit.into(),
        );
        body.frame().await.unwrap().unwrap();
        let refused = body.frame().await.unwrap().unwrap_err();
        assert!(refused.is::<OverMemoryLimit>(), "{refused}");
        assert_eq!(memory.account.bytes(), 40 * KIB);
        assert!(!memory.admits(20 * KIB));
        drop(body);
        drop(others);
        assert_eq!(memory.account.bytes(), 0);
        assert!(memory.admits(20 * KIB));
    }
}
