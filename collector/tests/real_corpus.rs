//! The corpus of real operator output pasted in public issues and docs
//! (`processors/tests/fixtures/real/`, described by its `index.yaml`): how much of it
//! the tagger reads, per framework, and what `opscope analyze` reports on each piece
//! against what its source says happened; and the whole operator logs of
//! `captures.yaml`, read from the captures' folder outside the repository.
//!
//! `cargo test -p opscope --test real_corpus -- --nocapture` prints the table
//! `docs/operator-logs.md` shows. The floors asserted here are the figures measured:
//! a change that reads less of the corpus fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use opscope::analyze::{Options, analyze};
use opscope_model::kubernetes::kinds::plural_of_kind;
use opscope_model::semconv::{
    API_KIND, API_NAME, API_NAMESPACE, API_RESOURCE, OBJECT_KIND, OBJECT_NAME, OBJECT_NAMESPACE,
    OBJECT_RESOURCE, OPSCOPE_RECORD, RECONCILE_RESULT, RECORD_RECONCILE, SERVICE_NAME,
};
use opscope_processors::Taggable;
use opscope_processors::correlator::CorrelatorConfig;
use opscope_processors::tagger::{OperatorTagger, TaggerConfig};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_testkit::captures::{assert_blob, captures_dir_or_skip};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Entry {
    file: String,
    source: String,
    framework: String,
    expect: String,
    #[serde(default)]
    objects: Vec<String>,
}

/// An object as the index writes it: `Kind namespace/name`, `?` where the lines do
/// not say, no namespace for a cluster-scoped object.
#[derive(Debug)]
struct Named {
    kind: Option<String>,
    /// `None`: not known; `Some("")`: cluster-scoped.
    namespace: Option<String>,
    name: String,
}

impl Named {
    fn parse(text: &str) -> Option<Named> {
        let (kind, path) = text.trim().split_once(' ')?;
        let (namespace, name) = match path.rsplit_once('/') {
            Some((namespace, name)) => (namespace, name),
            None => ("", path),
        };
        if name.is_empty() || name == "?" {
            return None;
        }
        let known = |value: &str| (value != "?").then(|| value.to_string());
        Some(Named {
            kind: known(kind),
            namespace: known(namespace),
            name: name.to_string(),
        })
    }

    /// Whether the text names this object: its name as a whole word.
    fn is_named_in(&self, text: &str) -> bool {
        let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        text.match_indices(self.name.as_str()).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + self.name.len()..].chars().next();
            !before.is_some_and(is_name_char) && !after.is_some_and(is_name_char)
        })
    }

    /// Whether a tagged record's attributes name this object (as the reconciled
    /// object or as the target of an API call). Kinds compare as the pipeline
    /// compares them: by plural resource name, so `serverclasses` is `ServerClass`.
    fn is_attributed(&self, attributes: &[KeyValue]) -> bool {
        [
            (OBJECT_KIND, OBJECT_RESOURCE, OBJECT_NAMESPACE, OBJECT_NAME),
            (API_KIND, API_RESOURCE, API_NAMESPACE, API_NAME),
        ]
        .into_iter()
        .any(|(kind, resource, namespace, name)| {
            let found = |key| string_attribute(attributes, key);
            found(name) == Some(self.name.as_str())
                && self.kind.as_deref().is_none_or(|wanted| {
                    let wanted = plural_of_kind(wanted);
                    found(kind).is_some_and(|kind| plural_of_kind(kind) == wanted)
                        || found(resource).is_some_and(|resource| resource == wanted)
                })
                && self
                    .namespace
                    .as_deref()
                    .is_none_or(|wanted| found(namespace).unwrap_or_default() == wanted)
        })
    }
}

fn string_attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|value| match &value.value {
            Some(any_value::Value::StringValue(text)) => Some(text.as_str()),
            _ => None,
        })
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../processors/tests/fixtures/real")
}

fn index() -> Vec<Entry> {
    let path = corpus_dir().join("index.yaml");
    let text = std::fs::read_to_string(&path).expect("read the corpus index");
    serde_saphyr::from_str(&text).expect("the corpus index parses")
}

/// Words that mark a line as a reconcile boundary to a reader (an independent, rough
/// reading of the corpus: the share found is measured against it).
fn reads_as_boundary(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    [
        "reconcil",
        "requeu",
        "re-queu",
        "syncing item",
        "successfully synced",
        "error syncing",
        "handler '",
    ]
    .iter()
    .any(|word| lower.contains(word))
}

