//! Structured fields read into log facts: keys of every framework, prefixes, kinds.

use super::*;
use std::time::Duration;

fn facts_of<'a>(fields: Vec<(&'a str, FieldValue<'a>)>) -> LogFacts {
    let mut facts = LogFacts::default();
    facts_from_fields(fields, &mut facts);
    facts
}

fn object<'a>(namespace: &'a str, name: &'a str) -> FieldValue<'a> {
    FieldValue::Object(vec![
        ("name", FieldValue::Str(name)),
        ("namespace", FieldValue::Str(namespace)),
    ])
}

#[test]
fn kind_keyed_object_wins_over_name_keys_in_any_order() {
    let facts = facts_of(vec![
        ("RayJob", object("ml", "train")),
        ("name", FieldValue::Str("other")),
        ("controllerKind", FieldValue::Str("RayJob")),
    ]);
    assert_eq!(facts.kind.as_deref(), Some("RayJob"));
    assert_eq!(facts.namespace.as_deref(), Some("ml"));
    assert_eq!(facts.name.as_deref(), Some("train"));
}

#[test]
fn object_valued_field_names_the_kind_when_none_is_given() {
    let facts = facts_of(vec![
        ("worker", FieldValue::Int(3)),
        ("Memcached", object("cache", "m1")),
    ]);
    assert_eq!(facts.kind.as_deref(), Some("Memcached"));
    assert_eq!(facts.name.as_deref(), Some("m1"));
}

#[test]
fn own_attributes_win() {
    let facts = facts_of(vec![
        ("namespace", FieldValue::Str("from-key")),
        ("k8s.object.namespace", FieldValue::Str("own")),
        ("reconcileID", FieldValue::Str("cr")),
        ("reconcile.id", FieldValue::Str("own-id")),
    ]);
    assert_eq!(facts.namespace.as_deref(), Some("own"));
    assert_eq!(facts.reconcile_id.as_deref(), Some("own-id"));
}

#[test]
fn prefixed_keys_beside_the_request_name_children() {
    // https://github.com/sieve-project/sieve (zookeeper-operator's log, committed whole)
    let facts = facts_of(vec![
        ("msg", FieldValue::Str("Updating zookeeper status")),
        ("Request.Namespace", FieldValue::Str("default")),
        ("Request.Name", FieldValue::Str("zookeeper-cluster")),
        ("StatefulSet.Namespace", FieldValue::Str("default")),
        ("StatefulSet.Name", FieldValue::Str("zookeeper-cluster")),
    ]);
    assert_eq!(facts.kind, None);
    assert_eq!(facts.name.as_deref(), Some("zookeeper-cluster"));
    assert!(facts.status_write);
}

#[test]
fn camel_case_name_and_namespace_keys() {
    // https://github.com/sieve-project/sieve (nifikop's log, committed whole)
    let facts = facts_of(vec![
        ("component", FieldValue::Str("nifi")),
        ("clusterName", FieldValue::Str("simplenifi")),
        ("clusterNamespace", FieldValue::Str("default")),
    ]);
    assert_eq!(facts.name.as_deref(), Some("simplenifi"));
    assert_eq!(facts.namespace.as_deref(), Some("default"));
    assert_eq!(facts.kind.as_deref(), Some("cluster"));
    let service = facts_of(vec![("serviceName", FieldValue::Str("api"))]);
    assert_eq!(service.name, None);
}

#[test]
fn a_key_and_its_kind_key_name_an_object() {
    // https://github.com/GoogleContainerTools/config-sync/pull/1049
    let facts = facts_of(vec![
        (
            "reconciler",
            FieldValue::Str("config-management-system/root-reconciler"),
        ),
        (
            "sync",
            FieldValue::Str("config-management-system/root-sync"),
        ),
        ("syncKind", FieldValue::Str("RootSync")),
    ]);
    assert_eq!(facts.kind.as_deref(), Some("RootSync"));
    assert_eq!(facts.namespace.as_deref(), Some("config-management-system"));
    assert_eq!(facts.name.as_deref(), Some("root-sync"));
}

#[test]
fn an_event_object_states_its_kind() {
    // https://github.com/crossplane/crossplane/issues/3540
    let line = r#"{"object": {"kind":"Provider","name":"aws","apiVersion":"pkg.crossplane.io/v1"}, "reason": "InstallPackageRevision"}"#;
    let object = JsonObject::parse(line).expect("an object");
    let mut facts = LogFacts::default();
    facts_from_fields(json_fields(&object), &mut facts);
    assert_eq!(facts.kind.as_deref(), Some("Provider"));
    assert_eq!(facts.name.as_deref(), Some("aws"));
}

