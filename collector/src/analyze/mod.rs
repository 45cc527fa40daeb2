//! `opscope analyze`: replays captured files through the same tagger and correlator
//! as the live agent and reports the signals with their evidence and hints.

pub mod explain;
#[cfg(test)]
mod fuzz_tests;
pub mod input;
pub mod report;
mod timeline;

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};

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
use input::{InputError, Line, Skipped, classify, collect_files, read_lines};
use timeline::Timeline;

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
    /// The entries not read, or not to their end, with the reason (also on stderr).
    pub skipped: Vec<Skipped>,
}

#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub files: usize,
    /// Entries not read, or not to their end: see [`Analysis::skipped`].
    pub skipped: usize,
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

/// Reads every file under the paths, skipping (and naming on stderr) what cannot be
/// read, then replays the events in event-time order; `Err` only for a path given
/// that does not exist.
pub fn analyze(options: Options) -> Result<Analysis, InputError> {
    let inputs = collect_files(&options.paths)?;
    let mut tagger = OperatorTagger::new(&options.tagger);
    let mut totals = Totals::default();
    let mut timeline = Timeline::default();
    let mut explainer = options.explain.then(|| {
        Explainer::new(UserFormats::compile(&options.tagger.log_formats).unwrap_or_default())
    });
    let mut skipped = inputs.skipped;
    skipped.iter().for_each(|skip| eprintln!("{skip}"));
    for file in &inputs.files {
        totals.files += 1;
        let read = read_file(
            file,
            &mut tagger,
            &mut timeline,
            &mut totals,
            &mut explainer,
        );
        if let Err(skip) = read {
            eprintln!("{skip}");
            skipped.push(skip);
        }
    }
    totals.skipped = skipped.len();
    totals.events = timeline.len() as u64;
    // The explanation holds the events' figures against the detectors' thresholds.
    let thresholds = options.explain.then(|| options.correlator.clone());
    let signals = replay(
        timeline,
        options.at,
        options.correlator,
        &mut totals,
        &mut explainer,
    );
    let explanation = explainer
        .zip(thresholds)
        .map(|(explainer, thresholds)| explainer.finish(&thresholds));
    Ok(Analysis {
        signals,
        totals,
        explanation,
        skipped,
    })
}

/// Feeds the events to a correlator in event-time order, counting the evidence.
fn replay(
    timeline: Timeline,
    at: Option<Nanos>,
    config: CorrelatorConfig,
    totals: &mut Totals,
    explainer: &mut Option<Explainer>,
) -> Vec<Signal> {
    let mut correlator = Correlator::new(config);
    let mut latest: BTreeMap<String, Signal> = BTreeMap::new();
    let mut keep = |signals: Vec<Signal>| {
        for signal in signals {
            latest.insert(signal.id.clone(), signal);
        }
    };
    let mut reconciles = Reconciles::default();
    for event in timeline.into_sorted() {
        let new_reconcile = reconciles.is_new(&event);
        totals.reconciles += u64::from(new_reconcile);
        if let Event::Object(object) = &event
            && let ObjectEventKind::Write(_) = object.kind
        {
            totals.writes += 1;
        }
        if let Some(explainer) = explainer {
            explainer.event(&event, new_reconcile);
        }
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

/// The reconciles replayed so far, by a hash of their object and id: records of one
/// reconcile share its id and count once; without an id each record is one.
#[derive(Default)]
struct Reconciles {
    hasher: RandomState,
    seen: HashSet<u64>,
}

impl Reconciles {
    /// Whether `event` is the first record of a reconcile.
    fn is_new(&mut self, event: &Event) -> bool {
        let Event::Object(event) = event else {
            return false;
        };
        let ObjectEventKind::Reconcile(reconcile) = &event.kind else {
            return false;
        };
        reconcile.reconcile_id.is_empty()
            || self.seen.insert(
                self.hasher
                    .hash_one((event.object.key(), &reconcile.reconcile_id)),
            )
    }
}

/// Reads one file into correlator events, through the tagger; `Err` says why it was
/// not read, or not to its end (what was read before counts).
fn read_file(
    path: &Path,
    tagger: &mut OperatorTagger,
    timeline: &mut Timeline,
    totals: &mut Totals,
    explainer: &mut Option<Explainer>,
) -> Result<(), Skipped> {
    let source = path.display().to_string();
    if let Some(explainer) = explainer {
        explainer.start_file(&source);
    }
    let mut reading = Reading {
        chunk: LogChunk::new(file_resource(path)),
        source,
        partial: None,
        events: Vec::new(),
        tagger,
        timeline,
        totals,
        explainer,
    };
    let read = read_lines(path, |number, line, cut| reading.line(number, line, cut));
    reading.finish();
    read
}

/// One file being read: its lines tagged a chunk at a time, their events held on
/// the timeline as they come.
struct Reading<'r> {
    source: String,
    chunk: LogChunk,
    /// The pieces of a container log line read so far (`P`): the number of its first
    /// line, its text and time.
    partial: Option<(usize, String, u64)>,
    /// The events of the last chunk or structured line, until they are held.
    events: Vec<Event>,
    tagger: &'r mut OperatorTagger,
    timeline: &'r mut Timeline,
    totals: &'r mut Totals,
    explainer: &'r mut Option<Explainer>,
}

impl Reading<'_> {
    fn line(&mut self, number: usize, line: &str, cut: bool) {
        let source = &self.source;
        if cut {
            self.totals.malformed += 1;
            eprintln!(
                "{source}:{number}: line longer than {} bytes, cut",
                input::MAX_LINE_BYTES
            );
        }
        let line = match classify(line) {
            Ok(line) => line,
            Err(reason) => {
                self.totals.malformed += 1;
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
                    self.partial
                        .take()
                        .unwrap_or((number, String::new(), time_unix_nano));
                if text.len() + content.len() <= input::MAX_LINE_BYTES {
                    text.push_str(&content);
                }
                if more {
                    self.partial = Some((first, text, time));
                } else {
                    self.log_line(text, time, first);
                }
            }
            Line::Text(text) => self.log_line(text, 0, number),
            Line::Traces(request) => self.structured(request),
            Line::Logs(request) => self.structured(request),
            Line::Metrics(request) => self.structured(request),
        }
        if self.chunk.is_full() {
            self.flush();
        }
    }

    fn log_line(&mut self, text: String, time: u64, number: usize) {
        explain_line(self.explainer, &text);
        self.chunk
            .push(text, time, format!("{}:{number}", self.source));
    }

    fn structured(&mut self, mut request: impl Taggable + CorrelatorEvents) {
        explain_structured(self.explainer, request.item_count());
        self.totals.records += request.item_count() as u64;
        request.tag(self.tagger);
        request.correlator_events(&mut self.events);
        self.timeline.extend(&mut self.events);
    }

    fn flush(&mut self) {
        self.chunk
            .flush(self.tagger, &mut self.events, self.totals, self.explainer);
        self.timeline.extend(&mut self.events);
    }

    /// Takes a container line left in pieces as it is, and the last chunk.
    fn finish(mut self) {
        if let Some((first, text, time)) = self.partial.take() {
            self.log_line(text, time, first);
        }
        self.flush();
    }
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
