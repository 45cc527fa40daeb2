//! Serving an HTTP router on a bound listener, in plain text or over TLS: one
//! server for every HTTP and gRPC endpoint opscope runs, with its connections
//! capped, its clients' headers, bodies and idle connections timed, and, at
//! shutdown, idle and stalled connections closed at once while requests that are
//! progressing finish.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower_service::Service;

use super::activity::{Activity, Tracked, TrackedBody};
use super::connections::{ConnectionMetrics, ConnectionSettings};
use super::listener::{Listener, Permit};

/// A client that has not finished its TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// At shutdown, a connection whose request body has received nothing for this long
/// is closed: its client stopped sending, and the drain must not wait for it.
const SHUTDOWN_STALL: Duration = Duration::from_secs(1);
/// How long a connection told to close (HTTP/2 GOAWAY) may take to finish.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// One server: its name in logs, TLS, connection settings and series.
pub struct HttpServer {
    pub name: String,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub settings: ConnectionSettings,
    pub metrics: ConnectionMetrics,
}

/// What every connection of one server shares.
struct Shared {
    name: String,
    tls: Option<TlsAcceptor>,
    settings: ConnectionSettings,
    metrics: ConnectionMetrics,
    builder: auto::Builder<TokioExecutor>,
    router: Router,
}

impl HttpServer {
    /// Serves `router` on `listener` until `shutdown` completes and the connections
    /// have closed: idle and stalled ones at once, the others once their requests
    /// are answered.
    pub async fn serve(
        self,
        listener: TcpListener,
        router: Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let mut listener =
            Listener::new(listener, &self.settings, self.metrics.clone(), &self.name);
        let shared = Arc::new(Shared {
            builder: builder(&self.settings),
            tls: self.tls.map(TlsAcceptor::from),
            name: self.name,
            settings: self.settings,
            metrics: self.metrics,
            router,
        });
        let (stop, stopped) = watch::channel(false);
        let mut connections = JoinSet::new();
        let mut shutdown = pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                (stream, peer, permit) = listener.accept() => {
                    let shared = Arc::clone(&shared);
                    let stopped = stopped.clone();
                    connections.spawn(async move {
                        connection(stream, permit, &shared, stopped).await;
                        tracing::trace!(server = %shared.name, %peer, "connection closed");
                    });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        // New clients are refused by the kernel from here on.
        drop(listener);
        let _ = stop.send(true);
        while connections.join_next().await.is_some() {}
    }
}

fn builder(settings: &ConnectionSettings) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    if settings.http2_only {
        builder = builder.http2_only();
    }
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.read_header_timeout);
    let mut http2 = builder.http2();
    http2
        .timer(TokioTimer::new())
        .max_concurrent_streams(settings.max_concurrent_streams);
    if let Some(keepalive) = settings.keepalive {
        http2
            .keep_alive_interval(keepalive.time)
            .keep_alive_timeout(keepalive.timeout);
    }
    builder
}

/// One connection, from its TLS handshake to its close.
async fn connection(
    stream: TcpStream,
    _permit: Permit,
    shared: &Shared,
    mut stopped: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let activity = Activity::new();
    let stream = Tracked::new(stream, Arc::clone(&activity));
    let Some(tls) = &shared.tls else {
        return serve_connection(stream, activity, shared, stopped).await;
    };
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream));
    let handshake = tokio::select! {
        handshake = handshake => handshake,
        _ = stopped.wait_for(|stopped| *stopped) => return,
    };
    match handshake {
        Ok(Ok(stream)) => serve_connection(stream, activity, shared, stopped).await,
        Ok(Err(err)) => tracing::debug!(server = %shared.name, %err, "TLS handshake failed"),
        Err(_) => {
            tracing::debug!(server = %shared.name, "no TLS handshake within {HANDSHAKE_TIMEOUT:?}");
        }
    }
}

/// What the check of a connection decided.
enum Verdict {
    Keep,
    /// Tell the client the connection ends (HTTP/2 GOAWAY), then close it.
    Close,
    /// Close it now: nothing in service would be lost.
    CloseNow,
}

