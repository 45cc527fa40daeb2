//! widget-operator-kube-rs: the kube-rs twin of e2e/operators/controller-runtime, an
//! operator of Widgets (e2e.opscope.dev/v1) in one of two behaviours (--mode):
//!
//!   timestamp-loop  writes the time into status.lastReconcileTime on every reconcile
//!                   and watches unfiltered, so each status write is the watch event
//!                   that starts the next reconcile: the incident opscope detects
//!   fixed           watches generation changes only and writes the status only when
//!                   status.phase or status.observedGeneration is not what it should be
//!
//! It logs in tracing's default text format to stdout and, when
//! OTEL_EXPORTER_OTLP_ENDPOINT is set, exports its spans over OTLP as opscope's
//! docs/instrumenting.md says.

use std::{process::ExitCode, sync::Arc, time::Duration};

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use futures::StreamExt;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams},
    runtime::{
        Controller, WatchStreamExt, controller::Action, predicates, reflector::store::Writer,
        watcher,
    },
};
use opentelemetry::{KeyValue, trace::Status, trace::TracerProvider as _};
use opentelemetry_sdk::{
    Resource,
    trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider},
};
use serde_json::{Value, json};
use tracing::{Level, error, field::Empty, field::display, info, warn};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{EnvFilter, filter::LevelFilter, filter::filter_fn, prelude::*};

const GROUP: &str = "e2e.opscope.dev";
const VERSION: &str = "v1";
const KIND: &str = "Widget";
const PLURAL: &str = "widgets";
const PHASE: &str = "Ready";

#[derive(Parser)]
struct Args {
    #[arg(long, value_enum, default_value_t = Mode::TimestampLoop)]
    mode: Mode,
    /// Reconcile the Widgets of this namespace only.
    #[arg(long)]
    watch_namespace: String,
    /// operator.name (and service.name) of the traces.
    #[arg(long, default_value = "widget-operator-kube-rs")]
    operator: String,
    /// The namespace this process runs in.
    #[arg(long, default_value = "widget-system")]
    pod_namespace: String,
    /// The pod this process runs as.
    #[arg(long, default_value = "widget-operator-kube-rs-0")]
    pod_name: String,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    TimestampLoop,
    Fixed,
}

struct Context {
    client: Client,
    resource: ApiResource,
    mode: Mode,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("the Widget has no namespace")]
    NoNamespace,
    #[error("patching the status: {0}")]
    PatchStatus(#[source] kube::Error),
}

/// One reconcile, in a `reconcile` span under kube's `reconciling object` span, so
/// the API calls of `write_status` are its children.
async fn reconcile(widget: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let id = format!("{:016x}", rand::random::<u64>());
    // opscope takes the outermost reconcile span of a trace, kube's `reconciling object`,
    // for the reconcile: it gets the id (which the log lines print) and the outcome too.
    let kube_span = tracing::Span::current();
    kube_span.set_attribute("reconcile.id", id.clone());
    let span = tracing::info_span!(
        "reconcile",
        reconcile.id = %id,
        k8s.object.group = %GROUP,
        k8s.object.kind = %KIND,
        k8s.object.namespace = %widget.namespace().unwrap_or_default(),
        k8s.object.name = %widget.name_any(),
        k8s.object.generation = widget.metadata.generation,
        reconcile.result = Empty,
        otel.status_code = Empty,
    );
    let result = tracing::Instrument::instrument(write_status(&widget, &ctx), span.clone()).await;
    let outcome = if result.is_ok() { "ok" } else { "error" };
    span.record("reconcile.result", display(outcome));
    kube_span.set_attribute("reconcile.result", outcome);
    if let Err(error) = &result {
        span.record("otel.status_code", display("ERROR"));
        // After otel.status_code, which sets an error status without a message.
        span.set_status(Status::error(error.to_string()));
        kube_span.set_status(Status::error(error.to_string()));
    }
    span.in_scope(|| match &result {
        Ok(wrote) => info!(wrote_status = wrote, "reconciled widget"),
        Err(error) => warn!(error = %error, "reconcile failed"),
    });
    result.map(|_| Action::await_change())
}

