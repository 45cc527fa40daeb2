//! `opscope analyze --explain`: why nothing (or only this) fired. Per input file the
//! records read, recognised by format, attributed to an object and not understood;
//! the commonest shapes of the lines not understood; the objects seen with their
//! reconciles and peak rates against the detectors' thresholds; and which detector
//! came closest to firing.

use std::collections::{BTreeMap, HashMap};

use opscope_model::kubernetes::ObjectKey;
use opscope_model::timestamp::Nanos;
use opscope_processors::correlator::CorrelatorConfig;
use opscope_processors::correlator::events::{Event, ObjectEventKind};
use opscope_processors::tagger::formats::{LogFacts, LogFormat, UserFormats, recognize_line_with};
use serde::Serialize;

/// Shapes of lines not understood that are counted at most (then only known ones).
const MAX_SHAPES: usize = 10_000;
/// Shapes reported.
const TOP_SHAPES: usize = 10;
/// Objects reported, busiest first.
const TOP_OBJECTS: usize = 20;
/// Characters of an example line kept.
const EXAMPLE_CHARS: usize = 160;
/// Words of a line that make its shape.
const SHAPE_WORDS: usize = 8;

#[derive(Debug, Default, Serialize)]
pub struct FileExplanation {
    pub path: String,
    pub records: u64,
    /// Lines read by each format (`controller-runtime-json`, a user format's name, …).
    pub recognised: BTreeMap<String, u64>,
    pub attributed: u64,
    pub not_understood: u64,
}

#[derive(Debug, Serialize)]
pub struct Shape {
    pub shape: String,
    pub count: u64,
    pub example: String,
}

#[derive(Debug, Serialize)]
pub struct ObjectExplanation {
    pub object: String,
    pub reconciles: u64,
    pub peak_reconciles_per_window: u64,
    pub conflicts: u64,
    pub peak_conflicts_per_window: u64,
}

#[derive(Debug, Serialize)]
pub struct Closest {
    pub detector: &'static str,
    pub object: String,
    /// The measured figure and the threshold it is held against.
    pub measured: f64,
    pub threshold: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct Explanation {
    pub files: Vec<FileExplanation>,
    pub not_understood_shapes: Vec<Shape>,
    pub objects: Vec<ObjectExplanation>,
    pub closest: Option<Closest>,
}

/// What `--explain` gathers while the files are read and their events replayed.
#[derive(Debug, Default)]
pub struct Explainer {
    formats: UserFormats,
    files: Vec<FileExplanation>,
    shapes: HashMap<String, (u64, String)>,
    objects: BTreeMap<ObjectKey, Seen>,
}

impl Explainer {
    pub fn new(formats: UserFormats) -> Self {
        Self {
            formats,
            ..Self::default()
        }
    }

    pub fn start_file(&mut self, path: &str) {
        self.files.push(FileExplanation {
            path: path.to_string(),
            ..FileExplanation::default()
        });
    }

    fn file(&mut self) -> Option<&mut FileExplanation> {
        self.files.last_mut()
    }

    /// A log line of the current file, read as the tagger reads it.
    pub fn line(&mut self, text: &str) {
        let facts = recognize_line_with(text, &self.formats);
        let format = self.format_name(&facts);
        let understood = facts.format != LogFormat::Plain || facts.name.is_some();
        if let Some(file) = self.file() {
            file.records += 1;
            if understood {
                *file.recognised.entry(format).or_default() += 1;
            } else {
                file.not_understood += 1;
            }
        }
        if !understood && !text.trim().is_empty() {
            self.count_shape(text);
        }
    }

    /// Records of the current file that came as OTLP or audit events.
    pub fn structured(&mut self, format: &str, records: u64) {
        if let Some(file) = self.file() {
            file.records += records;
            *file.recognised.entry(format.to_string()).or_default() += records;
        }
    }

    /// Records of the current file that the tagger attributed to an object.
    pub fn attributed(&mut self, records: u64) {
        if let Some(file) = self.file() {
            file.attributed += records;
        }
    }

