//! TLS and authentication on the running agent's servers: OTLP/HTTP and OTLP/gRPC
//! over TLS, client certificates, a certificate replaced while the agent runs,
//! bearer and basic credentials, and the audit webhook over TLS with a token.
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{Opscope, OtlpSink, Ports, http_post, wait_until};
use opentelemetry::trace::{Tracer as _, TracerProvider as _};
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _, WithTonicConfig as _};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opscope_testkit::pki::{Issued, TestCa, Usage as ExtendedKeyUsagePurpose};
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio::runtime::Runtime;
use tonic::Code;
use tonic::metadata::MetadataMap;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

const TIMEOUT: Duration = Duration::from_secs(20);
const TOKEN: &str = "s3cret-token";
const JSON: (&str, &str) = ("Content-Type", "application/json");
const TRACE: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"widget-operator"}}]},
  "scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"reconcile","kind":1,
  "startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000500000000"}]}]}]}"#;

/// A throwaway CA, the certificates it issues, and the files they are written to.
struct Pki {
    ca: TestCa,
    dir: TempDir,
}

impl Pki {
    fn new() -> Self {
        let ca = TestCa::new("opscope test CA");
        let dir = tempfile::tempdir().expect("a temp dir");
        let pki = Pki { ca, dir };
        std::fs::write(pki.path("ca.crt"), pki.ca.pem()).expect("write the CA");
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn issue(&self, name: &str, serial: u64, usage: ExtendedKeyUsagePurpose) -> Issued {
        self.ca.issue(name, serial, usage)
    }

    fn server(&self, serial: u64) -> Issued {
        self.issue(
            &format!("opscope server {serial}"),
            serial,
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// Writes the server's certificate and key where the config points.
    fn install_server(&self, issued: &Issued) {
        std::fs::write(self.path("server.crt"), &issued.cert_pem).expect("write the certificate");
        std::fs::write(self.path("server.key"), &issued.key_pem).expect("write the key");
    }

    /// The `tls:` settings of a server using the installed certificate.
    fn tls_settings(&self, extra: &str) -> String {
        format!(
            "tls: {{ cert_file: {}, key_file: {}{extra} }}",
            self.path("server.crt").display(),
            self.path("server.key").display()
        )
    }

    fn client_ca_setting(&self) -> String {
        format!(", client_ca_file: {}", self.path("ca.crt").display())
    }
}

/// The harness config with `grpc` and `http` settings added to the OTLP receiver's protocols.
fn config(ports: &Ports, sink: &OtlpSink, grpc: &str, http: &str) -> String {
    let grpc_endpoint = format!("grpc: {{ endpoint: 127.0.0.1:{}", ports.grpc);
    let http_endpoint = format!("http: {{ endpoint: 127.0.0.1:{}", ports.http);
    ports
        .config("otlp/sink", &format!("{{ endpoint: {} }}", sink.endpoint()))
        .replace(&grpc_endpoint, &format!("{grpc_endpoint}, {grpc}"))
        .replace(&http_endpoint, &format!("{http_endpoint}, {http}"))
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a client runtime")
}

/// An HTTPS client trusting only the test CA, presenting `identity` if given.
fn https_client(pki: &Pki, identity: Option<&Issued>) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = reqwest::Certificate::from_pem(pki.ca.pem().as_bytes()).expect("CA for reqwest");
    let mut builder = reqwest::Client::builder()
        .tls_certs_only([ca])
        .timeout(Duration::from_secs(10));
    if let Some(issued) = identity {
        let pem = format!("{}{}", issued.cert_pem, issued.key_pem);
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("identity"));
    }
    builder.build().expect("an HTTPS client")
}

async fn post_trace(client: &reqwest::Client, url: &str) -> reqwest::Result<reqwest::StatusCode> {
    let response = client
        .post(format!("{url}/v1/traces"))
        .header(JSON.0, JSON.1)
        .body(TRACE)
        .send()
        .await?;
    Ok(response.status())
}

/// The port of a `host:port` address.
fn port_of(address: &str) -> u16 {
    let (_, port) = address.rsplit_once(':').expect("host:port");
    port.parse().expect("a port")
}

fn https_url(port: u16) -> String {
    format!("https://localhost:{port}")
}

fn refused_unauthenticated(opscope: &Opscope, ports: &Ports, transport: &str) -> f64 {
    opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_receiver_refused_requests_total",
        &[("transport", transport), ("reason", "unauthenticated")],
    )
}

