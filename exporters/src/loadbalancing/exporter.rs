//! The `loadbalancing` exporter: cuts each batch by owning gateway and sends each
//! part to its gateway over OTLP/gRPC. A part a gateway refuses for now is tried
//! again alone while the others are delivered, so no gateway gets a part twice; if
//! the resolver has dropped that gateway meanwhile, the part goes to the objects'
//! new owners. A batch no gateway took goes back to the sending queue whole.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use futures_util::future::join_all;
use opscope_model::Telemetry;
use opscope_model::config::FieldError;
use opscope_proto::ExportService;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::config::LoadBalancingConfig;
use super::resolver::{DnsResolver, follow};
use super::ring::Ring;
use super::routing::encode_parts;
use super::wire::{self, LOG_RECORDS, RecordLayout, SPANS};
use crate::batch::{Batch, Encoded};
use crate::exporter::{Delivery, ExportError, Exporter};
use crate::otlp::GrpcExporter;
use crate::queue::{Backoff, RetryConfig};

pub struct LoadBalancingExporter {
    name: String,
    routing: Arc<RwLock<Arc<Routing>>>,
    /// The ring as last resolved, for a gateway that hands objects over.
    rings: Arc<watch::Sender<Ring>>,
    retry: RetryConfig,
    /// Stops the resolver's task when the exporter goes.
    stop: CancellationToken,
}

/// The gateways as last resolved: the ring and one exporter per gateway.
#[derive(Default)]
struct Routing {
    ring: Ring,
    gateways: BTreeMap<String, Gateway>,
}

#[derive(Clone)]
struct Gateway {
    exporter: Arc<GrpcExporter>,
    max_request_size: Option<usize>,
}

impl Routing {
    /// The routing to `endpoints`, keeping the exporters of the gateways that stay.
    fn to(
        endpoints: &[String],
        config: &LoadBalancingConfig,
        previous: &Routing,
    ) -> Result<Self, FieldError> {
        let ring = Ring::new(endpoints);
        let mut gateways = BTreeMap::new();
        for endpoint in ring.endpoints() {
            let gateway = match previous.gateways.get(endpoint) {
                Some(gateway) => gateway.clone(),
                None => {
                    let settings = config.destination(endpoint)?;
                    Gateway {
                        exporter: Arc::new(GrpcExporter::new(&settings)?),
                        max_request_size: settings.request_size_limit(),
                    }
                }
            };
            gateways.insert(endpoint.to_string(), gateway);
        }
        Ok(Self { ring, gateways })
    }
}

/// A request type the exporter cuts by owner.
pub trait Routable: Telemetry + ExportService {
    /// Where its records keep their attributes on the wire.
    const LAYOUT: RecordLayout;

    /// One encoded part per gateway of `ring`, by index, of the records whose key
    /// hash `keep` takes.
    fn encode_parts(&self, ring: &Ring, keep: &dyn Fn(u64) -> bool) -> Vec<Encoded<Self>>;
}

impl Routable for ExportTraceServiceRequest {
    const LAYOUT: RecordLayout = SPANS;

    fn encode_parts(&self, ring: &Ring, keep: &dyn Fn(u64) -> bool) -> Vec<Encoded<Self>> {
        encode_parts(&self.resource_spans, ring, keep)
    }
}

impl Routable for ExportLogsServiceRequest {
    const LAYOUT: RecordLayout = LOG_RECORDS;

    fn encode_parts(&self, ring: &Ring, keep: &dyn Fn(u64) -> bool) -> Vec<Encoded<Self>> {
        encode_parts(&self.resource_logs, ring, keep)
    }
}

