//! `opscope analyze`: replays captured files through the same tagger and correlator
//! as the live agent and reports the signals with their evidence and hints.

pub mod explain;
#[cfg(test)]
mod fuzz_tests;
pub mod input;
pub mod report;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use opscope_model::Telemetry;
use opscope_model::semconv::{API_NAME, LOG_SOURCE, OBJECT_NAME, SERVICE_NAME};
use opscope_model::signal::Signal;
use opscope_model::timestamp::Nanos;
use opscope_processors::correlator::events::{Event, ObjectEventKind};
use opscope_processors::correlator::{Correlator, CorrelatorConfig};
use opscope_processors::tagger::formats::UserFormats;
use opscope_processors::tagger::{OperatorTagger, TaggerConfig};
use opscope_processors::{CorrelatorEvents, Taggable};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, any_value};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::resource::v1::Resource;

use explain::{Explainer, Explanation};
use input::{InputError, Line, classify, collect_files, read_lines};

use crate::receivers::filelog::pod::{PodIdentity, string_attribute};

/// Records handed to the tagger at a time (cut only between records, so a stack
/// trace stays with its error line).
const CHUNK: usize = 1000;

/// What `analyze` read and found.
pub struct Analysis {
    /// The final state of every signal that fired, by id.
    pub signals: Vec<Signal>,
    pub totals: Totals,
    /// What was read and how close the detectors came, with `explain`.
    pub explanation: Option<Explanation>,
}

#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub files: usize,
    pub records: u64,
    pub malformed: u64,
    pub reconciles: u64,
    pub writes: u64,
    pub events: u64,
    /// Records with no time of their own or of their container runtime: they are
    /// read but cannot be correlated.
    pub untimed: u64,
}

pub struct Options {
    pub paths: Vec<PathBuf>,
    /// Evaluation time for leaks; default: the newest event time in the input.
    pub at: Option<Nanos>,
    pub tagger: TaggerConfig,
    pub correlator: CorrelatorConfig,
    /// Gather an [`Explanation`] of what was read.
    pub explain: bool,
}

pub fn analyze(options: Options) -> Result<Analysis, InputError> {
    let mut tagger = OperatorTagger::new(&options.tagger);
    let mut totals = Totals::default();
    let mut events = Vec::new();
    let mut explainer = options.explain.then(|| {
        Explainer::new(UserFormats::compile(&options.tagger.log_formats).unwrap_or_default())
    });
    for file in collect_files(&options.paths)? {
        totals.files += 1;
        read_file(&file, &mut tagger, &mut events, &mut totals, &mut explainer)?;
    }
    // Files interleave in time: replay every event in event-time order.
    events.sort_by_key(Event::time);
    totals.events = events.len() as u64;
    count_evidence(&events, &mut totals);
    let explanation = explainer.map(|explainer| explainer.finish(&events, &options.correlator));
    Ok(Analysis {
        signals: replay(events, options.at, options.correlator),
        totals,
        explanation,
    })
}

fn replay(events: Vec<Event>, at: Option<Nanos>, config: CorrelatorConfig) -> Vec<Signal> {
    let mut correlator = Correlator::new(config);
    let mut latest: BTreeMap<String, Signal> = BTreeMap::new();
    let mut keep = |signals: Vec<Signal>| {
        for signal in signals {
            latest.insert(signal.id.clone(), signal);
        }
    };
    for event in events {
        let time = event.time();
        correlator.observe(event);
        keep(correlator.advance(time));
    }
    let end = at
        .unwrap_or_else(|| correlator.watermark())
        .max(correlator.watermark());
    keep(correlator.advance(end));
    latest.into_values().collect()
}

fn count_evidence(events: &[Event], totals: &mut Totals) {
    let mut reconciles = HashSet::new();
    for event in events {
        let Event::Object(event) = event else {
            continue;
        };
        match &event.kind {
            // Records of one reconcile share its id; without an id each is one.
            ObjectEventKind::Reconcile(reconcile)
                if reconcile.reconcile_id.is_empty()
                    || reconciles.insert((event.object.key(), reconcile.reconcile_id.clone())) =>
            {
                totals.reconciles += 1
            }
            ObjectEventKind::Write(_) => totals.writes += 1,
            _ => {}
        }
    }
}

