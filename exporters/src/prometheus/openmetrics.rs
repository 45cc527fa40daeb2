//! The OpenMetrics 1.0 text format, served when a scraper's `Accept` asks for it:
//! family-named TYPE lines, UNIT lines, `info` families, exemplars on histogram
//! buckets, and the closing `# EOF`.

use super::model::Kind;
use super::store::SeriesStore;
use super::text::{write_labels, write_sample};

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub fn encode(store: &SeriesStore) -> String {
    let mut out = String::new();
    for (family, series) in store.families() {
        let name = &family.name;
        let kind = match family.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
            Kind::Info => "info",
        };
        out.push_str(&format!("# TYPE {name} {kind}\n"));
        if !family.unit.is_empty() && name.ends_with(&format!("_{}", family.unit)) {
            out.push_str(&format!("# UNIT {name} {}\n", family.unit));
        }
        if !family.help.is_empty() {
            out.push_str(&format!("# HELP {name} {}\n", escape_help(&family.help)));
        }
        for (labels, value) in series {
            for sample in value.samples(family.kind) {
                write_sample(&mut out, name, labels, &sample);
                if let Some(exemplar) = sample.exemplar {
                    out.push_str(" # ");
                    let pairs = exemplar
                        .labels
                        .iter()
                        .map(|(n, v)| (n.as_str(), v.as_str()));
                    write_labels(&mut out, pairs);
                    out.push(' ');
                    out.push_str(&super::model::format_float(exemplar.value));
                }
                out.push('\n');
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

/// HELP text in OpenMetrics: backslash, line feed and double quote escaped.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prometheus::test_support::golden_store;

    #[test]
    fn golden_openmetrics() {
        assert_eq!(
            encode(&golden_store()),
            include_str!("testdata/golden.openmetrics")
        );
    }
}
