//! The guards in front of a receiver's handlers: a request without valid
//! credentials is answered HTTP 401 (with `WWW-Authenticate`) or gRPC
//! UNAUTHENTICATED, counted with reason `unauthenticated`, and its body never read.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tonic::Status;
use tonic::service::Interceptor;

use super::Authenticator;
use crate::self_telemetry::ReceiverMetrics;

/// The refusal reason counted for requests without valid credentials.
const UNAUTHENTICATED: &str = "unauthenticated";
const MESSAGE: &str = "missing or invalid credentials";

/// Checks the requests of an HTTP receiver's routes.
#[derive(Clone)]
pub struct HttpGuard {
    authenticator: Arc<Authenticator>,
    metrics: ReceiverMetrics,
}

impl HttpGuard {
    /// Puts the check in front of every route of `router`, after routing, so a
    /// refusal is counted under the route's own signal type.
    pub fn protect(
        router: Router,
        authenticator: Option<&Arc<Authenticator>>,
        metrics: ReceiverMetrics,
    ) -> Router {
        let Some(authenticator) = authenticator else {
            return router;
        };
        let guard = Self {
            authenticator: Arc::clone(authenticator),
            metrics,
        };
        router.route_layer(axum::middleware::from_fn_with_state(guard, check))
    }
}

async fn check(State(guard): State<HttpGuard>, request: Request, next: Next) -> Response {
    let authorization = request
        .headers()
        .get(AUTHORIZATION)
        .map(|value| value.as_bytes());
    if guard.authenticator.admits(authorization) {
        return next.run(request).await;
    }
    guard.metrics.refused(UNAUTHENTICATED, 0);
    tracing::debug!(path = %request.uri().path(), "request without valid credentials refused");
    let mut response = (StatusCode::UNAUTHORIZED, MESSAGE).into_response();
    for challenge in guard.authenticator.challenges() {
        response
            .headers_mut()
            .append(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    }
    response
}

/// Checks the calls of one gRPC service; no authenticator lets every call in.
#[derive(Clone)]
pub struct GrpcGuard {
    authenticator: Option<Arc<Authenticator>>,
    metrics: ReceiverMetrics,
}

impl GrpcGuard {
    pub fn new(authenticator: Option<&Arc<Authenticator>>, metrics: ReceiverMetrics) -> Self {
        Self {
            authenticator: authenticator.cloned(),
            metrics,
        }
    }
}

impl Interceptor for GrpcGuard {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        let Some(authenticator) = &self.authenticator else {
            return Ok(request);
        };
        let authorization = request
            .metadata()
            .get(AUTHORIZATION.as_str())
            .map(|value| value.as_bytes());
        if authenticator.admits(authorization) {
            return Ok(request);
        }
        self.metrics.refused(UNAUTHENTICATED, 0);
        tracing::debug!("gRPC call without valid credentials refused");
        Err(Status::unauthenticated(MESSAGE))
    }
}