/// Reads one file into correlator events, through the tagger.
fn read_file(
    path: &Path,
    tagger: &mut OperatorTagger,
    events: &mut Vec<Event>,
    totals: &mut Totals,
    explainer: &mut Option<Explainer>,
) -> Result<(), InputError> {
    let resource = file_resource(path);
    let source = path.display().to_string();
    if let Some(explainer) = explainer {
        explainer.start_file(&source);
    }
    let mut chunk = LogChunk::new(resource);
    let mut partial: Option<(usize, String, u64)> = None;
    read_lines(path, |number, line, cut| {
        if cut {
            totals.malformed += 1;
            eprintln!(
                "{source}:{number}: line longer than {} bytes, cut",
                input::MAX_LINE_BYTES
            );
        }
        let line = match classify(line) {
            Ok(line) => line,
            Err(reason) => {
                totals.malformed += 1;
                eprintln!("{source}:{number}: skipped: {reason}");
                return;
            }
        };
        match line {
            Line::Container {
                content,
                partial: more,
                time_unix_nano,
            } => {
                // Pieces of one long line (`P`) are joined up to the final piece (`F`).
                let (first, mut text, time) =
                    partial
                        .take()
                        .unwrap_or((number, String::new(), time_unix_nano));
                if text.len() + content.len() <= input::MAX_LINE_BYTES {
                    text.push_str(&content);
                }
                if more {
                    partial = Some((first, text, time));
                } else {
                    explain_line(explainer, &text);
                    chunk.push(text, time, format!("{source}:{first}"));
                }
            }
            Line::Text(text) => {
                explain_line(explainer, &text);
                chunk.push(text, 0, format!("{source}:{number}"));
            }
            Line::Traces(mut request) => {
                explain_structured(explainer, request.item_count());
                totals.records += request.item_count() as u64;
                request.tag(tagger);
                request.correlator_events(events);
            }
            Line::Logs(mut request) => {
                explain_structured(explainer, request.item_count());
                totals.records += request.item_count() as u64;
                request.tag(tagger);
                request.correlator_events(events);
            }
            Line::Metrics(mut request) => {
                explain_structured(explainer, request.item_count());
                totals.records += request.item_count() as u64;
                request.tag(tagger);
                request.correlator_events(events);
            }
        }
        if chunk.is_full() {
            chunk.flush(tagger, events, totals, explainer);
        }
    })?;
    if let Some((first, text, time)) = partial {
        explain_line(explainer, &text);
        chunk.push(text, time, format!("{source}:{first}"));
    }
    chunk.flush(tagger, events, totals, explainer);
    Ok(())
}

fn explain_line(explainer: &mut Option<Explainer>, text: &str) {
    if let Some(explainer) = explainer {
        explainer.line(text);
    }
}

fn explain_structured(explainer: &mut Option<Explainer>, records: usize) {
    if let Some(explainer) = explainer {
        explainer.structured("otlp", records as u64);
    }
}

/// Log lines of one file waiting to be tagged together.
struct LogChunk {
    resource: Resource,
    records: Vec<LogRecord>,
}

impl LogChunk {
    fn new(resource: Resource) -> Self {
        Self {
            resource,
            records: Vec::new(),
        }
    }

    fn push(&mut self, line: String, time_unix_nano: u64, source: String) {
        self.records.push(LogRecord {
            time_unix_nano,
            observed_time_unix_nano: time_unix_nano,
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(line)),
            }),
            attributes: vec![string_attribute(LOG_SOURCE, &source)],
            ..Default::default()
        });
    }

    fn is_full(&self) -> bool {
        self.records.len() >= CHUNK
    }

    /// Tags the lines and turns them into events.
    fn flush(
        &mut self,
        tagger: &mut OperatorTagger,
        events: &mut Vec<Event>,
        totals: &mut Totals,
        explainer: &mut Option<Explainer>,
    ) {
        if self.records.is_empty() {
            return;
        }
        totals.records += self.records.len() as u64;
        let mut request = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(self.resource.clone()),
                scope_logs: vec![ScopeLogs {
                    log_records: std::mem::take(&mut self.records),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        request.tag(tagger);
        let records = request
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .flat_map(|s| &s.log_records);
        let mut untimed = 0;
        let mut attributed = 0;
        for record in records {
            untimed += u64::from(record.time_unix_nano == 0 && record.observed_time_unix_nano == 0);
            let names_object = record
                .attributes
                .iter()
                .any(|kv| kv.key == OBJECT_NAME || kv.key == API_NAME);
            attributed += u64::from(names_object);
        }
        totals.untimed += untimed;
        if let Some(explainer) = explainer {
            explainer.attributed(attributed);
        }
        request.correlator_events(events);
    }
}

/// The resource of a file's lines: the pod from a kubelet path, else the file name
/// as the service (an operator's log saved as `kuberay-operator.log`).
fn file_resource(path: &Path) -> Resource {
    let attributes = match PodIdentity::from_path(path) {
        Some(pod) => pod.attributes(),
        None => {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let stem = name
                .trim_end_matches(".gz")
                .trim_end_matches(".log")
                .trim_end_matches(".jsonl")
                .trim_end_matches(".json");
            vec![string_attribute(SERVICE_NAME, stem)]
        }
    };
    Resource {
        attributes,
        ..Default::default()
    }
}