#[test]
fn otlp_http_over_tls_reaches_the_sink_and_plain_http_does_not() {
    let pki = Pki::new();
    pki.install_server(&pki.server(1));
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let config = config(&ports, &sink, "", &pki.tls_settings(""));
    let opscope = Opscope::start(&config);
    let ports = opscope.ports();

    let status = runtime().block_on(post_trace(
        &https_client(&pki, None),
        &https_url(ports.http),
    ));
    assert_eq!(status.expect("an HTTPS answer"), reqwest::StatusCode::OK);
    assert!(sink.wait_for(TIMEOUT, |received| received.span_count() == 1));

    let plain = http_post(&ports.http_addr(), "/v1/traces", &[JSON], TRACE.as_bytes());
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(sink.span_count(), 1);
}

#[test]
fn mutual_tls_takes_only_clients_with_a_certificate_from_the_ca() {
    let pki = Pki::new();
    pki.install_server(&pki.server(1));
    let client_cert = pki.issue("widget-operator", 2, ExtendedKeyUsagePurpose::ClientAuth);
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let http = pki.tls_settings(&pki.client_ca_setting());
    let opscope = Opscope::start(&config(&ports, &sink, "", &http));
    let ports = opscope.ports();
    let url = https_url(ports.http);
    let runtime = runtime();

    let anonymous = runtime.block_on(post_trace(&https_client(&pki, None), &url));
    assert!(
        anonymous.is_err(),
        "a client without a certificate was answered: {anonymous:?}"
    );

    let other_ca = Pki::new();
    let stranger = other_ca.issue("stranger", 3, ExtendedKeyUsagePurpose::ClientAuth);
    let foreign = runtime.block_on(post_trace(&https_client(&pki, Some(&stranger)), &url));
    assert!(
        foreign.is_err(),
        "a certificate of another CA was taken: {foreign:?}"
    );

    let known = runtime.block_on(post_trace(&https_client(&pki, Some(&client_cert)), &url));
    assert_eq!(known.expect("an answer"), reqwest::StatusCode::OK);
    assert!(sink.wait_for(TIMEOUT, |received| received.span_count() == 1));
}

/// A TLS channel to the gRPC receiver trusting the test CA.
async fn grpc_channel(pki: &Pki, port: u16) -> Channel {
    Channel::from_shared(https_url(port))
        .expect("url")
        .tls_config(tls_for_grpc(pki))
        .expect("TLS config")
        .connect()
        .await
        .expect("connect over TLS")
}

fn tls_for_grpc(pki: &Pki) -> ClientTlsConfig {
    ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(pki.ca.pem()))
        .domain_name("localhost")
}

#[test]
fn sdk_over_grpc_with_tls_and_a_bearer_token_arrives_and_other_calls_are_unauthenticated() {
    let pki = Pki::new();
    pki.install_server(&pki.server(1));
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let grpc = format!(
        "{}, auth: {{ bearer_tokens: [{TOKEN}] }}",
        pki.tls_settings("")
    );
    let opscope = Opscope::start(&config(&ports, &sink, &grpc, ""));
    let ports = opscope.ports();

    let runtime = runtime();
    let provider = {
        let _context = runtime.enter();
        let mut metadata = MetadataMap::new();
        metadata.insert(
            "authorization",
            format!("Bearer {TOKEN}").parse().expect("metadata"),
        );
        let exporter = SpanExporter::builder()
            .with_tonic()
            .with_endpoint(https_url(ports.grpc))
            .with_tls_config(tls_for_grpc(&pki))
            .with_metadata(metadata)
            .with_timeout(Duration::from_secs(5))
            .build()
            .expect("the SDK's span exporter");
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .build()
    };
    provider
        .tracer("server-security")
        .in_span("reconcile", |_| {});
    provider.shutdown().expect("flush the span");
    assert!(sink.wait_for(TIMEOUT, |received| received.span_count() == 1));

    let statuses = runtime.block_on(async {
        let mut statuses = Vec::new();
        for authorization in [None, Some("Bearer wrong"), Some("Basic c2VjcmV0")] {
            let mut client = TraceServiceClient::new(grpc_channel(&pki, ports.grpc).await);
            let mut request = tonic::Request::new(ExportTraceServiceRequest::default());
            if let Some(value) = authorization {
                request
                    .metadata_mut()
                    .insert("authorization", value.parse().expect("metadata"));
            }
            statuses.push(client.export(request).await.expect_err("refused").code());
        }
        statuses
    });
    assert_eq!(statuses, [Code::Unauthenticated; 3]);
    assert_eq!(refused_unauthenticated(&opscope, &ports, "grpc"), 3.0);
    assert_eq!(sink.span_count(), 1, "refused calls reach no pipeline");
}

/// A TLS connection's view of the server's certificate.
async fn served_certificate(pki: &Pki, port: u16) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(pki.ca.der()))
        .expect("the CA as a root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("server name");
    let tls = connector.connect(name, tcp).await.expect("a TLS handshake");
    let (_, connection) = tls.get_ref();
    connection
        .peer_certificates()
        .expect("a server certificate")[0]
        .to_vec()
}

