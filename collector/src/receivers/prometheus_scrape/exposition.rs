//! A parser of the Prometheus text format 0.0.4 and of OpenMetrics 1.0: metric
//! families with their type, help and samples, bounded, failing at the line at fault.

use std::collections::HashMap;
use std::fmt;

/// The exposition format of a page, as its `Content-Type` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`: timestamps in milliseconds.
    Text,
    /// `application/openmetrics-text`: timestamps in seconds, exemplars, `# EOF`.
    OpenMetrics,
}

impl Format {
    pub fn of_content_type(content_type: &str) -> Self {
        let essence = content_type.split(';').next().unwrap_or_default().trim();
        if essence.eq_ignore_ascii_case("application/openmetrics-text") {
            Self::OpenMetrics
        } else {
            Self::Text
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyType {
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    StateSet,
    /// `untyped` in 0.0.4, `unknown` in OpenMetrics, or no `# TYPE` line at all.
    Unknown,
}

impl FamilyType {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "counter" => Self::Counter,
            "gauge" => Self::Gauge,
            "histogram" => Self::Histogram,
            "gaugehistogram" => Self::GaugeHistogram,
            "summary" => Self::Summary,
            "info" => Self::Info,
            "stateset" => Self::StateSet,
            "untyped" | "unknown" => Self::Unknown,
            _ => return None,
        })
    }

    /// The endings of the sample names of a family of this type ("" is the bare name).
    fn suffixes(self) -> &'static [&'static str] {
        match self {
            Self::Counter => &["", "_total", "_created"],
            Self::Histogram => &["_bucket", "_sum", "_count", "_created"],
            Self::GaugeHistogram => &["_bucket", "_gsum", "_gcount"],
            Self::Summary => &["", "_sum", "_count", "_created"],
            Self::Info => &["_info"],
            Self::Gauge | Self::StateSet | Self::Unknown => &[""],
        }
    }
}

/// Every ending a sample name may have beyond its family's name.
const SUFFIXES: &[&str] = &[
    "_total", "_created", "_bucket", "_sum", "_count", "_gsum", "_gcount", "_info",
];

/// Label names and values, in page order.
pub type Labels = Vec<(String, String)>;

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
    /// Nanoseconds since the epoch, when the page gives a time.
    pub timestamp: Option<u64>,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: String,
    pub kind: FamilyType,
    pub help: String,
    pub samples: Vec<Sample>,
}

impl Family {
    /// What a sample's name adds to the family's: "" for the bare name, `_bucket`, ...
    pub fn suffix_of<'a>(&self, sample: &'a Sample) -> &'a str {
        sample
            .name
            .strip_prefix(self.name.as_str())
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based; 0 for a problem of the whole page.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Parses a page. Like Prometheus, a line that does not parse fails the whole page,
/// so that half a histogram is never taken; so do more than `max_series` samples.
pub fn parse(text: &str, format: Format, max_series: usize) -> Result<Vec<Family>, ParseError> {
    let mut page = Page::new(max_series);
    for (index, line) in text.lines().enumerate() {
        let at_line = |message| ParseError {
            line: index + 1,
            message,
        };
        match page.read_line(line, format).map_err(at_line)? {
            Flow::Continue => {}
            Flow::End => break,
        }
    }
    Ok(page.families)
}

enum Flow {
    Continue,
    End,
}

struct Page {
    families: Vec<Family>,
    by_name: HashMap<String, usize>,
    /// Samples and families taken so far, against `max_series`.
    entries: usize,
    max_series: usize,
}

impl Page {
    fn new(max_series: usize) -> Self {
        Self {
            families: Vec::new(),
            by_name: HashMap::new(),
            entries: 0,
            max_series,
        }
    }

    fn read_line(&mut self, line: &str, format: Format) -> Result<Flow, String> {
        let line = line.trim_end();
        if let Some(comment) = line.strip_prefix('#') {
            return self.read_comment(comment, format);
        }
        if !line.trim_start().is_empty() {
            let sample = parse_sample(line.trim_start(), format)?;
            self.add_sample(sample)?;
        }
        Ok(Flow::Continue)
    }

