//! Scraping one target: `GET` its page every interval, parse it and push its series
//! under the target's resource; a failed scrape is counted, logged and retried.

use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use opscope_model::Telemetry;
use opscope_model::TelemetryKind;
use opscope_model::attributes::{set, set_str};
use opscope_model::config::FieldError;
use opscope_model::semconv::SERVICE_NAME;
use opscope_model::timestamp::now_unix_nanos;
use opscope_net::http_client::build_client;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::common::v1::InstrumentationScope;
use opscope_proto::otlp::common::v1::any_value::Value;
use opscope_proto::otlp::metrics::v1::{Metric, ResourceMetrics, ScopeMetrics};
use opscope_proto::otlp::resource::v1::Resource;
use reqwest::header::CONTENT_TYPE;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::config::{PrometheusScrapeConfig, Scheme};
use super::exposition::{Format, parse};
use super::otlp_metrics::{gauge, to_metrics};
use super::series_starts::SeriesStarts;
use super::targets::Target;
use crate::consumer::Consumer;
use crate::receivers::ReceiverContext;
use crate::self_telemetry::ReceiverMetrics;

/// OpenMetrics preferred, the text format accepted, as Prometheus asks.
const ACCEPT: &str = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
const SCOPE_NAME: &str = "opscope/prometheus_scrape";
const SERVICE_INSTANCE_ID: &str = "service.instance.id";

/// What every target of one receiver is scraped with.
pub struct ScrapeSettings {
    client: reqwest::Client,
    scheme: Scheme,
    metrics_path: String,
    bearer_token: Option<BearerToken>,
    job_name: Option<String>,
    labels: BTreeMap<String, String>,
    pub interval: Duration,
    max_page_size: usize,
    max_series: usize,
    consumer: Consumer<ExportMetricsServiceRequest>,
    metrics: ReceiverMetrics,
    receiver: String,
}

enum BearerToken {
    Inline(String),
    /// Read at every scrape: service-account tokens rotate.
    File(PathBuf),
}

impl ScrapeSettings {
    pub fn new(
        config: &PrometheusScrapeConfig,
        context: &ReceiverContext,
    ) -> Result<Self, FieldError> {
        let timeout_seconds = format!("{:.3}", config.scrape_timeout().as_secs_f64());
        let headers = BTreeMap::from([
            ("Accept".to_string(), ACCEPT.to_string()),
            (
                "X-Prometheus-Scrape-Timeout-Seconds".to_string(),
                timeout_seconds,
            ),
        ]);
        let bearer_token = match (&config.bearer_token, &config.bearer_token_file) {
            (Some(token), _) => Some(BearerToken::Inline(token.clone())),
            (None, Some(path)) => Some(BearerToken::File(path.clone())),
            (None, None) => None,
        };
        Ok(Self {
            client: build_client(&config.tls, &headers, config.scrape_timeout())?,
            scheme: config.scheme,
            metrics_path: config.metrics_path.clone(),
            bearer_token,
            job_name: config.job_name.clone(),
            labels: config.labels.clone(),
            interval: config.interval,
            max_page_size: config.max_page_size,
            max_series: config.max_series,
            consumer: context.consumers.metrics.clone(),
            metrics: context
                .telemetry
                .receiver(TelemetryKind::Metrics, &context.id, "scrape"),
            receiver: context.id.clone(),
        })
    }

    /// The id of the receiver, for logs.
    pub fn receiver(&self) -> &str {
        &self.receiver
    }

    fn bearer_token(&self) -> Result<Option<String>, String> {
        match &self.bearer_token {
            None => Ok(None),
            Some(BearerToken::Inline(token)) => Ok(Some(token.clone())),
            Some(BearerToken::File(path)) => std::fs::read_to_string(path)
                .map(|token| Some(token.trim().to_string()))
                .map_err(|e| format!("cannot read bearer_token_file {}: {e}", path.display())),
        }
    }
}