#[test]
fn a_replaced_certificate_is_served_to_new_connections_and_garbage_is_ignored() {
    let pki = Pki::new();
    let first = pki.server(1);
    pki.install_server(&first);
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let http = pki.tls_settings(", reload_interval: 50ms");
    let opscope = Opscope::start(&config(&ports, &sink, "", &http));
    let ports = opscope.ports();
    let runtime = runtime();
    assert_eq!(
        runtime.block_on(served_certificate(&pki, ports.http)),
        first.der
    );

    let renewed = pki.server(2);
    pki.install_server(&renewed);
    let taken = wait_until(TIMEOUT, || {
        runtime.block_on(served_certificate(&pki, ports.http)) == renewed.der
    });
    assert!(taken, "the renewed certificate (serial 2) was not served");

    std::fs::write(pki.path("server.crt"), "not a certificate").expect("write garbage");
    std::fs::write(pki.path("server.key"), "not a key").expect("write garbage");
    let reloads = |outcome: &str| {
        opscope.metric_value(
            &ports.metrics_addr(),
            "opscope_server_tls_certificate_reloads_total",
            &[("transport", "http"), ("outcome", outcome)],
        )
    };
    let failed = wait_until(TIMEOUT, || {
        runtime.block_on(served_certificate(&pki, ports.http));
        reloads("failed") >= 1.0
    });
    assert!(failed, "the garbage was not counted as a failed reload");
    assert_eq!(
        runtime.block_on(served_certificate(&pki, ports.http)),
        renewed.der
    );
    let status = runtime.block_on(post_trace(
        &https_client(&pki, None),
        &https_url(ports.http),
    ));
    assert_eq!(status.expect("an answer"), reqwest::StatusCode::OK);
    assert!(reloads("loaded") >= 1.0);
}

fn basic(user_password: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_password)
    )
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write a credentials file");
}

#[test]
fn http_requests_need_a_valid_bearer_token_or_basic_credentials() {
    let files = tempfile::tempdir().expect("a temp dir");
    let tokens = files.path().join("tokens");
    let password = files.path().join("password");
    write(&tokens, "first-token\n");
    write(&password, "pa55word\n");
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let http = format!(
        "auth: {{ bearer_token_file: {}, basic: {{ username: agent, password_file: {} }} }}",
        tokens.display(),
        password.display()
    );
    let opscope = Opscope::start(&config(&ports, &sink, "", &http));
    let ports = opscope.ports();
    let post = |authorization: Option<&str>| {
        let mut headers = vec![JSON];
        if let Some(value) = authorization {
            headers.push(("Authorization", value));
        }
        http_post(&ports.http_addr(), "/v1/traces", &headers, TRACE.as_bytes())
            .expect("an HTTP answer")
    };

    let missing = post(None);
    assert_eq!(missing.status, 401);
    let challenges: Vec<_> = missing
        .headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("WWW-Authenticate"))
        .map(|(_, value)| value.as_str())
        .collect();
    assert!(
        challenges.iter().any(|c| c.starts_with("Bearer")),
        "{challenges:?}"
    );
    assert!(
        challenges.iter().any(|c| c.starts_with("Basic")),
        "{challenges:?}"
    );
    assert_eq!(post(Some("Bearer second-token")).status, 401);
    assert_eq!(post(Some(&basic("agent:wrong"))).status, 401);
    assert_eq!(refused_unauthenticated(&opscope, &ports, "http"), 3.0);

    assert_eq!(post(Some("Bearer first-token")).status, 200);
    assert_eq!(post(Some(&basic("agent:pa55word"))).status, 200);
    assert!(sink.wait_for(TIMEOUT, |received| received.span_count() == 2));

    write(&tokens, "second-token\n");
    let rotated = wait_until(TIMEOUT, || post(Some("Bearer second-token")).status == 200);
    assert!(rotated, "the rewritten token file was not taken");
    assert_eq!(post(Some("Bearer first-token")).status, 401);
    let accepted = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_receiver_accepted_spans_total",
        &[("transport", "http")],
    );
    assert_eq!(
        accepted, 3.0,
        "only authenticated requests reach the pipeline"
    );
}