#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    files: usize,
    records: usize,
    naming: usize,
    attributed: usize,
    boundary_lines: usize,
    boundaries_found: usize,
    incidents: usize,
    incidents_reported: usize,
    healthy: usize,
    healthy_quiet: usize,
}

impl Figures {
    fn add(&mut self, other: &Figures) {
        self.files += other.files;
        self.records += other.records;
        self.naming += other.naming;
        self.attributed += other.attributed;
        self.boundary_lines += other.boundary_lines;
        self.boundaries_found += other.boundaries_found;
        self.incidents += other.incidents;
        self.incidents_reported += other.incidents_reported;
        self.healthy += other.healthy;
        self.healthy_quiet += other.healthy_quiet;
    }
}

fn percent(part: usize, whole: usize) -> String {
    if whole == 0 {
        "–".to_string()
    } else {
        format!("{:.0} %", 100.0 * part as f64 / whole as f64)
    }
}

/// The file's lines as one logs request, named after the file as `analyze` does.
fn request_of(path: &Path, text: &str) -> ExportLogsServiceRequest {
    let service = path
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    let records = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| LogRecord {
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(line.to_string())),
            }),
            ..Default::default()
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: SERVICE_NAME.to_string(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(service)),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn recognition(entry: &Entry, objects: &[Named]) -> Figures {
    let path = corpus_dir().join(&entry.file);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let mut request = request_of(&path, &text);
    request.tag(&mut OperatorTagger::new(&TaggerConfig::default()));
    let mut figures = Figures {
        files: 1,
        ..Figures::default()
    };
    let records = request
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .flat_map(|s| &s.log_records);
    for record in records {
        let body = match record.body.as_ref().and_then(|b| b.value.as_ref()) {
            Some(any_value::Value::StringValue(text)) => text.as_str(),
            _ => "",
        };
        let first_line = body.lines().next().unwrap_or_default();
        figures.records += 1;
        let named: Vec<&Named> = objects
            .iter()
            .filter(|object| object.is_named_in(first_line))
            .collect();
        if !named.is_empty() {
            figures.naming += 1;
            if named
                .iter()
                .any(|object| object.is_attributed(&record.attributes))
            {
                figures.attributed += 1;
            } else if std::env::var_os("OPSCOPE_CORPUS_MISSES").is_some() {
                let tagged: Vec<String> = record
                    .attributes
                    .iter()
                    .filter(|kv| kv.key.starts_with("k8s."))
                    .map(|kv| {
                        format!(
                            "{}={:?}",
                            kv.key,
                            string_attribute(&record.attributes, &kv.key)
                        )
                    })
                    .collect();
                let cut: String = first_line.chars().take(240).collect();
                println!("unattributed {}: {cut}\n    {tagged:?}", entry.file);
            }
        }
        if reads_as_boundary(first_line) {
            figures.boundary_lines += 1;
            let found = string_attribute(&record.attributes, RECONCILE_RESULT).is_some()
                || string_attribute(&record.attributes, OPSCOPE_RECORD) == Some(RECORD_RECONCILE);
            if found {
                figures.boundaries_found += 1;
            }
        }
    }
    figures
}

/// The signal types `opscope analyze` reports on one file.
fn reported(entry: &Entry) -> Vec<String> {
    let analysis = analyze(Options {
        paths: vec![corpus_dir().join(&entry.file)],
        at: None,
        tagger: TaggerConfig::default(),
        correlator: CorrelatorConfig::default(),
        explain: false,
    })
    .unwrap_or_else(|err| panic!("{}: {err}", entry.file));
    let mut kinds: Vec<String> = analysis
        .signals
        .iter()
        .map(|signal| signal.signal.name().to_string())
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

fn expected_signal(expect: &str) -> Option<&'static str> {
    match expect {
        "hot_loop" => Some("reconcile_loop"),
        "write_conflict" => Some("write_conflict"),
        "finalizer_leak" => Some("finalizer_leak"),
        "none" => None,
        other => panic!("index: unknown expect {other:?}"),
    }
}