    fn format_name(&self, facts: &LogFacts) -> String {
        match facts.format {
            LogFormat::ControllerRuntimeJson => "json".into(),
            LogFormat::ControllerRuntimeConsole => "zap-console".into(),
            LogFormat::KubeRs => "kube-rs".into(),
            LogFormat::Klog => "klog".into(),
            LogFormat::Logfmt => "logfmt".into(),
            LogFormat::TimestampedText => "timestamped-text".into(),
            LogFormat::UserDefined(index) => self
                .formats
                .name(index)
                .unwrap_or("user-defined")
                .to_string(),
            LogFormat::Plain => "plain-text".into(),
        }
    }

    fn count_shape(&mut self, text: &str) {
        let shape = shape_of(text);
        if let Some((count, _)) = self.shapes.get_mut(&shape) {
            *count += 1;
        } else if self.shapes.len() < MAX_SHAPES {
            let example: String = text.trim().chars().take(EXAMPLE_CHARS).collect();
            self.shapes.insert(shape, (1, example));
        }
    }

    /// An event of the replay, in time order; `new_reconcile` when it is the first
    /// record of its reconcile (records of one reconcile count once).
    pub fn event(&mut self, event: &Event, new_reconcile: bool) {
        let Event::Object(event) = event else {
            return;
        };
        let entry = self
            .objects
            .entry(event.object.key())
            .or_insert_with(|| Seen {
                label: label_of(&event.object),
                ..Seen::default()
            });
        match &event.kind {
            ObjectEventKind::Reconcile(_) if new_reconcile => entry.reconciles.push(event.time),
            ObjectEventKind::Write(write) if write.code == 409 => entry.conflicts.push(event.time),
            _ => {}
        }
    }

