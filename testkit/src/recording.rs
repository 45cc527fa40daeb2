//! A stand-in for a push backend (Loki, a remote-write receiver): an HTTP server on
//! loopback that records every request and answers from a script, 204 once it runs out.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use tokio::task::JoinHandle;

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl RecordedRequest {
    /// The value of the header `name`, when it is present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Default)]
struct Recording {
    requests: Mutex<Vec<RecordedRequest>>,
    answers: Mutex<VecDeque<StatusCode>>,
}

impl Recording {
    fn requests(&self) -> MutexGuard<'_, Vec<RecordedRequest>> {
        self.requests.lock().expect("recording lock")
    }
}

/// The server, on a port of its own on 127.0.0.1 and served by the test's Tokio
/// runtime; stopped on drop.
pub struct RecordingServer {
    address: SocketAddr,
    recording: Arc<Recording>,
    task: JoinHandle<()>,
}

impl RecordingServer {
    /// Starts a server that answers the first requests with `answers`, in order, and
    /// every later one with 204, whatever the method and path.
    pub async fn start(answers: &[StatusCode]) -> Self {
        let recording = Arc::new(Recording::default());
        recording
            .answers
            .lock()
            .expect("recording lock")
            .extend(answers);
        let app = Router::new()
            .fallback(record)
            .with_state(Arc::clone(&recording));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let address = listener.local_addr().expect("local address");
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("serve the recording server");
        });
        Self {
            address,
            recording,
            task,
        }
    }

    /// `http://127.0.0.1:<port>`, without a trailing `/`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The requests received so far, which the server then forgets.
    pub fn take(&self) -> Vec<RecordedRequest> {
        std::mem::take(&mut *self.recording.requests())
    }

    /// A copy of the requests received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.recording.requests().clone()
    }
}

impl Drop for RecordingServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(
    State(recording): State<Arc<Recording>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    recording.requests().push(RecordedRequest {
        path: uri.path().to_string(),
        headers,
        body,
    });
    let next = recording
        .answers
        .lock()
        .expect("recording lock")
        .pop_front();
    next.unwrap_or(StatusCode::NO_CONTENT)
}
