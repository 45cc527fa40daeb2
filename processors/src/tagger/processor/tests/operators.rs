//! Operators named from the resource, the config and audit users.

use super::*;

#[test]
fn operator_name_comes_from_the_first_rule_that_names_one() {
    let config = TaggerConfig {
        operators: vec![OperatorMapping {
            namespace: "ray-*".into(),
            pod: "kuberay-*".into(),
            operator: "kuberay".into(),
        }],
        ..TaggerConfig::default()
    };
    let mut tagger = OperatorTagger::new(&config);
    let kuberay_pod = (K8S_POD_NAME, "kuberay-operator-6c9f7d8b9-x2x7q");
    let cases: [(&str, Pairs, Option<&str>); 8] = [
        (
            "the producer's own operator.name",
            &[
                (OPERATOR_NAME, "explicit"),
                (K8S_NAMESPACE_NAME, "ray-system"),
                kuberay_pod,
            ],
            Some("explicit"),
        ),
        (
            "a mapping by namespace and pod glob, before service.name",
            &[
                (K8S_NAMESPACE_NAME, "ray-system"),
                kuberay_pod,
                (SERVICE_NAME, "manager"),
            ],
            Some("kuberay"),
        ),
        (
            "service.name when no mapping matches",
            &[
                (K8S_NAMESPACE_NAME, "default"),
                kuberay_pod,
                (SERVICE_NAME, "ray-operator"),
            ],
            Some("ray-operator"),
        ),
        (
            "the SDK's default service.name names nothing",
            &[
                (SERVICE_NAME, "unknown_service:manager"),
                (K8S_DEPLOYMENT_NAME, "cert-manager"),
            ],
            Some("cert-manager"),
        ),
        (
            "the Deployment of a ReplicaSet pod name",
            &[
                (K8S_NAMESPACE_NAME, "widget-system"),
                (K8S_POD_NAME, "widget-operator-5d6b8c9f7-q8w2z"),
                (K8S_CONTAINER_NAME, "manager"),
            ],
            Some("widget-operator"),
        ),
        (
            "the container of a pod no Deployment made",
            &[
                (K8S_POD_NAME, "etcd-operator-0"),
                (K8S_CONTAINER_NAME, "etcd-operator"),
            ],
            Some("etcd-operator"),
        ),
        (
            "nothing that names an operator",
            &[("host.name", "node-1")],
            None,
        ),
        ("no attributes at all", &[], None),
    ];
    for (rule, resource, expected) in cases {
        let mut request = metrics_of(resource);
        tagger.tag_metrics(&mut request);
        let tagged = request.resource_metrics[0].resource.as_ref();
        assert_eq!(operator_of(tagged), expected, "{rule}");
        let mut own_and_operator = attributes(resource);
        if let Some(operator) = expected {
            insert(&mut own_and_operator, OPERATOR_NAME, string_value(operator));
        }
        assert_eq!(tagged.unwrap().attributes, own_and_operator, "{rule}");
    }
}

#[test]
fn operator_name_is_written_on_the_resource_of_every_signal() {
    let mut tagger = tagger();
    let mut spans = traces(KUBERAY_POD, [span("reconcile").ids(1, 1)]);
    let mut records = logs(KUBERAY_POD, [log("starting manager")]);
    let mut metrics = metrics_of(KUBERAY_POD);
    tagger.tag_traces(&mut spans);
    tagger.tag_logs(&mut records);
    tagger.tag_metrics(&mut metrics);
    let resources = [
        spans.resource_spans[0].resource.as_ref(),
        records.resource_logs[0].resource.as_ref(),
        metrics.resource_metrics[0].resource.as_ref(),
    ];
    for resource in resources {
        assert_eq!(operator_of(resource), Some("kuberay-operator"));
    }
}
