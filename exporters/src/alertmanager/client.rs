//! Posting alerts to every configured Alertmanager at once: each gets all of them, and
//! one Alertmanager failing neither delays nor stops delivery to the others.

use bytes::Bytes;
use opscope_model::config::FieldError;
use reqwest::header::CONTENT_TYPE;
use tokio::task::JoinSet;

use super::alert::Alert;
use super::config::AlertmanagerConfig;
use crate::exporter::ExportError;
use crate::http_answer::{Answer, send_failed};
use opscope_net::http_client::build_client;

/// Most alerts in one request; more go out in several.
const MAX_ALERTS_PER_POST: usize = 1000;

pub struct AlertPoster {
    client: reqwest::Client,
    alerts_urls: Vec<String>,
}

impl AlertPoster {
    pub fn new(config: &AlertmanagerConfig) -> Result<Self, FieldError> {
        Ok(Self {
            client: build_client(&config.tls, &config.headers, config.timeout)?,
            alerts_urls: config.alerts_urls()?,
        })
    }

    /// Posts the alerts to every Alertmanager; fails when any one failed, retryably
    /// when any failure may pass.
    pub async fn post(&self, alerts: &[Alert]) -> Result<(), ExportError> {
        let mut failures = Vec::new();
        for chunk in alerts.chunks(MAX_ALERTS_PER_POST) {
            let body = serde_json::to_vec(chunk)
                .map_err(|e| ExportError::permanent(format!("encoding alerts: {e}")))?;
            failures.extend(self.post_everywhere(Bytes::from(body)).await);
        }
        worst_of(failures)
    }

    async fn post_everywhere(&self, body: Bytes) -> Vec<ExportError> {
        let mut posts = JoinSet::new();
        for url in &self.alerts_urls {
            posts.spawn(post_to(self.client.clone(), url.clone(), body.clone()));
        }
        let mut failures = Vec::new();
        while let Some(outcome) = posts.join_next().await {
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(failure)) => failures.push(failure),
                Err(e) => failures.push(ExportError::retryable(format!("posting alerts: {e}"))),
            }
        }
        failures
    }
}

async fn post_to(client: reqwest::Client, url: String, body: Bytes) -> Result<(), ExportError> {
    let sent = client
        .post(&url)
        .header(CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await;
    let answered = match sent {
        Ok(response) => Answer::read(response).await.into_result().map(drop),
        Err(e) => Err(send_failed(e)),
    };
    answered.map_err(|failure| naming_url(failure, &url))
}

fn naming_url(failure: ExportError, url: &str) -> ExportError {
    match failure {
        ExportError::Retryable {
            reason,
            retry_after,
        } => ExportError::Retryable {
            reason: format!("{url}: {reason}"),
            retry_after,
        },
        // Alerts go to every Alertmanager: parts would be sent again to those that
        // took the whole, so a refusal for size is final.
        ExportError::Permanent { reason } | ExportError::TooLarge { reason } => {
            ExportError::permanent(format!("{url}: {reason}"))
        }
    }
}

/// One error for several: retryable (after the longest delay asked for) when any
/// is, so that the queue tries again; otherwise permanent.
fn worst_of(failures: Vec<ExportError>) -> Result<(), ExportError> {
    if failures.is_empty() {
        return Ok(());
    }
    let reason = failures
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let mut retryable = false;
    let mut longest_retry_after = None;
    for failure in &failures {
        if let ExportError::Retryable { retry_after, .. } = failure {
            retryable = true;
            longest_retry_after = longest_retry_after.max(*retry_after);
        }
    }
    if retryable {
        Err(ExportError::Retryable {
            reason,
            retry_after: longest_retry_after,
        })
    } else {
        Err(ExportError::permanent(reason))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn any_retryable_failure_makes_the_whole_retryable() {
        let failures = vec![
            ExportError::permanent("http://a: HTTP 400"),
            ExportError::Retryable {
                reason: "http://b: HTTP 503".into(),
                retry_after: Some(Duration::from_secs(3)),
            },
            ExportError::retryable("http://c: refused"),
        ];
        assert_eq!(
            worst_of(failures),
            Err(ExportError::Retryable {
                reason: "http://a: HTTP 400; http://b: HTTP 503; http://c: refused".into(),
                retry_after: Some(Duration::from_secs(3)),
            })
        );
    }

    #[test]
    fn only_permanent_failures_are_permanent() {
        let failures = vec![ExportError::permanent("http://a: HTTP 400")];
        assert_eq!(
            worst_of(failures),
            Err(ExportError::permanent("http://a: HTTP 400"))
        );
        assert_eq!(worst_of(Vec::new()), Ok(()));
    }
}
