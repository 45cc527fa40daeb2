//! A TLS listener: accepts TCP connections and completes their handshakes off the
//! accept loop (a slow or silent client delays nobody), yielding only connections
//! whose handshake succeeded. Serves axum (as a `Listener`) and tonic (as a stream).

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress beyond this are refused by closing the connection.
const MAX_PENDING_HANDSHAKES: usize = 1024;
/// Pause after a failed accept (e.g. out of file descriptors) before the next.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

type Handshake = io::Result<(TlsStream<TcpStream>, SocketAddr)>;

pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Handshake>,
    receiver: String,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>, receiver: &str) -> Self {
        Self {
            tcp,
            acceptor: TlsAcceptor::from(config),
            handshakes: JoinSet::new(),
            receiver: receiver.to_string(),
        }
    }

    /// The next connection whose TLS handshake succeeded.
    pub async fn next_connection(&mut self) -> (TlsStream<TcpStream>, SocketAddr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok((stream, peer)) => self.start_handshake(stream, peer),
                    Err(err) => {
                        tracing::warn!(receiver = %self.receiver, %err, "cannot accept a connection");
                        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    }
                },
                Some(finished) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    match finished {
                        Ok(Ok(connection)) => return connection,
                        Ok(Err(err)) => {
                            tracing::debug!(receiver = %self.receiver, %err, "TLS handshake failed");
                        }
                        Err(err) => {
                            tracing::warn!(receiver = %self.receiver, %err, "TLS handshake task ended abnormally");
                        }
                    }
                }
            }
        }
    }

    fn start_handshake(&mut self, stream: TcpStream, peer: SocketAddr) {
        if self.handshakes.len() >= MAX_PENDING_HANDSHAKES {
            tracing::warn!(receiver = %self.receiver, %peer, "too many TLS handshakes in progress; connection closed");
            return;
        }
        let handshake = self.acceptor.accept(stream);
        self.handshakes.spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                Ok(Ok(tls)) => Ok((tls, peer)),
                Ok(Err(err)) => Err(io::Error::new(err.kind(), format!("{peer}: {err}"))),
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{peer}: no handshake within {HANDSHAKE_TIMEOUT:?}"),
                )),
            }
        });
    }

    /// The connections as the stream tonic serves; it never ends or fails, as
    /// failed handshakes are skipped.
    pub fn into_stream(
        self,
    ) -> impl Stream<Item = Result<TlsStream<TcpStream>, Infallible>> + Send + 'static {
        futures_util::stream::unfold(self, |mut listener| async move {
            let (connection, _) = listener.next_connection().await;
            Some((Ok(connection), listener))
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        self.next_connection().await
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