/// A batch to route: decoded (a journal's, handed over) or encoded (what the pipeline
/// hands OTLP exporters, and the parts of a gateway the ring dropped).
trait RouteInput<T: Routable> {
    fn parts(
        &self,
        ring: &Ring,
        keep: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<Encoded<T>>, ExportError>;
}

impl<T: Routable> RouteInput<T> for T {
    fn parts(
        &self,
        ring: &Ring,
        keep: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<Encoded<T>>, ExportError> {
        Ok(self.encode_parts(ring, keep))
    }
}

impl<T: Routable> RouteInput<T> for Encoded<T> {
    fn parts(
        &self,
        ring: &Ring,
        keep: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<Encoded<T>>, ExportError> {
        let parts = wire::split(&self.bytes(), T::LAYOUT, ring, keep)
            .map_err(|error| ExportError::permanent(error.to_string()))?;
        Ok(parts
            .into_iter()
            .map(|(bytes, records)| Encoded::concatenated(bytes, records))
            .collect())
    }
}

/// Which records of a batch go: all, or (a hand-over) those of some keys only, to
/// any gateway but one.
#[derive(Clone, Copy)]
struct Selection<'a> {
    keys: Option<&'a HashSet<u64>>,
    not_to: Option<&'a str>,
}

impl Selection<'_> {
    const ALL: Selection<'static> = Selection {
        keys: None,
        not_to: None,
    };

    fn keeps(&self, key: u64) -> bool {
        self.keys.is_none_or(|keys| keys.contains(&key))
    }
}