#[test]
fn the_audit_webhook_takes_batches_over_tls_with_its_token() {
    let pki = Pki::new();
    pki.install_server(&pki.server(1));
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let config = format!(
        r#"
receivers:
  k8s_audit:
    endpoint: 127.0.0.1:0
    {tls}
    auth: {{ bearer_tokens: [{TOKEN}] }}
processors:
  batch: {{ timeout: 50ms }}
exporters:
  otlp/sink: {{ endpoint: {sink} }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    logs: {{ receivers: [k8s_audit], processors: [batch], exporters: [otlp/sink] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        tls = pki.tls_settings(""),
        sink = sink.endpoint(),
        health = ports.health,
        metrics = ports.metrics,
    );
    let opscope = Opscope::start(&config);
    let ports = opscope.ports();
    let audit_port = port_of(&opscope.address("receivers.k8s_audit"));
    let batch = serde_json::json!({
        "kind": "EventList", "apiVersion": "audit.k8s.io/v1",
        "items": [{
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
            "auditID": "0b6f1c3e-9a27-4d51-8c0e-2f4a6b8d1e73", "stage": "ResponseComplete",
            "requestURI": "/apis/ray.io/v1/namespaces/ray/rayjobs/sample/status", "verb": "update",
            "user": {"username": "system:serviceaccount:ray-system:kuberay-operator"},
            "objectRef": {"resource": "rayjobs", "namespace": "ray", "name": "sample", "apiGroup": "ray.io", "apiVersion": "v1", "subresource": "status"},
            "responseStatus": {"metadata": {}, "code": 200},
            "requestReceivedTimestamp": "2024-05-01T10:00:00.000000Z",
            "stageTimestamp": "2024-05-01T10:00:00.004000Z"
        }]
    })
    .to_string();
    let client = https_client(&pki, None);
    let url = format!("{}/audit", https_url(audit_port));
    let post = |token: Option<&str>| {
        let mut request = client.post(&url).header(JSON.0, JSON.1).body(batch.clone());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.expect("an HTTPS answer").status() }
    };
    let runtime = runtime();
    assert_eq!(
        runtime.block_on(post(None)),
        reqwest::StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        runtime.block_on(post(Some("wrong"))),
        reqwest::StatusCode::UNAUTHORIZED
    );
    assert_eq!(refused_unauthenticated(&opscope, &ports, "http"), 2.0);
    assert_eq!(runtime.block_on(post(Some(TOKEN))), reqwest::StatusCode::OK);
    assert!(sink.wait_for(TIMEOUT, |received| received.log_record_count() == 1));
}

#[test]
fn self_telemetry_health_and_prometheus_endpoints_serve_over_tls() {
    let pki = Pki::new();
    pki.install_server(&pki.server(1));
    let sink = OtlpSink::grpc();
    let tls = pki.tls_settings("");
    let config = config(&Ports::ANY, &sink, "", "")
        .replace(
            "health_check: { endpoint: 127.0.0.1:0 }",
            &format!("health_check: {{ endpoint: 127.0.0.1:0, {tls} }}"),
        )
        .replace(
            "address: 127.0.0.1:0 }",
            &format!("address: 127.0.0.1:0, {tls} }}"),
        )
        .replace(
            "exporters:\n  otlp/sink:",
            &format!("exporters:\n  prometheus: {{ endpoint: 127.0.0.1:0, {tls} }}\n  otlp/sink:"),
        )
        .replace(
            "metrics: { receivers: [otlp], processors: [batch], exporters: [otlp/sink] }",
            "metrics: { receivers: [otlp], processors: [batch], exporters: [otlp/sink, prometheus] }",
        );
    assert!(
        config.contains("exporters: [otlp/sink, prometheus]") && config.matches(&tls).count() == 3,
        "{config}"
    );
    let opscope = Opscope::start(&config);
    let ports = opscope.ports();
    let prometheus = port_of(&opscope.address("exporters.prometheus"));
    let client = https_client(&pki, None);
    let runtime = runtime();
    let get = |port: u16, path: &str| {
        runtime.block_on(async {
            let response = client
                .get(format!("{}{path}", https_url(port)))
                .send()
                .await?;
            let status = response.status();
            Ok::<_, reqwest::Error>((status, response.text().await?))
        })
    };
    let ready = wait_until(TIMEOUT, || {
        get(ports.health, "/readyz").is_ok_and(|(status, _)| status == reqwest::StatusCode::OK)
    });
    assert!(ready, "readiness over HTTPS: {}", opscope.logs());
    let (status, telemetry) = get(ports.metrics, "/metrics").expect("self-telemetry over HTTPS");
    assert_eq!(status, reqwest::StatusCode::OK);
    assert!(
        telemetry.contains("opscope_receiver_accepted_spans"),
        "{telemetry}"
    );
    let (status, _) = get(prometheus, "/metrics").expect("the prometheus endpoint over HTTPS");
    assert_eq!(status, reqwest::StatusCode::OK);

    for port in [ports.health, ports.metrics, prometheus] {
        let plain = common::http_get(&format!("127.0.0.1:{port}"), "/metrics");
        assert!(
            plain.is_err(),
            "plain HTTP was answered on {port}: {plain:?}"
        );
    }
}
