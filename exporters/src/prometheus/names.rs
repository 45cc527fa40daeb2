//! Prometheus naming rules: metric and label names made valid from OpenTelemetry
//! names, OpenTelemetry units turned into unit suffixes, and label sets built with
//! sanitised names and capped values.

use std::collections::BTreeMap;

use super::model::Labels;

/// The longest label value kept; longer values are cut at a character boundary.
pub const MAX_LABEL_VALUE_BYTES: usize = 2048;

/// A metric name matching `[a-zA-Z_][a-zA-Z0-9_]*`: other characters become `_`
/// (colons too: they are reserved for recording rules), runs of `_` collapse, and a
/// leading digit gets a `_` before it. Empty when nothing usable is left.
pub fn metric_name(raw: &str) -> String {
    let mut name = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() { c } else { '_' };
        if !(c == '_' && name.ends_with('_')) {
            name.push(c);
        }
    }
    if name.chars().all(|c| c == '_') {
        return String::new();
    }
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// A label name matching `[a-zA-Z_][a-zA-Z0-9_]*` that is not reserved: other
/// characters become `_`, a leading digit gets `key_` before it and a leading `__`
/// (Prometheus's own labels) gets `key`. Empty for an empty name.
pub fn label_name(raw: &str) -> String {
    let mut name: String = raw
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert_str(0, "key_");
    } else if name.starts_with("__") {
        name.insert_str(0, "key");
    }
    name
}

/// Whether a configured label name can be used as it is.
pub fn is_valid_label_name(name: &str) -> bool {
    !name.is_empty() && label_name(name) == name
}

/// The name of a family converted from an OpenTelemetry metric, and its unit word:
/// `http.server.duration` in `s` is `http_server_duration_seconds`. A counter's
/// `_total` is left off (the exposition adds it after the unit); a gauge in `1` is a
/// `_ratio`.
pub fn family_name(metric: &str, unit: &str, counter: bool) -> (String, String) {
    let mut name = metric_name(metric);
    if counter && let Some(base) = name.strip_suffix("_total") {
        name = base.to_string();
    }
    let word = match unit_word(unit) {
        word if word == "ratio" && counter => String::new(),
        word => word,
    };
    if word.is_empty() || name.is_empty() {
        return (name, String::new());
    }
    if name != word && !name.ends_with(&format!("_{word}")) {
        name = format!("{name}_{word}");
    }
    (name, word)
}

/// The Prometheus word for an OpenTelemetry (UCUM) unit: `By` is `bytes`, `By/s` is
/// `bytes_per_second`, `{request}` (an annotation) is nothing, and an unknown unit is
/// itself, sanitised.
pub fn unit_word(unit: &str) -> String {
    let unit = strip_annotations(unit);
    let (main, per) = match unit.split_once('/') {
        Some((main, per)) => (main.trim(), Some(per.trim())),
        None => (unit.trim(), None),
    };
    let main = if main == "1" {
        "ratio".to_string()
    } else {
        known_unit(main).map_or_else(|| metric_name(main), str::to_string)
    };
    let per = per
        .map(|per| per_unit(per).map_or_else(|| metric_name(per), str::to_string))
        .filter(|per| !per.is_empty());
    match (main.is_empty(), per) {
        (_, None) => main,
        (true, Some(per)) => format!("per_{per}"),
        (false, Some(per)) => format!("{main}_per_{per}"),
    }
    .trim_matches('_')
    .to_string()
}

/// The unit without `{...}` annotations.
fn strip_annotations(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    let mut depth = 0usize;
    for c in unit.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            c if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

fn known_unit(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "%" => "percent",
        _ => return None,
    })
}

fn per_unit(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        _ => return None,
    })
}

/// A label set under construction. Names are sanitised; two attributes whose names
/// sanitise alike have their values joined with `;` (in key order); labels with empty
/// values are left out, as Prometheus treats them as absent.
#[derive(Debug, Default)]
pub struct LabelSet(BTreeMap<String, String>);

impl LabelSet {
    /// Adds an attribute; call in key order for a stable join of colliding names.
    pub fn add_attribute(&mut self, key: &str, value: &str) {
        let name = label_name(key);
        if name.is_empty() || value.is_empty() {
            return;
        }
        self.0
            .entry(name)
            .and_modify(|joined| {
                joined.push(';');
                joined.push_str(value);
            })
            .or_insert_with(|| value.to_string());
    }