/// Scrapes `target` every interval, the first time at once, until `stop` fires.
pub async fn run(target: Target, settings: Arc<ScrapeSettings>, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(settings.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut scraper = TargetScraper::new(target, settings);
    stop.run_until_cancelled(async {
        loop {
            ticks.tick().await;
            scraper.scrape_once().await;
        }
    })
    .await;
}

struct TargetScraper {
    target: Target,
    settings: Arc<ScrapeSettings>,
    url: String,
    resource: Resource,
    starts: SeriesStarts,
    /// Why the last scrape failed; a new reason is logged, a repeated one is not.
    last_error: Option<String>,
}

impl TargetScraper {
    fn new(target: Target, settings: Arc<ScrapeSettings>) -> Self {
        let url = format!(
            "{}://{}{}",
            settings.scheme.as_str(),
            target.address,
            settings.metrics_path
        );
        Self {
            resource: target_resource(&target, &settings),
            target,
            settings,
            url,
            starts: SeriesStarts::default(),
            last_error: None,
        }
    }

    /// One scrape: the page's series and `up` 1, or `up` 0 alone when it failed.
    async fn scrape_once(&mut self) {
        let scraped_at = now_unix_nanos();
        let mut metrics = match self.scrape_page(scraped_at).await {
            Ok(metrics) => {
                self.note_success();
                metrics
            }
            Err(error) => {
                self.note_failure(error);
                Vec::new()
            }
        };
        let up = if self.last_error.is_none() { 1.0 } else { 0.0 };
        metrics.push(gauge("up", up, scraped_at));
        self.push(metrics);
    }

    async fn scrape_page(&mut self, scraped_at: u64) -> Result<Vec<Metric>, String> {
        let (format, page) = self.fetch().await?;
        let families = parse(&page, format, self.settings.max_series).map_err(|e| e.to_string())?;
        Ok(to_metrics(&families, scraped_at, &mut self.starts))
    }

    async fn fetch(&self) -> Result<(Format, String), String> {
        let mut request = self.settings.client.get(&self.url);
        if let Some(token) = self.settings.bearer_token()? {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("GET {}: {}", self.url, error_chain(&e)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("GET {}: HTTP {status}", self.url));
        }
        let format = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map_or(Format::Text, Format::of_content_type);
        let page = read_page(response, self.settings.max_page_size).await?;
        Ok((format, page))
    }

    /// Pushes one request; a refused one is dropped, as the next scrape carries the
    /// same state again.
    fn push(&self, metrics: Vec<Metric>) {
        let request = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(self.resource.clone()),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: SCOPE_NAME.into(),
                        ..Default::default()
                    }),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let points = request.item_count();
        let settings = &self.settings;
        match settings.consumer.push(request) {
            Ok(()) => settings.metrics.accepted(points),
            Err(refusal) => {
                settings.metrics.refused(refusal.reason(), points);
                tracing::debug!(receiver = %settings.receiver, target = %self.target.address,
                    reason = refusal.reason(), "scrape not taken; the next one carries its state");
            }
        }
    }

    fn note_success(&mut self) {
        if self.last_error.take().is_some() {
            tracing::info!(receiver = %self.settings.receiver, target = %self.target.address,
                "scrape succeeds again");
        }
    }

    fn note_failure(&mut self, error: String) {
        self.settings.metrics.refused("scrape_failed", 0);
        if self.last_error.as_ref() != Some(&error) {
            tracing::warn!(receiver = %self.settings.receiver, target = %self.target.address,
                %error, "scrape failed");
        }
        self.last_error = Some(error);
    }
}

/// The resource of a target's series: the job, the instance (`host:port`), the
/// configured labels and then its group's labels.
fn target_resource(target: &Target, settings: &ScrapeSettings) -> Resource {
    let mut attributes = Vec::new();
    if let Some(job) = &settings.job_name {
        set_str(&mut attributes, SERVICE_NAME, job);
    }
    set_str(&mut attributes, SERVICE_INSTANCE_ID, &target.address);
    if let Some((host, port)) = target.address.rsplit_once(':') {
        set_str(&mut attributes, "server.address", host);
        if let Ok(port) = port.parse::<i64>() {
            set(&mut attributes, "server.port", Value::IntValue(port));
        }
    }
    set_str(&mut attributes, "url.scheme", settings.scheme.as_str());
    for (key, value) in settings.labels.iter().chain(&target.labels) {
        set_str(&mut attributes, key, value);
    }
    Resource {
        attributes,
        ..Default::default()
    }
}

/// The page, up to `limit` bytes; a longer one fails the scrape.
async fn read_page(mut response: reqwest::Response, limit: usize) -> Result<String, String> {
    let too_large = || format!("the page exceeds {limit} bytes (max_page_size)");
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(too_large());
    }
    let mut page = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading the page: {}", error_chain(&e)))?
    {
        if page.len() + chunk.len() > limit {
            return Err(too_large());
        }
        page.extend_from_slice(&chunk);
    }
    String::from_utf8(page).map_err(|_| "the page is not UTF-8 text".to_string())
}

/// An error and its causes, as `a: b: c`.
fn error_chain(error: &(dyn Error + 'static)) -> String {
    std::iter::successors(Some(error), |&e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}
