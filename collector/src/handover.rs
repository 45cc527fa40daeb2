//! A gateway's hand-over: when the ring of gateways changes (one added, one removed
//! or drained), each gateway lets go of the objects another gateway owns now,
//! withdrawing their signals without resolving them (the new owner carries them on),
//! and sends what its journal holds on them to their new owners, marked handed over
//! (so that they take it whatever its age) with the journal that first took each
//! batch (so that a gateway handed back its own records, after a restart, does not
//! count them twice). The agents route new records by the same ring, so the new
//! owner gets an object's past from the old owner and its present from the agents.

use std::collections::HashSet;
use std::sync::Arc;

use opscope_exporters::loadbalancing::routing::object_key_hash;
use opscope_exporters::loadbalancing::{LoadBalancingExporter, Ring};
use opscope_model::attributes::set;
use opscope_model::semconv::{HANDED_OVER, HANDED_OVER_JOURNAL, HANDED_OVER_SEQUENCE};
use opscope_processors::correlator::{Journaled, Origin, SharedCorrelator};
use opscope_proto::otlp::common::v1::any_value::Value;
use opscope_proto::otlp::resource::v1::Resource;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Journaled batches read at a time: the journal's appends wait while they are read.
const BATCHES_PER_READ: usize = 64;

/// Follows the ring of `exporter` for the correlator `name`, which is the gateway
/// `endpoint`, until `stop`.
pub fn start(
    name: String,
    correlator: SharedCorrelator,
    exporter: Arc<LoadBalancingExporter>,
    endpoint: String,
    stop: CancellationToken,
) -> JoinHandle<()> {
    let endpoint = canonical(&endpoint);
    tokio::spawn(async move {
        let mut rings = exporter.rings();
        // The ring at start is the one the agents route by already.
        let mut known = rings.borrow_and_update().endpoints().any(|e| e == endpoint);
        if known {
            own_by(&correlator, &rings.borrow(), &endpoint);
        }
        let mut warned = false;
        loop {
            tokio::select! {
                changed = rings.changed() => if changed.is_err() { return },
                () = stop.cancelled() => return,
            }
            let ring = rings.borrow_and_update().clone();
            known |= ring.endpoints().any(|e| e == endpoint);
            // A gateway never seen on the ring has a wrong `endpoint`: it would let go
            // of everything it holds at every change.
            if !known {
                if !warned {
                    tracing::warn!(processor = %name, %endpoint, gateways = ?ring.endpoints().collect::<Vec<_>>(),
                        "correlator: handover.endpoint is not among the gateways resolved; no hand-over until it is");
                    warned = true;
                }
                continue;
            }
            own_by(&correlator, &ring, &endpoint);
            hand_over(&name, &correlator, &exporter, &endpoint, &ring).await;
        }
    })
}

/// Tells the correlator which objects are its own now: those `ring` gives `endpoint`.
fn own_by(correlator: &SharedCorrelator, ring: &Ring, endpoint: &str) {
    let (ring, endpoint) = (ring.clone(), endpoint.to_string());
    correlator.own(Arc::new(move |key| {
        ring.owner_endpoint(object_key_hash(key)) == Some(endpoint.as_str())
    }));
}

/// `endpoint` as the resolver writes a gateway: an IPv6 address in brackets
/// (`fd00::5:4317` from `${env:POD_IP}:4317` is `[fd00::5]:4317`).
fn canonical(endpoint: &str) -> String {
    if let Ok(address) = endpoint.parse::<std::net::SocketAddr>() {
        return address.to_string();
    }
    match endpoint.rsplit_once(':') {
        Some((host, port)) if host.contains(':') && !host.starts_with('[') => {
            format!("[{host}]:{port}")
        }
        _ => endpoint.to_string(),
    }
}

async fn hand_over(
    name: &str,
    correlator: &SharedCorrelator,
    exporter: &LoadBalancingExporter,
    endpoint: &str,
    ring: &Ring,
) {
    if ring.is_empty() {
        return;
    }
    let mut released = HashSet::new();
    correlator.release(|key| {
        let hash = object_key_hash(key);
        let mine = ring.owner_endpoint(hash) == Some(endpoint);
        if !mine {
            released.insert(hash);
        }
        mine
    });
    if released.is_empty() {
        return;
    }
    let (mut next, mut batches, mut failed) = (0, 0u64, 0u64);
    loop {
        let read = correlator.journaled(next, BATCHES_PER_READ);
        let Some((last, _)) = read.last() else {
            break;
        };
        next = last + 1;
        for (sequence, batch) in read {
            let origin = correlator
                .journal_id()
                .map(|journal| Origin { journal, sequence });
            let sent = match batch {
                Journaled::Traces(mut traces) => {
                    for resource_spans in &mut traces.resource_spans {
                        mark(&mut resource_spans.resource, origin);
                    }
                    exporter.hand_over(&traces, &released, endpoint).await
                }
                Journaled::Logs(mut logs) => {
                    for resource_logs in &mut logs.resource_logs {
                        mark(&mut resource_logs.resource, origin);
                    }
                    exporter.hand_over(&logs, &released, endpoint).await
                }
                // Operator pods' metrics are not routed by object.
                Journaled::Metrics(_) => continue,
            };
            batches += 1;
            match sent {
                Ok(delivery) if delivery.rejected_items == 0 => {}
                _ => failed += 1,
            }
        }
    }
    tracing::info!(processor = %name, gateway = %endpoint, objects = released.len(), batches, failed,
        "correlator: objects another gateway owns now were let go and their journal handed over");
}

/// Marks records as handed over, on their resource, with the journal that first
/// took them: this one's, unless they were handed over here before (then that
/// first journal stays named, so that it knows its own records when they come back).
fn mark(resource: &mut Option<Resource>, origin: Option<Origin>) {
    let resource = resource.get_or_insert_with(Resource::default);
    set(
        &mut resource.attributes,
        HANDED_OVER,
        Value::BoolValue(true),
    );
    if let Some(origin) = origin
        && Origin::of(resource).is_none()
    {
        let sequence = i64::try_from(origin.sequence).unwrap_or(i64::MAX);
        let journal = format!("{:016x}", origin.journal);
        set(
            &mut resource.attributes,
            HANDED_OVER_JOURNAL,
            Value::StringValue(journal),
        );
        set(
            &mut resource.attributes,
            HANDED_OVER_SEQUENCE,
            Value::IntValue(sequence),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn an_endpoint_is_written_as_the_resolver_writes_gateways() {
        assert_eq!(canonical("10.0.0.5:4317"), "10.0.0.5:4317");
        assert_eq!(canonical("fd00::5:4317"), "[fd00::5]:4317");
        assert_eq!(canonical("[fd00::5]:4317"), "[fd00::5]:4317");
        assert_eq!(canonical("gateway-0:4317"), "gateway-0:4317");
    }
}
