//! The `loadbalancing` exporter over real sockets: an agent routes tagged spans to
//! two gateways (stand-in OTLP/gRPC servers). Each object's spans reach exactly one
//! gateway, every span arrives once, and a gateway that refuses for a while gets
//! its part again without the other getting its part twice. Audit events the
//! agent's webhook takes go by the same ring: to the gateway of their object. A name
//! that does not resolve is said once, not once a try.
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{Behaviour, Opscope, OtlpSink, Ports, http_post, wait_until};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use tokio::runtime::Runtime;
use tonic::Code;

const OBJECTS: usize = 40;
const SPANS_PER_OBJECT: usize = 5;
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(20);

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// Span `i` of a reconcile of `Widget shop/w<object>`, as the tagger leaves it.
fn object_span(object: usize, i: usize) -> Span {
    Span {
        trace_id: [object.to_be_bytes(), i.to_be_bytes()].concat(),
        span_id: ((object * SPANS_PER_OBJECT + i) as u64 + 1)
            .to_be_bytes()
            .to_vec(),
        name: "reconcile".into(),
        attributes: vec![
            text("k8s.object.kind", "Widget"),
            text("k8s.object.namespace", "shop"),
            text("k8s.object.name", &format!("w{object}")),
        ],
        ..Default::default()
    }
}

/// One request per span round: every object's span `i`, so that each request holds
/// spans of every gateway's objects.
fn request(i: usize) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (0..OBJECTS).map(|object| object_span(object, i)).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn agent_config(ports: &Ports, gateways: &[&OtlpSink]) -> String {
    let hostnames: Vec<String> = gateways
        .iter()
        .map(|gateway| format!("\"{}\"", gateway.addr()))
        .collect();
    let resolver = format!("static: {{ hostnames: [{}] }}", hostnames.join(", "));
    config_with_resolver(ports, &resolver)
}

fn config_with_resolver(ports: &Ports, resolver: &str) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: 127.0.0.1:{grpc} }}
exporters:
  loadbalancing:
    routing_key: k8s.object
    protocol:
      otlp: {{ tls: {{ insecure: true }}, timeout: 5s, compression: gzip }}
    resolver:
      {resolver}
    retry_on_failure: {{ initial_interval: 50ms, max_interval: 200ms, max_elapsed_time: 20s }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    traces: {{ receivers: [otlp], exporters: [loadbalancing] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        grpc = ports.grpc,
        health = ports.health,
        metrics = ports.metrics,
    )
}

fn send_all(ports: &Ports) {
    let runtime = Runtime::new().expect("client runtime");
    runtime.block_on(async {
        let mut client = TraceServiceClient::connect(ports.grpc_url())
            .await
            .expect("connect to opscope");
        for i in 0..SPANS_PER_OBJECT {
            client.export(request(i)).await.expect("accepted");
        }
    });
}

/// The `k8s.object.name` a record names.
fn object_name(attributes: &[KeyValue]) -> Option<String> {
    let kv = attributes.iter().find(|kv| kv.key == "k8s.object.name")?;
    match kv.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(name) => Some(name.clone()),
        _ => None,
    }
}

/// The object each span a gateway received is about, and every span id it received.
fn received(gateway: &OtlpSink) -> (BTreeSet<String>, Vec<Vec<u8>>) {
    let received = gateway.received();
    let objects = received
        .spans()
        .filter_map(|span| object_name(&span.attributes))
        .collect();
    let ids = received.spans().map(|span| span.span_id.clone()).collect();
    (objects, ids)
}

/// Every span arrived once, and each object's spans at one gateway only.
fn assert_routed_by_object(gateways: &[&OtlpSink]) {
    let total = OBJECTS * SPANS_PER_OBJECT;
    let arrived = wait_until(DELIVERY_TIMEOUT, || {
        gateways.iter().map(|g| g.span_count()).sum::<usize>() >= total
    });
    assert!(arrived, "not every span arrived in {DELIVERY_TIMEOUT:?}");
    let mut owner_of: BTreeMap<String, usize> = BTreeMap::new();
    let mut ids = BTreeSet::new();
    for (index, gateway) in gateways.iter().enumerate() {
        let (objects, span_ids) = received(gateway);
        assert!(
            !objects.is_empty(),
            "gateway {index} owns none of 40 objects"
        );
        for object in objects {
            let owner = owner_of.entry(object.clone()).or_insert(index);
            assert_eq!(*owner, index, "{object} reached two gateways");
        }
        for id in span_ids {
            assert!(ids.insert(id.clone()), "span {id:?} arrived twice");
        }
    }
    assert_eq!(ids.len(), total);
    assert_eq!(owner_of.len(), OBJECTS);
}

#[test]
fn each_objects_spans_reach_one_gateway_once() {
    let gateways = [OtlpSink::grpc(), OtlpSink::grpc()];
    let refs: Vec<&OtlpSink> = gateways.iter().collect();
    let ports = Ports::ANY;
    let agent = Opscope::start(&agent_config(&ports, &refs));
    let ports = agent.ports();
    send_all(&ports);
    assert_routed_by_object(&refs);
}

