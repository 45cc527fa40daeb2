//! The `loadbalancing` exporter: cuts each batch by owning gateway and sends each
//! part to its gateway over OTLP/gRPC. A part a gateway refuses for now is tried
//! again alone while the others are delivered, so no gateway gets a part twice;
//! a batch no gateway took goes back to the sending queue whole.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::join_all;
use opscope_model::Telemetry;
use opscope_model::config::FieldError;
use opscope_proto::ExportService;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;

use super::config::LoadBalancingConfig;
use super::ring::Ring;
use super::routing::{partition_logs, partition_traces};
use crate::batch::{Batch, Encoded};
use crate::exporter::{Delivery, ExportError, Exporter};
use crate::otlp::GrpcExporter;
use crate::queue::{Backoff, RetryConfig};

pub struct LoadBalancingExporter {
    name: String,
    ring: Ring,
    /// One exporter per gateway, in the ring's order.
    gateways: Vec<Gateway>,
    retry: RetryConfig,
}

struct Gateway {
    endpoint: String,
    exporter: Arc<GrpcExporter>,
    max_request_size: Option<usize>,
}

impl LoadBalancingExporter {
    pub fn new(name: &str, config: &LoadBalancingConfig) -> Result<Self, FieldError> {
        let ring = Ring::new(config.endpoints());
        let gateways = ring
            .endpoints()
            .map(|endpoint| {
                let settings = config.destination(endpoint)?;
                Ok(Gateway {
                    endpoint: endpoint.to_string(),
                    exporter: Arc::new(GrpcExporter::new(&settings)?),
                    max_request_size: settings.request_size_limit(),
                })
            })
            .collect::<Result<Vec<_>, FieldError>>()?;
        Ok(Self {
            name: name.to_string(),
            ring,
            gateways,
            retry: config.retry_on_failure.clone(),
        })
    }

    /// Sends each gateway its part, parts a gateway refuses for now again until
    /// they pass or the retries run out.
    async fn deliver<T: Telemetry + ExportService>(
        &self,
        parts: Vec<T>,
    ) -> Result<Delivery, ExportError> {
        let mut pending: Vec<(usize, Encoded<T>)> = Vec::new();
        for (owner, part) in parts.into_iter().enumerate() {
            if part.item_count() == 0 {
                continue;
            }
            let encoded = Encoded::new(&part);
            let limit = self.gateways.get(owner).and_then(|g| g.max_request_size);
            let cut = match limit {
                Some(max) => encoded.cut(max).map_err(ExportError::permanent)?,
                None => vec![encoded],
            };
            pending.extend(cut.into_iter().map(|piece| (owner, piece)));
        }
        let started = Instant::now();
        let mut backoff = Backoff::new(&self.retry);
        let mut delivered_any = false;
        let mut delivery = Delivery::default();
        loop {
            let sends = pending
                .iter()
                .map(|(owner, piece)| self.send(*owner, piece));
            let results = join_all(sends).await;
            let mut refused_for_now = Vec::new();
            let mut last_error = None;
            for ((owner, piece), result) in pending.into_iter().zip(results) {
                match result {
                    Ok(answer) => {
                        delivered_any = true;
                        add(&mut delivery, answer);
                    }
                    Err(error @ ExportError::Retryable { .. }) if self.retry.enabled => {
                        last_error = Some(error);
                        refused_for_now.push((owner, piece));
                    }
                    Err(error) => {
                        delivered_any = true;
                        add(&mut delivery, self.refused(owner, piece.items(), &error));
                    }
                }
            }
            if refused_for_now.is_empty() {
                return Ok(delivery);
            }
            // Nothing went anywhere yet: the sending queue tries the whole batch again.
            if !delivered_any && let Some(error) = last_error {
                return Err(error);
            }
            let limit = self.retry.max_elapsed_time;
            if !limit.is_zero() && started.elapsed() >= limit {
                for (owner, piece) in refused_for_now {
                    let error = ExportError::retryable(format!("retries ran out after {limit:?}"));
                    add(&mut delivery, self.refused(owner, piece.items(), &error));
                }
                return Ok(delivery);
            }
            tokio::time::sleep(backoff.next_delay()).await;
            pending = refused_for_now;
        }
    }

    async fn send<T: Telemetry + ExportService>(
        &self,
        owner: usize,
        piece: &Encoded<T>,
    ) -> Result<Delivery, ExportError> {
        match self.gateways.get(owner) {
            Some(gateway) => gateway.exporter.export(piece).await,
            None => Err(ExportError::permanent("no gateway owns the part")),
        }
    }

    /// What a part a gateway did not take counts as: items refused, named.
    fn refused(&self, owner: usize, items: usize, error: &ExportError) -> Delivery {
        let endpoint = self
            .gateways
            .get(owner)
            .map_or("?", |gateway| gateway.endpoint.as_str());
        tracing::warn!(exporter = %self.name, gateway = %endpoint, items, %error,
            "loadbalancing: a gateway did not take its part");
        Delivery {
            rejected_items: items as u64,
            rejected_reason: Some("gateway_refused"),
            message: format!("gateway {endpoint}: {error}"),
        }
    }
}

fn add(total: &mut Delivery, answer: Delivery) {
    total.rejected_items += answer.rejected_items;
    if total.rejected_reason.is_none() {
        total.rejected_reason = answer.rejected_reason;
    }
    if total.message.is_empty() {
        total.message = answer.message;
    }
}

impl Exporter<ExportTraceServiceRequest> for LoadBalancingExporter {
    async fn export(&self, batch: &ExportTraceServiceRequest) -> Result<Delivery, ExportError> {
        self.deliver(partition_traces(batch.clone(), &self.ring))
            .await
    }
}

impl Exporter<ExportLogsServiceRequest> for LoadBalancingExporter {
    async fn export(&self, batch: &ExportLogsServiceRequest) -> Result<Delivery, ExportError> {
        self.deliver(partition_logs(batch.clone(), &self.ring))
            .await
    }
}