    /// `# HELP`, `# TYPE` and `# EOF`; other comments (`# UNIT` included) are skipped.
    fn read_comment(&mut self, comment: &str, format: Format) -> Result<Flow, String> {
        let comment = comment.trim_start();
        let (keyword, rest) = comment.split_once([' ', '\t']).unwrap_or((comment, ""));
        match keyword {
            "EOF" if format == Format::OpenMetrics => return Ok(Flow::End),
            "HELP" => {
                let (name, help) = name_and_rest(rest)?;
                let index = self.family_index(name)?;
                if let Some(family) = self.families.get_mut(index) {
                    family.help = unescape_help(help);
                }
            }
            "TYPE" => {
                let (name, kind) = name_and_rest(rest)?;
                let kind = FamilyType::parse(kind.trim())
                    .ok_or_else(|| format!("unknown metric type {:?}", kind.trim()))?;
                self.declare(name, kind)?;
            }
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn declare(&mut self, name: &str, kind: FamilyType) -> Result<(), String> {
        let index = self.family_index(name)?;
        let Some(family) = self.families.get_mut(index) else {
            return Ok(());
        };
        if family.kind != FamilyType::Unknown || !family.samples.is_empty() {
            return Err(format!(
                "a second TYPE line for {name}, or one after its samples"
            ));
        }
        family.kind = kind;
        Ok(())
    }

    /// The family of that name, created untyped when new.
    fn family_index(&mut self, name: &str) -> Result<usize, String> {
        if let Some(&index) = self.by_name.get(name) {
            return Ok(index);
        }
        self.count_entry()?;
        let index = self.families.len();
        self.families.push(Family {
            name: name.to_string(),
            kind: FamilyType::Unknown,
            help: String::new(),
            samples: Vec::new(),
        });
        self.by_name.insert(name.to_string(), index);
        Ok(index)
    }

    fn add_sample(&mut self, sample: Sample) -> Result<(), String> {
        self.count_entry()?;
        let index = match self.owning_family(&sample.name) {
            Some(index) => index,
            None if self.by_name.contains_key(&sample.name) => {
                return Err(format!(
                    "sample {} does not fit the type of its family",
                    sample.name
                ));
            }
            None => self.family_index(&sample.name)?,
        };
        let family = self
            .families
            .get_mut(index)
            .ok_or_else(|| "internal: family index out of range".to_string())?;
        check_special_labels(family, &sample)?;
        family.samples.push(sample);
        Ok(())
    }

    /// The family a sample name belongs to: its own name, or a declared family whose
    /// type gives its names that ending.
    fn owning_family(&self, sample_name: &str) -> Option<usize> {
        let accepts = |index: usize, suffix: &str| {
            self.families
                .get(index)
                .is_some_and(|family| family.kind.suffixes().contains(&suffix))
        };
        if let Some(&index) = self.by_name.get(sample_name)
            && accepts(index, "")
        {
            return Some(index);
        }
        SUFFIXES.iter().find_map(|suffix| {
            let base = sample_name.strip_suffix(suffix)?;
            let &index = self.by_name.get(base)?;
            accepts(index, suffix).then_some(index)
        })
    }

    fn count_entry(&mut self) -> Result<(), String> {
        self.entries += 1;
        if self.entries > self.max_series {
            return Err(format!(
                "the page holds more than {} series (max_series)",
                self.max_series
            ));
        }
        Ok(())
    }
}

/// Buckets need a numeric `le`, quantiles a numeric `quantile`.
fn check_special_labels(family: &Family, sample: &Sample) -> Result<(), String> {
    let suffix = family.suffix_of(sample);
    let needed = match family.kind {
        FamilyType::Histogram | FamilyType::GaugeHistogram if suffix == "_bucket" => "le",
        FamilyType::Summary if suffix.is_empty() => "quantile",
        _ => return Ok(()),
    };
    match sample.label(needed).and_then(parse_float) {
        Some(_) => Ok(()),
        None => Err(format!(
            "sample {} needs a numeric {needed} label",
            sample.name
        )),
    }
}

fn name_and_rest(text: &str) -> Result<(&str, &str), String> {
    let text = text.trim_start();
    let (name, rest) = text.split_once([' ', '\t']).unwrap_or((text, ""));
    if !is_metric_name(name) {
        return Err(format!("invalid metric name {name:?}"));
    }
    Ok((name, rest))
}

/// `name{label="value",...} value [timestamp] [# exemplar]`.
fn parse_sample(line: &str, format: Format) -> Result<Sample, String> {
    let name_end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
    let (name, rest) = line.split_at(name_end);
    if !is_metric_name(name) {
        return Err(format!("expected a metric name at {:?}", clip(line)));
    }
    // The text format lets blanks stand between the name and its labels.
    let (labels, rest) = match rest.trim_start_matches([' ', '\t']).strip_prefix('{') {
        Some(inside) => parse_labels(inside)?,
        None => (Vec::new(), rest),
    };
    if !rest.starts_with([' ', '\t']) {
        return Err(format!("expected a value after {name} at {:?}", clip(rest)));
    }
    let (value, timestamp) = parse_value_and_time(rest, format)?;
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
        timestamp,
    })
}