async fn serve_connection<S>(
    stream: S,
    activity: Arc<Activity>,
    shared: &Shared,
    mut stopped: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let router = shared.router.clone();
    let read_timeout = shared.settings.read_timeout;
    let max_arriving_bytes = shared.settings.max_arriving_bytes;
    let tracked = Arc::clone(&activity);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let in_service = tracked.request();
        let request = request.map(|body| {
            Body::new(TrackedBody::new(
                body,
                &tracked,
                read_timeout,
                max_arriving_bytes,
            ))
        });
        let mut router = router.clone();
        async move {
            let response = router.call(request).await;
            drop(in_service);
            response
        }
    });
    let mut connection = pin!(
        shared
            .builder
            .serve_connection(TokioIo::new(stream), service)
    );
    let mut checks = tokio::time::interval(shared.settings.check_interval());
    let mut stopping = false;
    let mut closing: Option<tokio::time::Instant> = None;
    loop {
        let verdict = tokio::select! {
            served = connection.as_mut() => {
                if let Err(err) = served {
                    count_error(&*err, shared);
                }
                return;
            }
            _ = stopped.wait_for(|stopped| *stopped), if !stopping => {
                stopping = true;
                connection.as_mut().graceful_shutdown();
                check(&activity, shared, stopping)
            }
            _ = checks.tick() => check(&activity, shared, stopping),
        };
        match verdict {
            Verdict::Keep => {}
            Verdict::CloseNow => return,
            Verdict::Close => match closing {
                None => {
                    closing = Some(tokio::time::Instant::now());
                    connection.as_mut().graceful_shutdown();
                }
                Some(since) if since.elapsed() >= CLOSE_GRACE => return,
                Some(_) => {}
            },
        }
    }
}

fn check(activity: &Activity, shared: &Shared, stopping: bool) -> Verdict {
    let settings = &shared.settings;
    let metrics = &shared.metrics;
    let idle_for = activity.idle_for();
    if stopping {
        if idle_for.is_some() {
            return Verdict::CloseNow;
        }
        if activity.receiving() && activity.silent_for() >= SHUTDOWN_STALL {
            metrics.closed_stalled_at_shutdown.inc();
            tracing::info!(server = %shared.name, "closing a connection whose request stopped arriving");
            return Verdict::CloseNow;
        }
        return Verdict::Keep;
    }
    let Some(idle_for) = idle_for else {
        return Verdict::Keep;
    };
    if !activity.served() {
        if settings
            .first_request_timeout()
            .is_some_and(|timeout| idle_for >= timeout)
        {
            first_request_missing(shared);
            return Verdict::CloseNow;
        }
        return Verdict::Keep;
    }
    if settings
        .idle_timeout
        .is_some_and(|timeout| idle_for >= timeout)
    {
        metrics.closed_idle_timeout.inc();
        return Verdict::Close;
    }
    Verdict::Keep
}

/// A new connection that sent no request in time: a slow or silent client.
fn first_request_missing(shared: &Shared) {
    if shared.settings.read_header_timeout.is_some() {
        shared.metrics.closed_read_header_timeout.inc();
    } else {
        shared.metrics.closed_idle_timeout.inc();
    }
    tracing::debug!(server = %shared.name, "closing a connection that sent no request in time");
}

/// Counts the connections hyper closed for a header timeout; other errors are the
/// client's doing (a reset, a protocol error) and only logged.
fn count_error(err: &(dyn std::error::Error + 'static), shared: &Shared) {
    let timed_out = std::iter::successors(Some(err), |e| e.source())
        .filter_map(|e| e.downcast_ref::<hyper::Error>())
        .any(hyper::Error::is_timeout);
    if timed_out {
        shared.metrics.closed_read_header_timeout.inc();
        tracing::debug!(server = %shared.name, "closing a connection whose request headers took too long");
    } else {
        tracing::debug!(server = %shared.name, %err, "connection ended with an error");
    }
}