impl LoadBalancingExporter {
    /// The exporter of `config`; with the DNS resolver, its task that follows the
    /// name starts on the current Tokio runtime.
    pub fn new(name: &str, config: &LoadBalancingConfig) -> Result<Self, FieldError> {
        let routing = Routing::to(config.endpoints(), config, &Routing::default())?;
        let rings = Arc::new(watch::Sender::new(routing.ring.clone()));
        let exporter = Self {
            name: name.to_string(),
            rings: Arc::clone(&rings),
            routing: Arc::new(RwLock::new(Arc::new(routing))),
            retry: config.retry_on_failure.clone(),
            stop: CancellationToken::new(),
        };
        if let Some(dns) = &config.resolver.dns {
            let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
                FieldError::new("resolver.dns", "can only be followed inside the agent")
            })?;
            let resolver = DnsResolver {
                hostname: dns.hostname.clone(),
                port: dns.port,
            };
            let routing = Arc::clone(&exporter.routing);
            let config = config.clone();
            let exporter_name = exporter.name.clone();
            let changed = move |endpoints: Vec<String>| {
                let mut current = routing.write().unwrap_or_else(PoisonError::into_inner);
                match Routing::to(&endpoints, &config, &current) {
                    Ok(next) => {
                        rings.send_replace(next.ring.clone());
                        *current = Arc::new(next);
                    }
                    Err(error) => tracing::warn!(exporter = %exporter_name, %error,
                        "loadbalancing: a resolved gateway cannot be used; keeping the last list"),
                }
            };
            runtime.spawn(follow(
                resolver,
                dns.interval,
                dns.timeout,
                exporter.stop.clone(),
                changed,
            ));
        }
        Ok(exporter)
    }

    /// The ring of gateways, watched: changed whenever the resolver finds another set.
    pub fn rings(&self) -> watch::Receiver<Ring> {
        self.rings.subscribe()
    }

    /// Sends the records of `batch` whose key hashes are in `keys` to their owners,
    /// `not_to` excepted (the gateway handing them over): a batch of a journal.
    pub async fn hand_over<T: Routable>(
        &self,
        batch: &T,
        keys: &HashSet<u64>,
        not_to: &str,
    ) -> Result<Delivery, ExportError> {
        let selection = Selection {
            keys: Some(keys),
            not_to: Some(not_to),
        };
        self.deliver(batch, selection).await
    }

    fn routing(&self) -> Arc<Routing> {
        let current = self.routing.read().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(&current)
    }

    /// Sends each gateway its part, parts a gateway refuses for now again until they
    /// pass or the retries run out.
    async fn deliver<T: Routable>(
        &self,
        batch: &(dyn RouteInput<T> + Sync),
        selection: Selection<'_>,
    ) -> Result<Delivery, ExportError> {
        let started = Instant::now();
        let mut backoff = Backoff::new(&self.retry);
        let mut delivered_any = false;
        let mut delivery = Delivery::default();
        let mut unrouted = Some(batch);
        let mut pending: Vec<(String, Encoded<T>)> = Vec::new();
        loop {
            let routing = self.routing();
            pending = self.route(&routing, unrouted.take(), pending, selection)?;
            if pending.is_empty() && !routing.ring.is_empty() {
                return Ok(delivery);
            }
            let sends = pending
                .iter()
                .map(|(endpoint, piece)| send(&routing, endpoint, piece));
            let results = join_all(sends).await;
            let mut refused_for_now = Vec::new();
            let mut last_error = None;
            for ((endpoint, piece), result) in pending.into_iter().zip(results) {
                match result {
                    Ok(answer) => {
                        delivered_any = true;
                        add(&mut delivery, answer);
                    }
                    Err(error @ ExportError::Retryable { .. }) if self.retry.enabled => {
                        last_error = Some(error);
                        refused_for_now.push((endpoint, piece));
                    }
                    Err(error) => {
                        delivered_any = true;
                        add(
                            &mut delivery,
                            self.refused(&endpoint, piece.items(), &error),
                        );
                    }
                }
            }
            if refused_for_now.is_empty() && !routing.ring.is_empty() {
                return Ok(delivery);
            }
            // Nothing went anywhere yet: the sending queue tries the whole batch again.
            if !delivered_any {
                return Err(last_error
                    .unwrap_or_else(|| ExportError::retryable("no gateway is resolved yet")));
            }
            let limit = self.retry.max_elapsed_time;
            if !limit.is_zero() && started.elapsed() >= limit {
                for (endpoint, piece) in refused_for_now {
                    let error = ExportError::retryable(format!("retries ran out after {limit:?}"));
                    add(
                        &mut delivery,
                        self.refused(&endpoint, piece.items(), &error),
                    );
                }
                return Ok(delivery);
            }
            tokio::time::sleep(backoff.next_delay()).await;
            pending = refused_for_now;
        }
    }

    /// The pieces to send: the `unrouted` batch cut by owner, and the `pending`
    /// pieces of gateways still in the ring; a pending piece of a gateway the ring
    /// dropped is routed again to the objects' new owners.
    fn route<T: Routable>(
        &self,
        routing: &Routing,
        unrouted: Option<&(dyn RouteInput<T> + Sync)>,
        pending: Vec<(String, Encoded<T>)>,
        selection: Selection<'_>,
    ) -> Result<Vec<(String, Encoded<T>)>, ExportError> {
        let mut pieces = Vec::new();
        let mut orphaned = Vec::new();
        for (endpoint, piece) in pending {
            if routing.gateways.contains_key(&endpoint) {
                pieces.push((endpoint, piece));
            } else {
                orphaned.push(piece);
            }
        }
        if routing.ring.is_empty() {
            // Kept for when the resolver finds a gateway.
            return Ok(pieces);
        }
        let orphaned = orphaned
            .iter()
            .map(|piece| piece as &(dyn RouteInput<T> + Sync));
        for batch in unrouted.into_iter().chain(orphaned) {
            let parts = batch.parts(&routing.ring, &|key| selection.keeps(key))?;
            for (endpoint, encoded) in routing.ring.endpoints().zip(parts) {
                if encoded.items() == 0 || selection.not_to == Some(endpoint) {
                    continue;
                }
                let limit = routing
                    .gateways
                    .get(endpoint)
                    .and_then(|gateway| gateway.max_request_size);
                let cut = match limit {
                    Some(max) => encoded.cut(max).map_err(ExportError::permanent)?,
                    None => vec![encoded],
                };
                pieces.extend(cut.into_iter().map(|piece| (endpoint.to_string(), piece)));
            }
        }
        Ok(pieces)
    }

    /// What a part a gateway did not take counts as: items refused, named.
    fn refused(&self, endpoint: &str, items: usize, error: &ExportError) -> Delivery {
        tracing::warn!(exporter = %self.name, gateway = %endpoint, items, %error,
            "loadbalancing: a gateway did not take its part");
        Delivery {
            rejected_items: items as u64,
            rejected_reason: Some("gateway_refused"),
            message: format!("gateway {endpoint}: {error}"),
        }
    }
}

async fn send<T: Telemetry + ExportService>(
    routing: &Routing,
    endpoint: &str,
    piece: &Encoded<T>,
) -> Result<Delivery, ExportError> {
    match routing.gateways.get(endpoint) {
        Some(gateway) => gateway.exporter.export(piece).await,
        None => Err(ExportError::retryable(format!(
            "gateway {endpoint} left the ring"
        ))),
    }
}