#[test]
fn request_names_namespaced_and_cluster_scoped_objects() {
    let namespaced = facts_of(vec![("request", FieldValue::Str("ml/train"))]);
    assert_eq!(namespaced.namespace.as_deref(), Some("ml"));
    assert_eq!(namespaced.name.as_deref(), Some("train"));
    let cluster = facts_of(vec![("request", FieldValue::Str("admin-binding"))]);
    assert_eq!(cluster.namespace, None);
    assert_eq!(cluster.name.as_deref(), Some("admin-binding"));
    let broken = facts_of(vec![("request", FieldValue::Str("/"))]);
    assert_eq!(broken.name, None);
    let slashed = facts_of(vec![("knative.dev/key", FieldValue::Str("/cluster-wide"))]);
    assert_eq!(slashed.namespace, None);
    assert_eq!(slashed.name.as_deref(), Some("cluster-wide"));
    let structured = facts_of(vec![(
        "request",
        FieldValue::Object(vec![
            ("Namespace", FieldValue::Str("ml")),
            ("Name", FieldValue::Str("train")),
        ]),
    )]);
    assert_eq!(structured.namespace.as_deref(), Some("ml"));
    assert_eq!(structured.name.as_deref(), Some("train"));
}

#[test]
fn a_field_keyed_by_the_loggers_kind() {
    let facts = facts_of(vec![
        ("logger", FieldValue::Str("controllers.KafkaCluster")),
        ("kafkacluster", FieldValue::Str("kafka/kafka")),
    ]);
    assert_eq!(facts.kind.as_deref(), Some("KafkaCluster"));
    assert_eq!(facts.namespace.as_deref(), Some("kafka"));
    assert_eq!(facts.name.as_deref(), Some("kafka"));
}

#[test]
fn a_kind_key_with_a_name() {
    let facts = facts_of(vec![
        ("IstioRevision", FieldValue::Str("default")),
        ("reconcileID", FieldValue::Str("7d8d")),
    ]);
    assert_eq!(facts.kind.as_deref(), Some("IstioRevision"));
    assert_eq!(facts.name.as_deref(), Some("default"));
    let prose = facts_of(vec![("Error", FieldValue::Str("something went wrong"))]);
    assert_eq!(prose.name, None);
}

#[test]
fn kube_rs_object_references_under_other_keys() {
    let facts = facts_of(vec![
        (
            "controller.name",
            FieldValue::Str("nificluster.nifi.stackable.tech"),
        ),
        (
            "object",
            FieldValue::Str("NifiCluster.v1alpha1.nifi.stackable.tech/simple-nifi"),
        ),
    ]);
    assert_eq!(facts.kind.as_deref(), Some("NifiCluster"));
    assert_eq!(facts.name.as_deref(), Some("simple-nifi"));
    let resource = facts_of(vec![(
        "resource",
        FieldValue::Str("Build.v1alpha1.fl0.dev/build.fl0-build"),
    )]);
    assert_eq!(resource.kind.as_deref(), Some("Build"));
    assert_eq!(resource.namespace.as_deref(), Some("fl0-build"));
    assert_eq!(resource.name.as_deref(), Some("build"));
    let plain = facts_of(vec![("resource", FieldValue::Str("deployments"))]);
    assert_eq!(plain.name, None);
}

#[test]
fn keys_prefixed_by_a_kind() {
    let facts = facts_of(vec![
        ("catalogsource.name", FieldValue::Str("everest-catalog")),
        ("catalogsource.namespace", FieldValue::Str("everest-olm")),
    ]);
    assert_eq!(facts.kind.as_deref(), Some("catalogsource"));
    assert_eq!(facts.namespace.as_deref(), Some("everest-olm"));
    assert_eq!(facts.name.as_deref(), Some("everest-catalog"));
}

