//! The `k8s_objects` receiver against a real kube-apiserver (testkit's control
//! plane, no audit webhook reaching opscope): Widgets listed and watched reach the
//! correlator as audit events of the same calls would: a deletion stuck on its
//! finalizer and a status written with the time on every pass fire from the watch
//! alone, naming the object, the field and the writer, and the initial list of
//! healthy objects fires nothing.
mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::{Opscope, OtlpSink, wait_until};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opscope_testkit::backend::{HeldPort, refusing_address};
use opscope_testkit::control_plane::{ControlPlane, control_plane_or_skip};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

const TIMEOUT: Duration = Duration::from_secs(60);
const WIDGETS: &str = "/apis/e2e.opscope.dev/v1/namespaces/shop/widgets";
/// The Widget CRD of the end-to-end rig.
const WIDGET_CRD: &str = include_str!("../../e2e/crds/widgets.json");
/// The user the control plane's admin client acts as.
const ADMIN: &str = "e2e-admin";

fn config(kubeconfig: &Path, signals: &OtlpSink) -> String {
    format!(
        r#"
receivers:
  k8s_objects:
    auth_type: kubeConfig
    kubeconfig: "{kubeconfig}"
    objects: [{{ name: widgets, group: e2e.opscope.dev }}]
processors:
  correlator: {{ lateness: 1s, finalizer_leak: {{ max_age: 3s }} }}
exporters:
  otlp/signals: {{ endpoint: "{signals}", tls: {{ insecure: true }} }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:0 }}
service:
  extensions: [health_check]
  pipelines:
    logs: {{ receivers: [k8s_objects], processors: [correlator] }}
    signals: {{ exporters: [otlp/signals] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:0 }}
"#,
        kubeconfig = kubeconfig.display(),
        signals = signals.endpoint(),
    )
}

fn widget(name: &str, finalizers: &[&str]) -> Value {
    json!({
        "apiVersion": "e2e.opscope.dev/v1", "kind": "Widget",
        "metadata": { "name": name, "namespace": "shop", "finalizers": finalizers },
        "spec": { "size": 1 }
    })
}

fn text(span: &Span, key: &str) -> Option<String> {
    let found = span.attributes.iter().find(|kv| kv.key == key)?;
    match found.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(text) => Some(text.clone()),
        _ => None,
    }
}

/// (signal, object name, cause) of every signal span received.
fn signals(sink: &OtlpSink) -> BTreeSet<(String, String, String)> {
    sink.received()
        .spans()
        .filter(|span| span.name.starts_with("opscope.signal "))
        .map(|span| {
            (
                span.name.trim_start_matches("opscope.signal ").to_string(),
                text(span, "k8s.object.name").unwrap_or_default(),
                text(span, "opscope.signal.cause").unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn a_stuck_deletion_fires_from_the_watch_alone_and_the_initial_list_fires_nothing() {
    let Some((etcd, apiserver)) = control_plane_or_skip() else {
        return;
    };
    let runtime = Runtime::new().expect("a runtime");
    // The API server's audit webhook posts nowhere: opscope sees only the watch.
    let (_nowhere, audit) = refusing_address();
    let control_plane = runtime.block_on(ControlPlane::start(
        &etcd,
        &apiserver,
        HeldPort::shareable(),
        &audit,
        &[],
    ));
    let admin = control_plane.admin();
    runtime.block_on(async {
        let crd: Value = serde_json::from_str(WIDGET_CRD).expect("the Widget CRD is JSON");
        admin.apply_crd(&crd).await;
        admin.create_namespace("shop").await;
        for index in 0..20 {
            let name = format!("healthy-{index}");
            admin
                .create(WIDGETS, &widget(&name, &[]))
                .await
                .expect("a Widget");
            let status = json!({ "status": { "phase": "Ready", "observedGeneration": 1 } });
            admin
                .merge_patch(&format!("{WIDGETS}/{name}/status"), &status)
                .await
                .expect("its status");
        }
        admin
            .create(WIDGETS, &widget("stuck", &["e2e.opscope.dev/cleanup"]))
            .await
            .expect("the Widget held by a finalizer");
    });
    let sink = OtlpSink::grpc();
    let opscope = Opscope::start(&config(&control_plane.kubeconfig(ADMIN), &sink));
    let metrics = opscope.ports().metrics_addr();
    let tracked = opscope.wait_for_metric(
        &metrics,
        "opscope_correlator_tracked_objects",
        &[],
        21.0,
        TIMEOUT,
    );
    assert_eq!(tracked, 21.0, "the listed Widgets\n{}", opscope.logs());

    runtime.block_on(async {
        admin
            .delete(&format!("{WIDGETS}/stuck"))
            .await
            .expect("the deletion is accepted");
    });
    let expected = (
        "finalizer_leak".to_string(),
        "stuck".to_string(),
        "no_controller".to_string(),
    );
    assert!(
        wait_until(TIMEOUT, || signals(&sink).contains(&expected)),
        "the stuck deletion, from the watch alone: {:?}\n{}",
        signals(&sink),
        opscope.logs()
    );
    let others: Vec<_> = (signals(&sink).into_iter())
        .filter(|(_, name, _)| name != "stuck")
        .collect();
    assert!(others.is_empty(), "the listed Widgets fired {others:?}");

    // The incident's loop: one field manager writing the time into the status on
    // every pass, 40 times as fast as the API server takes them.
    runtime.block_on(async {
        for index in 0..40 {
            let status = json!({ "status": { "lastReconcileTime": format!("2026-12-04T10:00:{index:02}.000000Z") } });
            admin
                .merge_patch(
                    &format!("{WIDGETS}/healthy-0/status?fieldManager=widget-operator"),
                    &status,
                )
                .await
                .expect("a status write");
        }
    });
    let looping = (
        "reconcile_loop".to_string(),
        "healthy-0".to_string(),
        "field_churn:status.lastReconcileTime".to_string(),
    );
    assert!(
        wait_until(TIMEOUT, || signals(&sink).contains(&looping)),
        "the status written on every pass, from the watch alone: {:?}",
        signals(&sink)
    );
    let operator = (sink.received().spans())
        .find(|span| span.name == "opscope.signal reconcile_loop")
        .and_then(|span| text(span, "operator.name"));
    assert_eq!(
        operator.as_deref(),
        Some("widget-operator"),
        "the field manager"
    );
}
