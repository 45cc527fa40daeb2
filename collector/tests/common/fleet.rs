//! The demo's simulated operator fleet, sent as OTLP/gRPC traces to an endpoint.

use std::time::{Duration, Instant};

use opscope::demo::{SimulatedFleet, TICK_MILLIS};
use opscope_model::timestamp::now_unix_nanos;
use opscope_proto::otlp::collector::trace::v1::trace_service_client::TraceServiceClient;

/// Sends the fleet's traces to `endpoint` every tick for `duration`; a refused send
/// is retried with the next tick's data, as an SDK would.
pub async fn send_the_fleet(endpoint: String, duration: Duration) {
    let mut fleet = SimulatedFleet::new(now_unix_nanos());
    let deadline = Instant::now() + duration;
    let mut client = None;
    while Instant::now() < deadline {
        if client.is_none() {
            client = TraceServiceClient::connect(endpoint.clone()).await.ok();
        }
        if let Some(connected) = client.as_mut()
            && connected
                .export(fleet.tick(now_unix_nanos()))
                .await
                .is_err()
        {
            client = None;
        }
        tokio::time::sleep(Duration::from_millis(TICK_MILLIS)).await;
    }
}
