//! The Prometheus text exposition format 0.0.4, served unless a scraper asks for
//! OpenMetrics, and the sample-line syntax both text formats share.
//!
//! Written here rather than with `prometheus-client`: that crate encodes the series
//! it owns, has no summary type, and names samples itself, while opscope needs one
//! store whose names the remote-write output repeats exactly.

use super::model::{Kind, Labels, Sample, format_float};
use super::store::SeriesStore;

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn encode(store: &SeriesStore) -> String {
    let mut out = String::new();
    for (family, series) in store.families() {
        let (name, kind) = match family.kind {
            Kind::Counter => (format!("{}_total", family.name), "counter"),
            Kind::Gauge => (family.name.clone(), "gauge"),
            Kind::Histogram => (family.name.clone(), "histogram"),
            Kind::Summary => (family.name.clone(), "summary"),
            Kind::Info => (format!("{}_info", family.name), "gauge"),
        };
        if !family.help.is_empty() {
            out.push_str(&format!("# HELP {name} {}\n", escape_help(&family.help)));
        }
        out.push_str(&format!("# TYPE {name} {kind}\n"));
        for (labels, value) in series {
            for sample in value.samples(family.kind) {
                write_sample(&mut out, &family.name, labels, &sample);
                out.push('\n');
            }
        }
    }
    out
}

/// `name{labels} value`, without a line end.
pub fn write_sample(out: &mut String, family: &str, labels: &Labels, sample: &Sample<'_>) {
    out.push_str(family);
    out.push_str(sample.suffix);
    let extra = sample
        .extra
        .as_ref()
        .map(|(name, value)| (*name, value.as_str()));
    let pairs = labels
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()));
    write_labels(out, pairs.chain(extra));
    out.push(' ');
    out.push_str(&format_float(sample.value));
}

/// `{a="1",b="2"}`, or nothing for no labels.
pub fn write_labels<'a>(out: &mut String, labels: impl Iterator<Item = (&'a str, &'a str)>) {
    let mut first = true;
    for (name, value) in labels {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(name);
        out.push_str("=\"");
        escape_label_value(out, value);
        out.push('"');
    }
    if !first {
        out.push('}');
    }
}

/// Backslash, double quote and line feed escaped, as both text formats require.
fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// HELP text in 0.0.4: backslash and line feed escaped.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prometheus::test_support::golden_store;

    #[test]
    fn golden_text() {
        assert_eq!(
            encode(&golden_store()),
            include_str!("testdata/golden.prom")
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        write_labels(&mut out, [("path", "C:\\dir \"x\"\nnext")].into_iter());
        assert_eq!(out, r#"{path="C:\\dir \"x\"\nnext"}"#);
    }
}
