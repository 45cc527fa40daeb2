//! The `k8s_objects` receiver: lists and watches resources of the API server with
//! kube-rs's watcher (bookmarks, resuming from the last resourceVersion, a re-list
//! after 410 Gone, backoff) and tells each write and the state it leaves as a log
//! record the correlator reads as it reads an audit event of the same call. So a
//! stuck deletion, a write loop or a field fought over shows with no instrumentation,
//! no log format and no audit webhook: the API server's record of the object is
//! enough. The initial list and every re-list are state, never writes.

pub mod config;
mod records;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::{BoxStream, select_all};
use kube::api::{Api, DynamicObject};
use kube::discovery::{self, ApiResource};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Config};
use opscope_model::TelemetryKind;
use opscope_model::hash::fnv1a;
use opscope_model::repeated_warning::RepeatedWarning;
use opscope_model::timestamp::now_unix_nanos;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use tokio::task::JoinSet;

pub use config::K8sObjectsConfig;
use config::{AuthType, WatchedObjects};
use records::{Change, record};

use super::{ReceiverContext, ReceiverError};
use crate::consumer::Consumer;
use crate::self_telemetry::ReceiverMetrics;

/// Listed objects sent on together; a write goes on alone, at once.
const LIST_BATCH: usize = 500;
/// How long a failed discovery waits before it is tried again, at most.
const MAX_RETRY: Duration = Duration::from_secs(30);
/// A watch error said again at most this often.
const WARNING_INTERVAL: Duration = Duration::from_secs(60);

pub async fn start(
    config: &K8sObjectsConfig,
    context: ReceiverContext,
    tasks: &mut JoinSet<()>,
) -> Result<(), ReceiverError> {
    let client = client(config)
        .await
        .map_err(|message| ReceiverError::Setup {
            receiver: context.id.clone(),
            message,
        })?;
    let context = Arc::new(context);
    for objects in &config.objects {
        let watch = Watch {
            client: client.clone(),
            objects: objects.clone(),
            max_objects: config.max_objects,
            logs: context.consumers.logs.clone(),
            metrics: context
                .telemetry
                .receiver(TelemetryKind::Logs, &context.id, "watch"),
            receiver: context.id.clone(),
        };
        let stop = context.shutdown.clone();
        tasks.spawn(async move {
            tokio::select! {
                () = watch.run() => {}
                () = stop.cancelled() => {}
            }
        });
    }
    tracing::info!(receiver = %context.id, resources = config.objects.len(), "watching the API server's objects");
    Ok(())
}

/// The API server's client: in a pod, from its service account; else from the
/// kubeconfig given, `KUBECONFIG` or `~/.kube/config`.
async fn client(config: &K8sObjectsConfig) -> Result<Client, String> {
    let kube_config = match (config.auth_type, &config.kubeconfig) {
        (AuthType::ServiceAccount, _) => Config::incluster().map_err(|error| {
            format!("auth_type serviceAccount: {error} (not in a pod? use auth_type: kubeConfig)")
        })?,
        (AuthType::KubeConfig, Some(path)) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|error| format!("kubeconfig {}: {error}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|error| format!("kubeconfig {}: {error}", path.display()))?
        }
        (AuthType::KubeConfig, None) => Config::from_kubeconfig(&Default::default())
            .await
            .map_err(|error| format!("auth_type kubeConfig: {error}"))?,
    };
    Client::try_from(kube_config).map_err(|error| format!("the API server's client: {error}"))
}

/// One watched resource.
struct Watch {
    client: Client,
    objects: WatchedObjects,
    max_objects: usize,
    logs: Consumer<ExportLogsServiceRequest>,
    metrics: ReceiverMetrics,
    receiver: String,
}