    /// The explanation, with what the events said of objects and detectors.
    pub fn finish(self, config: &CorrelatorConfig) -> Explanation {
        let mut shapes: Vec<Shape> = self
            .shapes
            .into_iter()
            .map(|(shape, (count, example))| Shape {
                shape,
                count,
                example,
            })
            .collect();
        shapes.sort_by(|a, b| b.count.cmp(&a.count).then(a.shape.cmp(&b.shape)));
        shapes.truncate(TOP_SHAPES);
        let (objects, closest) = objects_and_closest(self.objects, config);
        Explanation {
            files: self.files,
            not_understood_shapes: shapes,
            objects,
            closest,
        }
    }
}

/// A line's shape: its first words, with quoted text, numbers and ids replaced.
fn shape_of(text: &str) -> String {
    let mut unquoted = String::with_capacity(text.len().min(512));
    let mut quote = None;
    for c in text.chars().take(512) {
        match quote {
            Some(open) if c == open => {
                quote = None;
                unquoted.push(c);
            }
            Some(_) => {}
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                unquoted.push(c);
                unquoted.push('…');
            }
            None => unquoted.push(c),
        }
    }
    unquoted
        .split_whitespace()
        .take(SHAPE_WORDS)
        .map(|word| {
            if word.bytes().any(|b| b.is_ascii_digit()) {
                "<n>"
            } else {
                word
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Debug, Default)]
struct Seen {
    label: String,
    reconciles: Vec<Nanos>,
    conflicts: Vec<Nanos>,
}

fn objects_and_closest(
    seen: BTreeMap<ObjectKey, Seen>,
    config: &CorrelatorConfig,
) -> (Vec<ObjectExplanation>, Option<Closest>) {
    let loop_window = config.reconcile_loop.window.as_nanos() as u64;
    let conflict_window = config.write_conflict.window.as_nanos() as u64;
    let mut objects: Vec<ObjectExplanation> = seen
        .into_values()
        .filter(|seen| !seen.reconciles.is_empty() || !seen.conflicts.is_empty())
        .map(|seen| ObjectExplanation {
            reconciles: seen.reconciles.len() as u64,
            peak_reconciles_per_window: peak(&seen.reconciles, loop_window),
            conflicts: seen.conflicts.len() as u64,
            peak_conflicts_per_window: peak(&seen.conflicts, conflict_window),
            object: seen.label,
        })
        .collect();
    objects.sort_by(|a, b| {
        (b.reconciles + b.conflicts)
            .cmp(&(a.reconciles + a.conflicts))
            .then(a.object.cmp(&b.object))
    });
    let loop_threshold = config.reconcile_loop.min_reconciles as f64;
    let conflict_threshold = config.write_conflict.min_conflicts as f64;
    let closest = objects
        .iter()
        .flat_map(|object| {
            [
                (
                    "reconcile_loop",
                    object.peak_reconciles_per_window as f64,
                    loop_threshold,
                ),
                (
                    "write_conflict",
                    object.peak_conflicts_per_window as f64,
                    conflict_threshold,
                ),
            ]
            .map(|(detector, measured, threshold)| (detector, &object.object, measured, threshold))
        })
        .filter(|(_, _, measured, _)| *measured > 0.0)
        .max_by(|a, b| (a.2 / a.3).total_cmp(&(b.2 / b.3)))
        .map(|(detector, object, measured, threshold)| Closest {
            detector,
            object: object.clone(),
            measured,
            threshold,
        });
    objects.truncate(TOP_OBJECTS);
    (objects, closest)
}

fn label_of(object: &opscope_model::kubernetes::ObjectRef) -> String {
    let kind = if object.kind.is_empty() {
        object.resource.as_str()
    } else {
        object.kind.as_str()
    };
    if object.namespace.is_empty() {
        format!("{kind} {}", object.name)
    } else {
        format!("{kind} {}/{}", object.namespace, object.name)
    }
}

/// The most events within any window of `window` nanoseconds (times sorted).
fn peak(times: &[Nanos], window: Nanos) -> u64 {
    let mut start = 0;
    let mut best = 0;
    for (end, time) in times.iter().enumerate() {
        while times
            .get(start)
            .is_some_and(|first| first.saturating_add(window) <= *time)
        {
            start += 1;
        }
        best = best.max(end + 1 - start);
    }
    best as u64
}

impl Explanation {
    /// The explanation for people, as `analyze` prints it on stderr.
    pub fn table(&self) -> String {
        let mut out = String::from("\nexplain: what was read\n");
        for file in &self.files {
            let formats: Vec<String> = file
                .recognised
                .iter()
                .map(|(format, count)| format!("{format} {count}"))
                .collect();
            out.push_str(&format!(
                "  {}: {} records; recognised: {}; attributed to an object: {}; not understood: {}\n",
                file.path,
                file.records,
                if formats.is_empty() { "none".to_string() } else { formats.join(", ") },
                file.attributed,
                file.not_understood,
            ));
        }
        if !self.not_understood_shapes.is_empty() {
            out.push_str("explain: lines not understood, commonest shapes first\n");
            for shape in &self.not_understood_shapes {
                out.push_str(&format!(
                    "  {:>6} × {}\n         e.g. {}\n",
                    shape.count, shape.shape, shape.example
                ));
            }
            out.push_str("  (teach opscope a format with operator_tagger.log_formats in a config, then analyze -c it)\n");
        }
        if !self.objects.is_empty() {
            out.push_str(
                "explain: objects seen (reconciles, peak per window; conflicts, peak per window)\n",
            );
            for object in &self.objects {
                out.push_str(&format!(
                    "  {}: {} reconciles, peak {}; {} conflicts, peak {}\n",
                    object.object,
                    object.reconciles,
                    object.peak_reconciles_per_window,
                    object.conflicts,
                    object.peak_conflicts_per_window
                ));
            }
        }
        match &self.closest {
            Some(closest) => out.push_str(&format!(
                "explain: closest to firing: {} on {}: {} of the {} needed\n",
                closest.detector, closest.object, closest.measured, closest.threshold
            )),
            None => out.push_str("explain: no reconcile or conflict of a known object was read\n"),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_hide_numbers_and_quotes() {
        assert_eq!(
            shape_of("2024-05-01 worker 17 said \"hello there\" to 10.0.0.1"),
            "<n> worker <n> said \"…\" to <n>"
        );
    }

    #[test]
    fn peaks_over_a_sliding_window() {
        let second = 1_000_000_000;
        let times = [0, second, 2 * second, 70 * second, 71 * second];
        assert_eq!(peak(&times, 60 * second), 3);
        assert_eq!(peak(&[], 60 * second), 0);
    }
}
