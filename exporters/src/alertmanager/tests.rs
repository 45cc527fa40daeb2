//! The exporter against recording HTTP servers on loopback: what each Alertmanager
//! receives, the re-send loop, and how failures of some Alertmanagers are reported.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::{AlertmanagerConfig, AlertmanagerExporter};
use crate::batch::SignalBatch;
use crate::exporter::{ExportError, Exporter};
use opscope_testkit::signals::{loop_signal, resolved};

/// Longest wait for a request the test expects.
const PATIENCE: Duration = Duration::from_secs(5);

/// An HTTP server that answers every request with one status and hands the test
/// each request's path and JSON body.
struct RecordingServer {
    url: String,
    requests: mpsc::UnboundedReceiver<(String, Value)>,
}

impl RecordingServer {
    async fn start(status: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let address = listener.local_addr().expect("bound address");
        let (sender, requests) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer_requests(stream, status, sender.clone()));
            }
        });
        Self {
            url: format!("http://{address}"),
            requests,
        }
    }

    /// The alerts of the next request, which must come within [`PATIENCE`].
    async fn next_alerts(&mut self) -> Vec<Value> {
        let (path, body) = tokio::time::timeout(PATIENCE, self.requests.recv())
            .await
            .expect("a request in time")
            .expect("server running");
        assert_eq!(path, "/api/v2/alerts");
        body.as_array().cloned().expect("a JSON array of alerts")
    }

    /// The alerts of the requests received so far.
    fn received(&mut self) -> Vec<Vec<Value>> {
        let mut received = Vec::new();
        while let Ok((_, body)) = self.requests.try_recv() {
            received.push(body.as_array().cloned().unwrap_or_default());
        }
        received
    }
}

async fn answer_requests(
    stream: TcpStream,
    status: u16,
    requests: mpsc::UnboundedSender<(String, Value)>,
) {
    let mut reader = BufReader::new(stream);
    while let Some((path, body)) = read_request(&mut reader).await {
        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let _ = requests.send((path, body));
        let answer = format!("HTTP/1.1 {status} Recorded\r\ncontent-length: 0\r\n\r\n");
        if reader.get_mut().write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// One HTTP/1.1 request with a `content-length` body: its path and body.
async fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut request_line = String::new();
    reader.read_line(&mut request_line).await.ok()?;
    let path = request_line.split_whitespace().nth(1)?.to_string();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.ok()?;
    Some((path, body))
}

fn exporter(servers: &[&RecordingServer], resend_interval: &str) -> AlertmanagerExporter {
    let endpoints: Vec<&str> = servers.iter().map(|s| s.url.as_str()).collect();
    let config: AlertmanagerConfig = serde_json::from_value(serde_json::json!({
        "endpoints": endpoints,
        "resend_interval": resend_interval,
    }))
    .expect("valid config");
    AlertmanagerExporter::new("alertmanager/test", &config).expect("exporter starts")
}

fn is_firing(alerts: &[Value]) -> bool {
    matches!(alerts, [alert] if alert["labels"]["alertname"] == "OperatorReconcileLoop"
        && alert.get("endsAt").is_none())
}

#[tokio::test]
async fn firing_alerts_are_resent_until_resolved() {
    let mut server = RecordingServer::start(200).await;
    let exporter = exporter(&[&server], "50ms");
    let firing = loop_signal();
    exporter
        .export(&SignalBatch(vec![firing.clone()]))
        .await
        .expect("delivered");
    for post in ["export", "first re-send", "second re-send"] {
        assert!(is_firing(&server.next_alerts().await), "{post}");
    }

    exporter
        .export(&SignalBatch(vec![resolved(&firing)]))
        .await
        .expect("delivered");
    let posts = server.received();
    let last = posts.last().expect("the resolution was posted");
    assert_eq!(last[0]["endsAt"], "2024-05-01T12:01:10.000Z");
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(
        server.received().is_empty(),
        "nothing re-sent once resolved"
    );
}

#[tokio::test]
async fn resending_stops_when_the_exporter_is_dropped() {
    let mut server = RecordingServer::start(200).await;
    let exporter = exporter(&[&server], "50ms");
    exporter
        .export(&SignalBatch(vec![loop_signal()]))
        .await
        .expect("delivered");
    assert!(is_firing(&server.next_alerts().await));
    drop(exporter);
    tokio::time::sleep(Duration::from_millis(60)).await;
    server.received();
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(server.received().is_empty());
}

#[tokio::test]
async fn one_failing_alertmanager_does_not_keep_alerts_from_the_others() {
    let mut failing = RecordingServer::start(503).await;
    let mut working = RecordingServer::start(200).await;
    let exporter = exporter(&[&failing, &working], "1h");
    let result = exporter.export(&SignalBatch(vec![loop_signal()])).await;
    match result {
        Err(ExportError::Retryable { reason, .. }) => {
            assert!(reason.starts_with(&failing.url), "{reason}");
        }
        other => panic!("expected a retryable failure, got {other:?}"),
    }
    assert!(is_firing(&working.next_alerts().await));
    assert!(is_firing(&failing.next_alerts().await));
}

#[tokio::test]
async fn refusal_by_every_alertmanager_is_permanent() {
    let refusing = RecordingServer::start(400).await;
    let exporter = exporter(&[&refusing], "1h");
    let result = exporter.export(&SignalBatch(vec![loop_signal()])).await;
    assert!(
        matches!(result, Err(ExportError::Permanent { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_batch_tells_where_a_signal_ended_up() {
    let mut server = RecordingServer::start(200).await;
    let exporter = exporter(&[&server], "1h");
    let firing = loop_signal();
    exporter
        .export(&SignalBatch(vec![firing.clone(), resolved(&firing)]))
        .await
        .expect("delivered");
    let alerts = server.next_alerts().await;
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0]["endsAt"], "2024-05-01T12:01:10.000Z");
}