fn add(total: &mut Delivery, answer: Delivery) {
    total.rejected_items += answer.rejected_items;
    if total.rejected_reason.is_none() {
        total.rejected_reason = answer.rejected_reason;
    }
    if total.message.is_empty() {
        total.message = answer.message;
    }
}

impl Drop for LoadBalancingExporter {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl<T: Routable> Exporter<Encoded<T>> for LoadBalancingExporter {
    async fn export(&self, batch: &Encoded<T>) -> Result<Delivery, ExportError> {
        self.deliver(batch, Selection::ALL).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use opscope_model::attributes::set_str;
    use opscope_model::semconv::{OBJECT_KIND, OBJECT_NAME, OBJECT_NAMESPACE};
    use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
    use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
    use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use opscope_testkit::otlp_grpc::{ExportHandler, export_services};
    use tokio::net::TcpListener;
    use tonic::Status;
    use tonic::transport::server::TcpIncoming;

    use super::*;

    /// A gateway that keeps the names of the spans it receives.
    #[derive(Default)]
    struct Gateway(Mutex<Vec<String>>);

    impl ExportHandler for Gateway {
        async fn traces(&self, request: ExportTraceServiceRequest) -> Result<(), Status> {
            let names = request
                .resource_spans
                .into_iter()
                .flat_map(|r| r.scope_spans)
                .flat_map(|s| s.spans)
                .map(|span| span.name);
            self.0.lock().expect("names").extend(names);
            Ok(())
        }

        async fn logs(&self, _: ExportLogsServiceRequest) -> Result<(), Status> {
            Ok(())
        }

        async fn metrics(&self, _: ExportMetricsServiceRequest) -> Result<(), Status> {
            Ok(())
        }
    }

    async fn serve(gateway: Arc<Gateway>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("bound").to_string();
        let server = export_services(gateway, 4 * 1024 * 1024)
            .serve_with_incoming(TcpIncoming::from(listener));
        tokio::spawn(server);
        address
    }

    fn spans(objects: usize) -> ExportTraceServiceRequest {
        let spans = (0..objects)
            .map(|object| {
                let mut attributes = Vec::new();
                set_str(&mut attributes, OBJECT_KIND, "Widget");
                set_str(&mut attributes, OBJECT_NAMESPACE, "shop");
                set_str(&mut attributes, OBJECT_NAME, &format!("w{object}"));
                Span {
                    name: format!("w{object}"),
                    attributes,
                    ..Span::default()
                }
            })
            .collect();
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        }
    }

    fn config(hostnames: &[&str]) -> LoadBalancingConfig {
        serde_json::from_value(serde_json::json!({
            "protocol": { "otlp": { "tls": { "insecure": true }, "timeout": "1s" } },
            "resolver": { "static": { "hostnames": hostnames } },
            "retry_on_failure": { "initial_interval": "20ms", "max_interval": "50ms", "max_elapsed_time": "10s" },
        }))
        .expect("a config")
    }

    #[tokio::test]
    async fn the_part_of_a_gateway_the_ring_dropped_goes_to_the_new_owners() {
        let live = Arc::new(Gateway::default());
        let live_address = serve(Arc::clone(&live)).await;
        // Nothing listens there: its part is refused until the ring drops it.
        let gone = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let gone_address = gone.local_addr().expect("bound").to_string();
        drop(gone);
        let config = config(&[&live_address, &gone_address]);
        let exporter =
            Arc::new(LoadBalancingExporter::new("loadbalancing", &config).expect("built"));

        let sending = Arc::clone(&exporter);
        let delivery = tokio::spawn(async move { sending.export(&Encoded::new(&spans(40))).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        {
            let mut routing = exporter.routing.write().expect("routing");
            let next = Routing::to(&[live_address], &config, &routing).expect("rerouted");
            *routing = Arc::new(next);
        }

        let answer = delivery.await.expect("the export ends").expect("delivered");
        assert_eq!(answer.rejected_items, 0, "{answer:?}");
        let mut names = live.0.lock().expect("names").clone();
        names.sort();
        let mut expected: Vec<String> = (0..40).map(|object| format!("w{object}")).collect();
        expected.sort();
        assert_eq!(names, expected, "every span once, at the gateway left");
    }
}