/// Writes the status the mode writes; whether it wrote one.
async fn write_status(widget: &DynamicObject, ctx: &Context) -> Result<bool, Error> {
    // Microseconds, so that no two writes are the same (a same-value write changes nothing).
    let now = format!("{:.6}", jiff::Timestamp::now());
    let status = match ctx.mode {
        Mode::TimestampLoop => json!({"lastReconcileTime": now, "phase": PHASE}),
        Mode::Fixed => {
            let current = widget.data.get("status");
            let field = |name| current.and_then(|status| status.get(name));
            if field("phase").and_then(Value::as_str) == Some(PHASE)
                && field("observedGeneration").and_then(Value::as_i64) == widget.metadata.generation
            {
                return Ok(false);
            }
            json!({
                "lastReconcileTime": now,
                "phase": PHASE,
                "observedGeneration": widget.metadata.generation,
            })
        }
    };
    let namespace = widget.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.resource);
    let patch = Patch::Merge(json!({ "status": status }));
    api.patch_status(&widget.name_any(), &PatchParams::default(), &patch)
        .await
        .map_err(Error::PatchStatus)?;
    Ok(true)
}

fn error_policy(_: Arc<DynamicObject>, _: &Error, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(5))
}

/// fmt lines to stdout and, when OTEL_EXPORTER_OTLP_ENDPOINT is set, spans over OTLP.
fn start_tracing(args: &Args) -> anyhow::Result<Option<SdkTracerProvider>> {
    let levels = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env_lossy();
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_filter(levels);
    let provider = match std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT") {
        None => None,
        Some(_) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .build()?;
            let batch = BatchConfigBuilder::default()
                .with_scheduled_delay(Duration::from_secs(1))
                .build();
            let resource = Resource::builder()
                .with_service_name(args.operator.clone())
                .with_attributes([
                    KeyValue::new("operator.name", args.operator.clone()),
                    KeyValue::new("k8s.namespace.name", args.pod_namespace.clone()),
                    KeyValue::new("k8s.pod.name", args.pod_name.clone()),
                ])
                .build();
            Some(
                SdkTracerProvider::builder()
                    .with_span_processor(
                        BatchSpanProcessor::builder(exporter)
                            .with_batch_config(batch)
                            .build(),
                    )
                    .with_resource(resource)
                    .build(),
            )
        }
    };
    // kube's HTTP client spans are debug-level: they are the API calls, so they are
    // exported (without the debug events inside them).
    let otel = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("widget-operator-kube-rs"))
            .with_filter(filter_fn(|meta| {
                *meta.level() <= Level::INFO
                    || (meta.is_span() && meta.target().starts_with("kube_client"))
            }))
    });
    tracing_subscriber::registry().with(fmt).with(otel).init();
    Ok(provider)
}

async fn run(args: Args) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("loading the kubeconfig")?;
    // Fail at once when the API server cannot be reached, rather than retry watches.
    let version = client
        .apiserver_version()
        .await
        .context("reaching the API server")?;
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL);
    let api =
        Api::<DynamicObject>::namespaced_with(client.clone(), &args.watch_namespace, &resource);
    let controller = match args.mode {
        // The incident: every event of the Widget, its own status writes included.
        Mode::TimestampLoop => {
            Controller::new_with(api, watcher::Config::default(), resource.clone())
        }
        // The fix: only a new generation (a spec change) triggers a reconcile.
        Mode::Fixed => {
            let writer = Writer::new(resource.clone());
            let reader = writer.as_reader();
            let changes = watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .applied_objects()
                .predicate_filter(predicates::generation, Default::default());
            Controller::for_stream_with(changes, reader, resource.clone())
        }
    };
    info!(mode = ?args.mode, watch_namespace = %args.watch_namespace, server = %version.git_version, "starting");
    let context = Arc::new(Context {
        client,
        resource,
        mode: args.mode,
    });
    controller
        .shutdown_on_signal()
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            match result {
                // Failed reconciles are logged in their span, by `reconcile`.
                Ok(_) | Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {}
                Err(error) => warn!(error = %error, "controller error"),
            }
        })
        .await;
    info!("stopped");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // Explicit, so that no other crate's rustls features can make the choice ambiguous.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = match start_tracing(&args) {
        Ok(provider) => provider,
        Err(error) => {
            eprintln!("starting the OTLP exporter: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    // A failure is one log line, in the format of the others.
    let failed = run(args)
        .await
        .inspect_err(|error| error!("{error:#}"))
        .is_err();
    if let Some(provider) = provider {
        // Blocking: it waits for the last batch, which the runtime's tonic channel sends.
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = flushed {
            warn!(error = %error, "flushing spans");
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