#[test]
fn the_real_corpus_is_read_and_its_incidents_reported() {
    let entries = index();
    assert!(entries.len() >= 50, "the corpus holds {}", entries.len());
    let mut by_framework: BTreeMap<String, Figures> = BTreeMap::new();
    let mut misses = Vec::new();
    for entry in &entries {
        assert!(
            entry.source.starts_with("https://"),
            "{}: source {:?}",
            entry.file,
            entry.source
        );
        let objects: Vec<Named> = entry
            .objects
            .iter()
            .filter_map(|o| Named::parse(o))
            .collect();
        let mut figures = recognition(entry, &objects);
        let signals = reported(entry);
        match expected_signal(&entry.expect) {
            Some(wanted) => {
                figures.incidents = 1;
                if signals.iter().any(|s| s == wanted) {
                    figures.incidents_reported = 1;
                } else {
                    misses.push(format!(
                        "{}: expected {wanted}, got {signals:?}",
                        entry.file
                    ));
                }
            }
            None => {
                figures.healthy = 1;
                if signals.is_empty() {
                    figures.healthy_quiet = 1;
                } else {
                    misses.push(format!("{}: healthy, got {signals:?}", entry.file));
                }
            }
        }
        by_framework
            .entry(entry.framework.clone())
            .or_default()
            .add(&figures);
    }
    let mut total = Figures::default();
    println!(
        "| framework | files | records | naming an object | attributed | boundary lines | found | incidents reported | healthy quiet |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (framework, figures) in &by_framework {
        total.add(figures);
        print_row(framework, figures);
    }
    print_row("**all**", &total);
    for miss in &misses {
        println!("miss: {miss}");
    }
    // Floors: the figures measured; raise them as recognition improves.
    assert!(total.naming > 0);
    let attributed = total.attributed as f64 / total.naming as f64;
    assert!(attributed >= 0.93, "attributed {attributed:.3}");
    assert!(
        total.healthy_quiet * 10 >= total.healthy * 9,
        "healthy pieces fired: {misses:#?}"
    );
}

fn print_row(name: &str, figures: &Figures) {
    println!(
        "| {name} | {} | {} | {} | {} | {} | {} | {} of {} | {} of {} |",
        figures.files,
        figures.records,
        figures.naming,
        percent(figures.attributed, figures.naming),
        figures.boundary_lines,
        percent(figures.boundaries_found, figures.boundary_lines),
        figures.incidents_reported,
        figures.incidents,
        figures.healthy_quiet,
        figures.healthy,
    );
}

#[derive(Debug, Deserialize)]
struct Capture {
    /// The path in the captures' folder.
    file: String,
    source: String,
    /// The git blob hash of the file at `source`.
    blob: String,
    /// What the lines' busiest minute holds.
    busiest: String,
    /// Every signal the lines show; empty for a healthy operator.
    expect: Vec<String>,
    /// Causes the lines show as well, where they do.
    #[serde(default)]
    causes: Vec<String>,
}

fn captures_index() -> Vec<Capture> {
    let path = corpus_dir().join("captures.yaml");
    let text = std::fs::read_to_string(&path).expect("read the captures index");
    serde_saphyr::from_str(&text).expect("the captures index parses")
}

/// Whole operator logs committed in public repositories, read from the captures'
/// folder outside the repository (`captures.yaml` lists them): long enough for the
/// detectors' default thresholds, so every signal the lines show is reported, and
/// nothing else. The healthy ones (cass-operator, Percona's MongoDB operator, casskop)
/// are busy without a loop or a conflict storm (their busiest minutes: 28 reconciles of
/// one object; 26 failed reconciles and 3 409s; 23 passes) and must fire nothing.
/// Skips when the folder is not there, unless `OPSCOPE_REQUIRE_BACKENDS=1`.
#[test]
fn whole_real_captures_report_the_signals_their_lines_show() {
    let captures = captures_index();
    assert!(!captures.is_empty());
    let Some(dir) = captures_dir_or_skip() else {
        return;
    };
    for capture in &captures {
        assert!(capture.source.starts_with("https://"), "{}", capture.file);
        let path = dir.join(&capture.file);
        assert_blob(&path, &capture.blob);
        let analysis = analyze(Options {
            paths: vec![path],
            at: None,
            tagger: TaggerConfig::default(),
            correlator: CorrelatorConfig::default(),
            explain: false,
        })
        .unwrap_or_else(|err| panic!("{}: {err}", capture.file));
        let mut reported: Vec<String> = analysis
            .signals
            .iter()
            .map(|signal| signal.signal.name().to_string())
            .collect();
        reported.sort();
        reported.dedup();
        let mut expected = capture.expect.clone();
        expected.sort();
        println!(
            "capture {}: {reported:?} (busiest minute: {})",
            capture.file, capture.busiest
        );
        assert_eq!(
            reported, expected,
            "{}: the signals reported are not those its lines show (busiest minute: {})",
            capture.file, capture.busiest
        );
        let causes: Vec<String> = analysis
            .signals
            .iter()
            .map(|signal| signal.cause.to_string())
            .collect();
        for wanted in &capture.causes {
            assert!(
                causes.contains(wanted),
                "{}: expected the cause {wanted}, got {causes:?}",
                capture.file
            );
        }
    }
}
