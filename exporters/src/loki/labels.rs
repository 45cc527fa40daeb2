//! Stream labels of the Loki exporter: the small set a user may choose from, their
//! values sanitised and length-capped, and Loki's `{name="value", ...}` syntax.

use serde::Deserialize;

/// A label a stream may carry. The set is closed and small on purpose: every
/// distinct label set is a Loki stream, so identifiers go to structured metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamLabel {
    /// The resource's `operator.name`; the signal's operator.
    OperatorName,
    /// The operator's own namespace: the resource's `k8s.namespace.name`.
    K8sNamespace,
    /// The severity, lowercase: `trace`, `debug`, `info`, `warn`, `error`, `fatal`.
    Level,
}

impl StreamLabel {
    pub const DEFAULT_SET: [StreamLabel; 3] = [Self::OperatorName, Self::K8sNamespace, Self::Level];

    pub fn name(self) -> &'static str {
        match self {
            Self::OperatorName => "operator_name",
            Self::K8sNamespace => "k8s_namespace",
            Self::Level => "level",
        }
    }
}

/// The label naming the signal, added to the configured set on signal streams.
pub const SIGNAL_LABEL: &str = "signal";

/// The value of a label that has none, so that no stream is left without labels
/// (Loki refuses a stream with an empty label set).
pub const UNKNOWN_VALUE: &str = "unknown";

/// The longest label value kept, in characters.
const MAX_LABEL_VALUE_CHARS: usize = 128;

/// The values the configured labels take for one entry.
pub struct LabelValues<'a> {
    pub operator_name: &'a str,
    pub k8s_namespace: &'a str,
    pub level: &'a str,
}

impl LabelValues<'_> {
    fn value_of(&self, label: StreamLabel) -> &str {
        match label {
            StreamLabel::OperatorName => self.operator_name,
            StreamLabel::K8sNamespace => self.k8s_namespace,
            StreamLabel::Level => self.level,
        }
    }
}

/// The labels of one stream, sorted by name, values sanitised.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LabelSet(Vec<(&'static str, String)>);

impl LabelSet {
    /// The configured labels with their values.
    pub fn select(labels: &[StreamLabel], values: &LabelValues) -> Self {
        let mut set = Self(Vec::with_capacity(labels.len() + 1));
        for label in labels {
            set.insert(label.name(), values.value_of(*label));
        }
        set
    }

    /// Sets `name` to `value`, sanitised; an empty value becomes [`UNKNOWN_VALUE`].
    pub fn insert(&mut self, name: &'static str, value: &str) {
        let mut value = sanitize(value, MAX_LABEL_VALUE_CHARS);
        if value.is_empty() {
            value = UNKNOWN_VALUE.to_string();
        }
        let at = match self.0.binary_search_by(|(existing, _)| existing.cmp(&name)) {
            Ok(at) => {
                self.0.remove(at);
                at
            }
            Err(at) => at,
        };
        self.0.insert(at, (name, value));
    }

    /// `{k8s_namespace="ops", level="info"}`, values quoted and escaped.
    pub fn to_loki_syntax(&self) -> String {
        let pairs: Vec<String> = self
            .0
            .iter()
            .map(|(name, value)| format!("{name}={}", quote(value)))
            .collect();
        format!("{{{}}}", pairs.join(", "))
    }
}

/// `value` without surrounding blanks, cut at `max_chars`. Inner newlines and other
/// control characters are kept: [`quote`] escapes them, and Loki gives them back.
pub fn sanitize(value: &str, max_chars: usize) -> String {
    value.trim().chars().take(max_chars).collect()
}

/// A double-quoted string as Loki's label parser reads it (Go's string-literal
/// escapes, which `strconv.Unquote` undoes): `"` and `\` escaped, control
/// characters written as escapes, since a raw one is refused.
fn quote(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values<'a>(operator_name: &'a str, level: &'a str) -> LabelValues<'a> {
        LabelValues {
            operator_name,
            k8s_namespace: "ops",
            level,
        }
    }

    #[test]
    fn configured_labels_sorted_by_name() {
        let set = LabelSet::select(&StreamLabel::DEFAULT_SET, &values("ray", "info"));
        assert_eq!(
            set.to_loki_syntax(),
            r#"{k8s_namespace="ops", level="info", operator_name="ray"}"#
        );
        let mut set = LabelSet::select(&[StreamLabel::Level], &values("ray", "warn"));
        set.insert(SIGNAL_LABEL, "reconcile_loop");
        assert_eq!(
            set.to_loki_syntax(),
            r#"{level="warn", signal="reconcile_loop"}"#
        );
    }

    #[test]
    fn values_are_escaped_trimmed_and_capped() {
        let set = LabelSet::select(
            &[StreamLabel::OperatorName],
            &values(" a\"b\\c\nd\u{7}e\tf ", ""),
        );
        assert_eq!(
            set.to_loki_syntax(),
            r#"{operator_name="a\"b\\c\nd\u0007e\tf"}"#
        );
        let long = "é".repeat(300);
        assert_eq!(sanitize(&long, MAX_LABEL_VALUE_CHARS).chars().count(), 128);
    }

    #[test]
    fn missing_values_are_unknown_and_a_name_is_set_once() {
        let mut set = LabelSet::select(&StreamLabel::DEFAULT_SET, &values("", "\n"));
        set.insert("level", "error");
        assert_eq!(
            set.to_loki_syntax(),
            r#"{k8s_namespace="ops", level="error", operator_name="unknown"}"#
        );
    }

    #[test]
    fn label_names_are_prometheus_label_names() {
        let valid = |name: &str| {
            name.chars()
                .enumerate()
                .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()))
        };
        for label in StreamLabel::DEFAULT_SET {
            assert!(valid(label.name()), "{}", label.name());
        }
        assert!(valid(SIGNAL_LABEL));
    }

    #[test]
    fn config_names_are_the_label_names() {
        for label in StreamLabel::DEFAULT_SET {
            let parsed: StreamLabel =
                serde_json::from_value(serde_json::json!(label.name())).expect("known label");
            assert_eq!(parsed, label);
        }
        assert!(serde_json::from_value::<StreamLabel>(serde_json::json!("reconcile_id")).is_err());
    }
}
