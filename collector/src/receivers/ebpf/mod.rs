//! The `ebpf` receiver: a kernel probe that counts, per cgroup, the outcomes of TCP
//! connections to the API server, the bytes and send calls on them, process and
//! thread creation, and writes failing with ENOSPC; every interval the counts of
//! operator pods become OTLP metrics. It sees operators that send no telemetry of
//! their own, on clusters without an audit webhook.
//!
//! The probe is compiled only with the `ebpf` cargo feature. Where it cannot run
//! (not built in, capabilities, BTF, cgroups), the receiver says what is missing,
//! counts it, and the agent runs on without it.

// Without the probe, only the settings and the reason are used; the rest is still
// compiled and unit-tested.
#![cfg_attr(not(feature = "ebpf"), allow(dead_code))]

pub(crate) mod cgroup_index;
pub(crate) mod cgroup_path;
pub mod config;
pub(crate) mod counts;
pub(crate) mod otlp_metrics;
pub(crate) mod owners;
pub(crate) mod pod_names;
pub(crate) mod preflight;
#[cfg(feature = "ebpf")]
mod probe;
pub(crate) mod rounds;

use tokio::task::JoinSet;

pub use config::EbpfConfig;
pub use preflight::Unavailable;

use super::{ReceiverContext, ReceiverError};

/// Starts the probe and its rounds. Where the probe cannot run, logs why, counts it
/// (`opscope_receiver_unavailable_total`) and returns without it: the rest of the agent
/// does not depend on it.
pub async fn start(
    config: &EbpfConfig,
    context: ReceiverContext,
    tasks: &mut JoinSet<()>,
) -> Result<(), ReceiverError> {
    match running::start(config, &context, tasks).await {
        Ok(()) => {}
        Err(unavailable) => {
            tracing::error!(receiver = %context.id, reason = unavailable.reason(),
                "the kernel probe is not running: {unavailable}");
            context
                .telemetry
                .receiver_unavailable(&context.id, unavailable.reason());
        }
    }
    Ok(())
}

#[cfg(not(feature = "ebpf"))]
mod running {
    use super::*;

    pub async fn start(
        _config: &EbpfConfig,
        _context: &ReceiverContext,
        _tasks: &mut JoinSet<()>,
    ) -> Result<(), Unavailable> {
        Err(Unavailable::NotBuilt)
    }
}

#[cfg(feature = "ebpf")]
mod running {
    use std::sync::mpsc;
    use std::time::Duration;

    use opscope_model::TelemetryKind;
    use opscope_model::timestamp::now_unix_nanos;

    use super::cgroup_index::hierarchy;
    use super::otlp_metrics::point_count;
    use super::owners::{NamespaceFilter, Owners};
    use super::pod_names::PodNames;
    use super::preflight::{check_host, tracefs_mounted};
    use super::probe::{Probe, ProbeStorage};
    use super::rounds::Rounds;
    use super::*;

    /// Loads the probe on a thread of its own (its map reads and the walks of the
    /// cgroup and pod folders block) and waits until it is attached or has failed.
    pub async fn start(
        config: &EbpfConfig,
        context: &ReceiverContext,
        tasks: &mut JoinSet<()>,
    ) -> Result<(), Unavailable> {
        check_host()?;
        let (version, cgroups) = hierarchy(&config.cgroup_root).map_err(Unavailable::Cgroups)?;
        let count_enospc = tracefs_mounted();
        if !count_enospc {
            tracing::warn!(receiver = %context.id,
                "tracefs is not mounted (/sys/kernel/tracing): writes failing with ENOSPC are not counted");
            context
                .telemetry
                .receiver_unavailable(&context.id, "no_tracefs");
        }
        let names = PodNames::new(config.pod_logs.clone(), config.container_logs.clone());
        let filter = NamespaceFilter {
            namespaces: &config.namespaces,
            exclude_namespaces: &config.exclude_namespaces,
        };
        let owners = Owners::new(
            cgroups.clone(),
            names,
            filter,
            config.include_host_processes,
        );
        let settings = Settings {
            receiver: context.id.clone(),
            version,
            api_servers: config.api_server_addresses(),
            count_enospc,
            interval: config.interval,
            rounds: Rounds::new(owners),
            consumer: context.consumers.metrics.clone(),
            metrics: context
                .telemetry
                .receiver(TelemetryKind::Metrics, &context.id, "ebpf"),
        };
        let (loaded_tx, loaded_rx) = tokio::sync::oneshot::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("ebpf-probe".into())
            .spawn(move || run(settings, loaded_tx, stop_rx))
            .map_err(|e| Unavailable::Load(format!("cannot start the probe's thread: {e}")))?;
        match loaded_rx.await {
            Ok(Ok(())) => {}
            Ok(Err(unavailable)) => return Err(unavailable),
            Err(_) => return Err(Unavailable::Load("the probe's thread ended".into())),
        }
        tracing::info!(receiver = %context.id, cgroups = %cgroups.display(), ?version,
            api_servers = ?config.api_servers, "kernel probe attached");
        let shutdown = context.shutdown.clone();
        tasks.spawn(async move {
            shutdown.cancelled().await;
            drop(stop_tx);
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        });
        Ok(())
    }

    struct Settings {
        receiver: String,
        version: super::cgroup_index::CgroupVersion,
        api_servers: Vec<std::net::SocketAddr>,
        count_enospc: bool,
        interval: Duration,
        rounds: Rounds,
        consumer: crate::consumer::Consumer<
            opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest,
        >,
        metrics: crate::self_telemetry::ReceiverMetrics,
    }

    fn run(
        mut settings: Settings,
        loaded: tokio::sync::oneshot::Sender<Result<(), Unavailable>>,
        stop: mpsc::Receiver<()>,
    ) {
        let mut storage = ProbeStorage::uninit();
        let probe = match Probe::load(
            &mut storage,
            settings.version,
            &settings.api_servers,
            settings.count_enospc,
        ) {
            Ok(probe) => probe,
            Err(error) => {
                let _ = loaded.send(Err(Unavailable::Load(error.to_string())));
                return;
            }
        };
        let _ = loaded.send(Ok(()));
        let mut dropped = 0;
        while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(settings.interval) {
            let round = settings.rounds.round(probe.read(), now_unix_nanos());
            for id in round.gone {
                probe.forget(id);
            }
            if let Some(request) = round.request {
                let points = point_count(&request);
                match settings.consumer.push(request) {
                    Ok(()) => settings.metrics.accepted(points),
                    Err(refusal) => settings.metrics.refused(refusal.reason(), points),
                }
            }
            let now_dropped = probe.dropped();
            if now_dropped > dropped {
                tracing::warn!(receiver = %settings.receiver, lost = now_dropped - dropped,
                    "the kernel's table of cgroups is full; counts of new cgroups are lost");
                dropped = now_dropped;
            }
        }
    }
}