fn parse_value_and_time(text: &str, format: Format) -> Result<(f64, Option<u64>), String> {
    // An OpenMetrics exemplar follows ` # `; it is not kept.
    let text = match format {
        Format::OpenMetrics => text.split_once(" # ").map_or(text, |(sample, _)| sample),
        Format::Text => text,
    };
    let mut fields = text.split_whitespace();
    let value = fields.next().unwrap_or_default();
    let value = parse_float(value).ok_or_else(|| format!("invalid value {:?}", clip(value)))?;
    let timestamp = match fields.next() {
        Some(time) => Some(
            parse_timestamp(time, format)
                .ok_or_else(|| format!("invalid timestamp {:?}", clip(time)))?,
        ),
        None => None,
    };
    if let Some(extra) = fields.next() {
        return Err(format!("unexpected {:?} after the sample", clip(extra)));
    }
    Ok((value, timestamp))
}

/// Reads `label="value",...}` and returns the labels and the text after the brace.
fn parse_labels(mut text: &str) -> Result<(Labels, &str), String> {
    let mut labels: Labels = Vec::new();
    loop {
        text = text.trim_start();
        if let Some(rest) = text.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let name_end = text.find(|c: char| !is_label_char(c)).unwrap_or(text.len());
        let (name, rest) = text.split_at(name_end);
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!("expected a label name at {:?}", clip(text)));
        }
        let rest = rest.trim_start();
        let quoted = rest
            .strip_prefix('=')
            .map(str::trim_start)
            .and_then(|r| r.strip_prefix('"'))
            .ok_or_else(|| format!("expected =\"value\" after label {name}"))?;
        let (value, rest) = parse_label_value(quoted)?;
        if labels.iter().any(|(existing, _)| existing == name) {
            return Err(format!("label {name} given twice"));
        }
        labels.push((name.to_string(), value));
        let rest = rest.trim_start();
        text = match rest.strip_prefix(',') {
            Some(after_comma) => after_comma,
            None if rest.starts_with('}') => rest,
            None => return Err(format!("expected , or }} at {:?}", clip(rest))),
        };
    }
}

/// Reads a label value up to its closing quote: `\\`, `\"` and `\n` are the escapes.
fn parse_label_value(text: &str) -> Result<(String, &str), String> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((index, c)) = chars.next() {
        match c {
            '"' => return Ok((value, text.get(index + 1..).unwrap_or_default())),
            '\\' => match chars.next().map(|(_, escaped)| escaped) {
                Some('\\') => value.push('\\'),
                Some('"') => value.push('"'),
                Some('n') => value.push('\n'),
                other => {
                    return Err(format!(
                        "invalid escape \\{} in a label value",
                        other.unwrap_or(' ')
                    ));
                }
            },
            c => value.push(c),
        }
    }
    Err("a label value without its closing quote".to_string())
}

/// HELP text: `\\` and `\n` (and OpenMetrics' `\"`); other backslashes stay.
fn unescape_help(text: &str) -> String {
    let mut help = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let escaped = match (c, chars.peek()) {
            ('\\', Some('\\')) => Some('\\'),
            ('\\', Some('n')) => Some('\n'),
            ('\\', Some('"')) => Some('"'),
            _ => None,
        };
        match escaped {
            Some(escaped) => {
                chars.next();
                help.push(escaped);
            }
            None => help.push(c),
        }
    }
    help
}

/// A sample value or bound: decimal, `+Inf`, `-Inf`, `NaN`.
pub fn parse_float(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ if text.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '-' | '+' | '.')) => {
            text.parse().ok()
        }
        _ => None,
    }
}

/// Milliseconds (0.0.4) or seconds with a fraction (OpenMetrics) since the epoch, in
/// nanoseconds; times before 1970 are refused.
fn parse_timestamp(text: &str, format: Format) -> Option<u64> {
    match format {
        Format::Text => text.parse::<u64>().ok()?.checked_mul(1_000_000),
        Format::OpenMetrics => seconds_to_nanos(parse_float(text)?),
    }
}

/// Seconds since the epoch (before the year 2286) in nanoseconds.
pub fn seconds_to_nanos(seconds: f64) -> Option<u64> {
    (0.0..1e10)
        .contains(&seconds)
        .then_some((seconds * 1e9) as u64)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_metric_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(is_name_char)
}

/// The start of a piece of text, for error messages.
fn clip(text: &str) -> &str {
    let end = text
        .char_indices()
        .nth(40)
        .map_or(text.len(), |(index, _)| index);
    text.get(..end).unwrap_or(text)
}

#[cfg(test)]
#[path = "exposition_tests.rs"]
mod tests;