#[test]
fn objects_named_by_resource_keys_and_group_version_kinds() {
    let crossplane = facts_of(vec![
        ("resourceName", FieldValue::Str("db-1")),
        ("resourceNamespace", FieldValue::Str("prod")),
        (
            "gvk",
            FieldValue::Str("rds.aws.upbound.io/v1beta1, Kind=Instance"),
        ),
    ]);
    assert_eq!(crossplane.kind.as_deref(), Some("Instance"));
    assert_eq!(crossplane.group.as_deref(), Some("rds.aws.upbound.io"));
    assert_eq!(crossplane.namespace.as_deref(), Some("prod"));
    assert_eq!(crossplane.name.as_deref(), Some("db-1"));
    let cert_manager = facts_of(vec![
        ("resource_kind", FieldValue::Str("Certificate")),
        ("resource_name", FieldValue::Str("web-tls")),
        ("resource_namespace", FieldValue::Str("default")),
    ]);
    assert_eq!(cert_manager.kind.as_deref(), Some("Certificate"));
    assert_eq!(cert_manager.name.as_deref(), Some("web-tls"));
    let plain = facts_of(vec![
        ("kind", FieldValue::Str("Deployment")),
        ("apiVersion", FieldValue::Str("apps/v1")),
        ("name", FieldValue::Str("web")),
        ("controllerKind", FieldValue::Str("Memcached")),
    ]);
    assert_eq!(plain.kind.as_deref(), Some("Memcached"));
    assert_eq!(plain.group.as_deref(), Some("apps"));
    let olm = facts_of(vec![
        ("ip", FieldValue::Str("install-tqr8l")),
        ("namespace", FieldValue::Str("operators")),
    ]);
    assert_eq!(olm.kind.as_deref(), Some("InstallPlan"));
    assert_eq!(olm.namespace.as_deref(), Some("operators"));
    assert_eq!(olm.name.as_deref(), Some("install-tqr8l"));
    let argo = facts_of(vec![("application", FieldValue::Str("argocd/guestbook"))]);
    assert_eq!(argo.kind.as_deref(), Some("Application"));
    assert_eq!(argo.namespace.as_deref(), Some("argocd"));
    assert_eq!(parse_group_version_kind("/v1, Kind=Pod"), Some(("", "Pod")));
    assert_eq!(
        parse_group_version_kind("Deployment.v1.apps"),
        Some(("apps", "Deployment"))
    );
    assert_eq!(parse_group_version_kind("not a gvk"), None);
}

#[test]
fn kube_object_ref_attribute() {
    let facts = facts_of(vec![(
        "object.ref",
        FieldValue::Str("Document.v1.kube.rs/samuel.default"),
    )]);
    assert_eq!(facts.kind.as_deref(), Some("Document"));
    assert_eq!(facts.group.as_deref(), Some("kube.rs"));
    assert_eq!(facts.namespace.as_deref(), Some("default"));
    assert_eq!(facts.name.as_deref(), Some("samuel"));
}

#[test]
fn times_as_strings_and_numbers() {
    let noon = 1_714_564_800_000_000_000;
    for value in [
        FieldValue::Str("2024-05-01T12:00:00Z"),
        FieldValue::Str("1714564800"),
        FieldValue::Int(1_714_564_800),
        FieldValue::Float(1_714_564_800.0),
    ] {
        assert_eq!(facts_of(vec![("ts", value)]).time_unix_nano, Some(noon));
    }
    assert_eq!(
        facts_of(vec![("ts", FieldValue::Int(-1))]).time_unix_nano,
        None
    );
}

#[test]
fn own_result_attributes() {
    let facts = facts_of(vec![
        ("reconcile.result", FieldValue::Str("requeue_after")),
        ("reconcile.requeue_after", FieldValue::Float(2.5)),
        ("msg", FieldValue::Str("Reconciler error")),
    ]);
    assert_eq!(
        facts.outcome,
        Some(LogOutcome::RequeueAfter(Duration::from_millis(2_500)))
    );
}

#[test]
fn existing_facts_are_kept() {
    let mut facts = LogFacts {
        message: "from the body".to_string(),
        name: Some("first".to_string()),
        ..LogFacts::default()
    };
    facts_from_fields(
        [
            ("msg", FieldValue::Str("from a field")),
            ("name", FieldValue::Str("second")),
        ],
        &mut facts,
    );
    assert_eq!(facts.message, "from the body");
    assert_eq!(facts.name.as_deref(), Some("first"));
}

#[test]
fn json_values() {
    let object =
        JsonObject::parse(r#"{"a": 1, "b": 1.5, "c": true, "d": null, "e": [1]}"#).unwrap();
    let fields: Vec<_> = json_fields(&object).collect();
    assert_eq!(
        fields,
        vec![
            ("a", FieldValue::Int(1)),
            ("b", FieldValue::Float(1.5)),
            ("c", FieldValue::Bool(true)),
        ]
    );
}
