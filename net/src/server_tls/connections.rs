//! What a server allows its connections (how many at once, how long a client may
//! take over its headers and its body or leave a connection idle, the HTTP/2
//! limits), and the series that count the connections refused and closed.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// The connection settings of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// Connections open at once (TLS handshakes included); more are closed as soon
    /// as they are accepted.
    pub max_connections: usize,
    /// How long a request's headers may take to arrive, and a new connection's
    /// first request (HTTP/1 and HTTP/2 alike); `None`: no limit.
    pub read_header_timeout: Option<Duration>,
    /// How long a request's body may take to arrive, from its headers on.
    pub read_timeout: Option<Duration>,
    /// Bytes of request bodies still arriving that one connection may hold at once
    /// (its share of the memory budget); a body past it is cut off.
    pub max_arriving_bytes: Option<u64>,
    /// A connection with no request in service for this long is closed.
    pub idle_timeout: Option<Duration>,
    /// HTTP/2 only, as gRPC is.
    pub http2_only: bool,
    /// Requests (HTTP/2 streams) one connection may have open at once.
    pub max_concurrent_streams: Option<u32>,
    /// HTTP/2 pings sent after this long without a frame from the client, and how
    /// long the answer may take before the connection is closed.
    pub keepalive: Option<Keepalive>,
    /// Whether the connections count against the descriptors the process leaves
    /// its data servers; the health and telemetry endpoints have their own.
    pub takes_data: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    pub time: Duration,
    pub timeout: Duration,
}

impl ConnectionSettings {
    /// The health, self-telemetry and scrape endpoints: a few clients (probes,
    /// scrapers) with small requests, so a small budget of their own that a flood
    /// of the data servers cannot take.
    pub fn exposition() -> Self {
        Self {
            max_connections: 64,
            read_header_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(10)),
            max_arriving_bytes: None,
            idle_timeout: Some(Duration::from_secs(60)),
            http2_only: false,
            max_concurrent_streams: Some(16),
            keepalive: None,
            takes_data: false,
        }
    }

    /// How long a new connection may go without a request.
    pub(super) fn first_request_timeout(&self) -> Option<Duration> {
        self.read_header_timeout.or(self.idle_timeout)
    }

    /// How often a connection is checked against its timeouts: often enough that a
    /// timeout is kept to within a quarter of itself.
    pub(super) fn check_interval(&self) -> Duration {
        let shortest = [self.first_request_timeout(), self.idle_timeout]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(MAX_CHECK_INTERVAL);
        (shortest / 4).clamp(MIN_CHECK_INTERVAL, MAX_CHECK_INTERVAL)
    }
}

const MIN_CHECK_INTERVAL: Duration = Duration::from_millis(50);
const MAX_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The series of one server's connections.
#[derive(Debug, Clone, Default)]
pub struct ConnectionMetrics {
    /// Connections open now.
    pub open: Gauge,
    /// Closed when accepted: the server had `max_connections` open.
    pub refused_max_connections: Counter,
    /// Closed when accepted: the data servers had used the descriptors the process
    /// leaves them.
    pub refused_descriptors: Counter,
    /// Closed for sending no complete request headers within `read_header_timeout`.
    pub closed_read_header_timeout: Counter,
    /// Closed after `idle_timeout` without a request.
    pub closed_idle_timeout: Counter,
    /// Closed at shutdown while a request body had stopped arriving.
    pub closed_stalled_at_shutdown: Counter,
}