#[test]
fn a_gateway_that_refuses_for_a_while_gets_its_part_again_and_the_other_no_copy() {
    let gateways = [OtlpSink::grpc(), OtlpSink::grpc()];
    gateways[1].set_behaviour(Behaviour::Fail {
        code: Code::Unavailable,
        times: 3,
    });
    let refs: Vec<&OtlpSink> = gateways.iter().collect();
    let ports = Ports::ANY;
    let agent = Opscope::start(&agent_config(&ports, &refs));
    let ports = agent.ports();
    send_all(&ports);
    assert_routed_by_object(&refs);
    assert!(gateways[1].attempts() > gateways[1].received().traces.len());
}

#[test]
fn the_dns_resolver_finds_the_gateways_of_a_name() {
    let gateway = OtlpSink::grpc();
    let ports = Ports::ANY;
    let resolver = format!(
        "dns: {{ hostname: 127.0.0.1, port: {}, interval: 1s, timeout: 1s }}",
        gateway.addr().port()
    );
    let agent = Opscope::start(&config_with_resolver(&ports, &resolver));
    let ports = agent.ports();
    send_all(&ports);
    assert_routed_by_object(&[&gateway]);
}

/// A name that never resolves is tried every second: the failure is logged once, not
/// once a second (then at most once a minute, with how many were not logged).
#[test]
fn a_name_that_does_not_resolve_is_logged_once_not_every_second() {
    let ports = Ports::ANY;
    // `.invalid` never resolves (RFC 6761).
    let resolver = "dns: { hostname: gateways.invalid, port: 4317, interval: 1s, timeout: 1s }";
    let agent = Opscope::start(&config_with_resolver(&ports, resolver));
    // At least two more tries within this: one every `interval` after each failure,
    // itself at most `timeout` long.
    std::thread::sleep(Duration::from_secs(5));
    let logs = agent.logs();
    let said = logs.matches("resolving the gateways").count();
    assert_eq!(said, 1, "{logs}");
}

/// `widget-operator` writing the status of `Widget shop/w<object>`, as the API
/// server's audit webhook reports it.
fn status_write(object: usize) -> serde_json::Value {
    let now = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    serde_json::json!({
        "level": "Metadata",
        "auditID": format!("5b0f3c2e-0000-4000-8000-{object:012}"),
        "stage": "ResponseComplete",
        "requestURI": format!("/apis/example.com/v1/namespaces/shop/widgets/w{object}/status"),
        "verb": "update",
        "user": {"username": "system:serviceaccount:widget-system:widget-operator"},
        "objectRef": {"resource": "widgets", "namespace": "shop", "name": format!("w{object}"),
            "apiGroup": "example.com", "apiVersion": "v1", "subresource": "status"},
        "responseStatus": {"metadata": {}, "code": 200},
        "requestReceivedTimestamp": now,
        "stageTimestamp": now,
    })
}

/// The objects (`k8s.object.name`) of the log records a gateway received.
fn audited_objects(gateway: &OtlpSink) -> BTreeSet<String> {
    gateway
        .received()
        .log_records()
        .filter_map(|record| object_name(&record.attributes))
        .collect()
}

#[test]
fn audit_events_reach_the_gateway_that_owns_their_object() {
    let gateways = [OtlpSink::grpc(), OtlpSink::grpc()];
    let hostnames: Vec<String> = gateways
        .iter()
        .map(|gateway| format!("\"{}\"", gateway.addr()))
        .collect();
    let ports = Ports::ANY;
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: 127.0.0.1:{grpc} }}
  k8s_audit: {{ endpoint: 127.0.0.1:0 }}
processors:
  operator_tagger: {{}}
exporters:
  loadbalancing:
    protocol:
      otlp: {{ tls: {{ insecure: true }}, timeout: 5s }}
    resolver:
      static: {{ hostnames: [{hostnames}] }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    traces: {{ receivers: [otlp], processors: [operator_tagger], exporters: [loadbalancing] }}
    logs/audit: {{ receivers: [k8s_audit], processors: [operator_tagger], exporters: [loadbalancing] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        grpc = ports.grpc,
        health = ports.health,
        metrics = ports.metrics,
        hostnames = hostnames.join(", "),
    );
    let agent = Opscope::start(&config);
    let ports = agent.ports();
    let audit = agent.address("receivers.k8s_audit");
    let items: Vec<serde_json::Value> = (0..OBJECTS).map(status_write).collect();
    let list = serde_json::json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1",
        "metadata": {}, "items": items});
    let body = serde_json::to_vec(&list).expect("JSON");
    let response = http_post(&audit, "/", &[("Content-Type", "application/json")], &body)
        .expect("POST the audit batch");
    assert_eq!(response.status, 200, "{}", response.text());
    send_all(&ports);

    let refs: Vec<&OtlpSink> = gateways.iter().collect();
    assert_routed_by_object(&refs);
    let audited = wait_until(DELIVERY_TIMEOUT, || {
        gateways
            .iter()
            .map(|g| audited_objects(g).len())
            .sum::<usize>()
            >= OBJECTS
    });
    assert!(audited, "not every audit event arrived");
    for gateway in &gateways {
        let (traced, _) = received(gateway);
        assert_eq!(
            audited_objects(gateway),
            traced,
            "a gateway's audit events are about the objects whose spans it owns"
        );
    }
}
