//! Accepting a server's connections within its limits: at most `max_connections`
//! open at once and, for the servers that take data, within the descriptors the
//! process leaves them. A connection beyond either is closed as soon as it is
//! accepted, counted, and logged at most once per interval.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use tokio::net::{TcpListener, TcpStream};

use super::connections::{ConnectionMetrics, ConnectionSettings};
use super::descriptors::{Descriptor, DescriptorBudget};

/// Pause after a failed accept (e.g. out of file descriptors) before the next.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// At most one warning per this interval about refused connections or failed accepts.
const LOG_INTERVAL: Duration = Duration::from_secs(10);

pub struct Listener {
    tcp: TcpListener,
    open: Arc<AtomicUsize>,
    max_connections: usize,
    budget: Option<&'static DescriptorBudget>,
    metrics: ConnectionMetrics,
    server: String,
    refusals: RateLimitedLog,
    failures: RateLimitedLog,
}

/// A connection's place under the limits, given back when it closes.
pub struct Permit {
    open: Arc<AtomicUsize>,
    gauge: Gauge,
    _descriptor: Option<Descriptor>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.gauge.dec();
    }
}

impl Listener {
    pub fn new(
        tcp: TcpListener,
        settings: &ConnectionSettings,
        metrics: ConnectionMetrics,
        server: &str,
    ) -> Self {
        Self {
            tcp,
            open: Arc::new(AtomicUsize::new(0)),
            max_connections: settings.max_connections,
            budget: settings.takes_data.then(DescriptorBudget::process),
            metrics,
            server: server.to_string(),
            refusals: RateLimitedLog::default(),
            failures: RateLimitedLog::default(),
        }
    }

    /// The next connection within the limits; those beyond them are closed here.
    pub async fn accept(&mut self) -> (TcpStream, SocketAddr, Permit) {
        loop {
            match self.tcp.accept().await {
                Ok((stream, peer)) => match self.permit() {
                    Ok(permit) => return (stream, peer, permit),
                    Err(reason) => self.refuse(stream, peer, reason),
                },
                Err(err) => {
                    if let Some(suppressed) = self.failures.due() {
                        tracing::warn!(server = %self.server, %err, suppressed, "cannot accept a connection");
                    }
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            }
        }
    }

    fn permit(&self) -> Result<Permit, &'static str> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < self.max_connections).then_some(open + 1)
            })
            .map_err(|_| "max_connections")?;
        let permit = |descriptor| {
            self.metrics.open.inc();
            Permit {
                open: Arc::clone(&self.open),
                gauge: self.metrics.open.clone(),
                _descriptor: descriptor,
            }
        };
        match self.budget {
            None => Ok(permit(None)),
            Some(budget) => match budget.take() {
                Some(descriptor) => Ok(permit(Some(descriptor))),
                None => {
                    self.open.fetch_sub(1, Ordering::AcqRel);
                    Err("descriptors")
                }
            },
        }
    }

    /// Closes the connection at once: holding it open would hold the descriptor.
    fn refuse(&mut self, stream: TcpStream, peer: SocketAddr, reason: &'static str) {
        drop(stream);
        let limit = match reason {
            "max_connections" => {
                self.metrics.refused_max_connections.inc();
                self.max_connections
            }
            _ => {
                self.metrics.refused_descriptors.inc();
                self.budget.map_or(0, DescriptorBudget::limit)
            }
        };
        if let Some(suppressed) = self.refusals.due() {
            tracing::warn!(
                server = %self.server, %peer, reason, limit, suppressed,
                "connection refused: too many connections open"
            );
        }
    }
}

/// Says when a warning is due: the first time, then once per interval, with how
/// many were left unsaid since.
#[derive(Default)]
struct RateLimitedLog {
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimitedLog {
    fn due(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < LOG_INTERVAL)
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}