    /// Sets a label, replacing what an attribute gave it.
    pub fn set(&mut self, name: &str, value: &str) {
        if value.is_empty() {
            self.0.remove(name);
        } else {
            self.0.insert(name.to_string(), value.to_string());
        }
    }

    /// Adds the labels that are not set yet (constant or external labels).
    pub fn add_defaults(&mut self, defaults: &Labels) {
        for (name, value) in defaults {
            if !self.0.contains_key(name) && !value.is_empty() {
                self.0.insert(name.clone(), value.clone());
            }
        }
    }

    pub fn remove(&mut self, name: &str) {
        self.0.remove(name);
    }

    /// The labels sorted by name, values capped at [`MAX_LABEL_VALUE_BYTES`].
    pub fn into_labels(self) -> Labels {
        self.0
            .into_iter()
            .map(|(name, value)| (name, capped(value)))
            .collect()
    }
}

fn capped(mut value: String) -> String {
    if value.len() > MAX_LABEL_VALUE_BYTES {
        let mut end = MAX_LABEL_VALUE_BYTES;
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        value.truncate(end);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_follow_prometheus_rules() {
        assert_eq!(metric_name("http.server.duration"), "http_server_duration");
        assert_eq!(metric_name("a..b--c"), "a_b_c");
        assert_eq!(metric_name("rpc:latency"), "rpc_latency");
        assert_eq!(metric_name("2xx.count"), "_2xx_count");
        assert_eq!(metric_name("größe"), "gr_e");
        assert_eq!(metric_name("..."), "");
        assert_eq!(metric_name("_private"), "_private");
    }

    #[test]
    fn label_names_follow_prometheus_rules() {
        assert_eq!(label_name("k8s.pod.name"), "k8s_pod_name");
        assert_eq!(label_name("0day"), "key_0day");
        assert_eq!(label_name("__name__"), "key__name__");
        assert_eq!(label_name("_x"), "_x");
        assert!(is_valid_label_name("cluster"));
        assert!(!is_valid_label_name("__name__"));
        assert!(!is_valid_label_name("a-b"));
        assert!(!is_valid_label_name(""));
    }

    #[test]
    fn units_become_suffixes() {
        assert_eq!(unit_word("s"), "seconds");
        assert_eq!(unit_word("By/s"), "bytes_per_second");
        assert_eq!(unit_word("{request}"), "");
        assert_eq!(unit_word("{packet}/s"), "per_second");
        assert_eq!(unit_word("1"), "ratio");
        assert_eq!(unit_word("widgets"), "widgets");
        assert_eq!(
            family_name("http.server.duration", "s", false),
            ("http_server_duration_seconds".into(), "seconds".into())
        );
        assert_eq!(
            family_name("process.cpu.time_seconds", "s", true),
            ("process_cpu_time_seconds".into(), "seconds".into())
        );
        assert_eq!(
            family_name("requests_total", "{request}", true),
            ("requests".into(), String::new())
        );
        assert_eq!(
            family_name("bytes_sent.total", "By", true),
            ("bytes_sent_bytes".into(), "bytes".into())
        );
        assert_eq!(
            family_name("cpu.utilization", "1", false),
            ("cpu_utilization_ratio".into(), "ratio".into())
        );
        assert_eq!(
            family_name("errors", "1", true),
            ("errors".into(), "".into())
        );
    }

    #[test]
    fn label_sets_join_collisions_and_drop_empty_values() {
        let mut set = LabelSet::default();
        set.add_attribute("a.b", "1");
        set.add_attribute("a_b", "2");
        set.add_attribute("empty", "");
        set.add_attribute("job", "from-attribute");
        set.set("job", "from-resource");
        set.add_defaults(&vec![
            ("job".into(), "default".into()),
            ("cluster".into(), "c1".into()),
        ]);
        assert_eq!(
            set.into_labels(),
            vec![
                ("a_b".to_string(), "1;2".to_string()),
                ("cluster".into(), "c1".into()),
                ("job".into(), "from-resource".into()),
            ]
        );
    }

    #[test]
    fn long_values_are_cut_at_a_character_boundary() {
        let mut set = LabelSet::default();
        set.add_attribute("v", &"é".repeat(MAX_LABEL_VALUE_BYTES));
        let labels = set.into_labels();
        let value = &labels.first().expect("one label").1;
        assert_eq!(value.len(), MAX_LABEL_VALUE_BYTES);
    }
}