impl Watch {
    async fn run(self) {
        let resource = self.discover().await;
        let streams: Vec<BoxStream<'static, watcher::Result<Event<DynamicObject>>>> = self
            .apis(&resource)
            .into_iter()
            .map(|api| {
                let config = watcher::Config {
                    label_selector: self.objects.label_selector.clone(),
                    ..watcher::Config::default()
                };
                watcher::watcher(api, config).default_backoff().boxed()
            })
            .collect();
        let mut events = select_all(streams);
        // The objects seen (their uids' hashes): a write to one not seen is its creation.
        let mut seen: HashSet<u64> = HashSet::new();
        let mut listed: Vec<LogRecord> = Vec::new();
        let mut warning = RepeatedWarning::new(WARNING_INTERVAL);
        tracing::info!(receiver = %self.receiver, resource = %resource.plural, group = %resource.group,
            version = %resource.version, "watching");
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    self.metrics.refused("watch_error", 0);
                    if let Some(held_back) = warning.occurred_now() {
                        tracing::warn!(receiver = %self.receiver, resource = %resource.plural, %error, not_logged = held_back,
                            "k8s_objects: the watch failed; retrying with backoff");
                    }
                    continue;
                }
            };
            let now = now_unix_nanos();
            match event {
                Event::Init => listed.clear(),
                Event::InitApply(object) => {
                    if seen.len() < self.max_objects {
                        seen.insert(uid_of(&object));
                    }
                    listed.push(record(&object, &resource, Change::Listed, now));
                    if listed.len() >= LIST_BATCH {
                        self.send(std::mem::take(&mut listed)).await;
                    }
                }
                Event::InitDone => self.send(std::mem::take(&mut listed)).await,
                Event::Apply(object) => {
                    let uid = uid_of(&object);
                    let change = if seen.contains(&uid) {
                        Change::Written
                    } else {
                        if seen.len() >= self.max_objects {
                            // Bounded: forgetting costs a write told as a creation.
                            seen.clear();
                        }
                        seen.insert(uid);
                        Change::Created
                    };
                    self.send(vec![record(&object, &resource, change, now)])
                        .await;
                }
                Event::Delete(object) => {
                    seen.remove(&uid_of(&object));
                    self.send(vec![record(&object, &resource, Change::Deleted, now)])
                        .await;
                }
            }
        }
    }

    /// The resource the API server serves under the configured name and group, at
    /// its preferred version; tried again with backoff while it cannot be found.
    async fn discover(&self) -> ApiResource {
        let mut wait = Duration::from_secs(1);
        let mut warning = RepeatedWarning::new(WARNING_INTERVAL);
        loop {
            let found = match discovery::group(&self.client, &self.objects.group).await {
                Ok(group) => group
                    .recommended_resources()
                    .into_iter()
                    .map(|(resource, _)| resource)
                    .find(|resource| resource.plural == self.objects.name)
                    .ok_or_else(|| {
                        format!(
                            "the API group {} serves no resource {}",
                            self.objects.group, self.objects.name
                        )
                    }),
                Err(error) => Err(error.to_string()),
            };
            match found {
                Ok(resource) => return resource,
                Err(error) => {
                    if let Some(held_back) = warning.occurred_now() {
                        tracing::warn!(receiver = %self.receiver, resource = %self.objects.name,
                            group = %self.objects.group, %error, not_logged = held_back,
                            "k8s_objects: cannot find the resource; trying again");
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(MAX_RETRY);
                }
            }
        }
    }

    /// The APIs to watch: one per namespace named, else the whole cluster.
    fn apis(&self, resource: &ApiResource) -> Vec<Api<DynamicObject>> {
        if self.objects.namespaces.is_empty() {
            return vec![Api::all_with(self.client.clone(), resource)];
        }
        (self.objects.namespaces.iter())
            .map(|namespace| Api::namespaced_with(self.client.clone(), namespace, resource))
            .collect()
    }

    /// Hands records to the pipelines; what they refuse is counted.
    async fn send(&self, records: Vec<LogRecord>) {
        if records.is_empty() {
            return;
        }
        let count = records.len();
        let request = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: records,
                    ..ScopeLogs::default()
                }],
                ..ResourceLogs::default()
            }],
        };
        match self.logs.deliver(request).await {
            Ok(()) => self.metrics.accepted(count),
            Err(refusal) => self.metrics.refused(refusal.reason(), count),
        }
    }
}

fn uid_of(object: &DynamicObject) -> u64 {
    let metadata = &object.metadata;
    match &metadata.uid {
        Some(uid) => fnv1a(uid.as_bytes()),
        None => fnv1a(
            format!(
                "{}/{}",
                metadata.namespace.as_deref().unwrap_or_default(),
                metadata.name.as_deref().unwrap_or_default()
            )
            .as_bytes(),
        ),
    }
}
