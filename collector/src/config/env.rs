//! `${env:VAR}` and `${env:VAR:-default}` in config values, expanded after the YAML is
//! parsed (as the OpenTelemetry Collector does), so a value can never change the
//! structure of the document. `$$` stands for a literal `$`.

use serde_json::Value;

use opscope_model::config::FieldError;

/// Expands every string of `value`; `lookup` reads a variable.
pub fn expand(
    value: &mut Value,
    path: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<FieldError>,
) {
    match value {
        Value::String(text) if text.contains('$') => match expand_str(text, lookup) {
            Ok(expanded) => *value = typed(text, expanded),
            Err(message) => errors.push(FieldError::new(path, message)),
        },
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                expand(item, &format!("{path}[{index}]"), lookup, errors);
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                expand(item, &join(path, key), lookup, errors);
            }
        }
        _ => {}
    }
}

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A value that was a single reference takes the type its expansion reads as in
/// YAML (`${env:PORT}` → a number), like a value written in place.
fn typed(original: &str, expanded: String) -> Value {
    let whole_reference = original
        .strip_prefix("${")
        .and_then(closing_brace)
        .is_some_and(|end| end + 3 == original.len());
    if whole_reference
        && let Ok(scalar @ (Value::Bool(_) | Value::Number(_))) = serde_saphyr::from_str(&expanded)
    {
        return scalar;
    }
    Value::String(expanded)
}

/// How deep references may nest in defaults (`${env:A:-${env:B:-x}}` is two deep):
/// deeper is refused rather than followed without end.
const MAX_NESTING: usize = 8;

fn expand_str(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    expand_nested(text, text, lookup, 1)
}

/// Expands `text`, a part of the value `whole` (named in errors), at nesting `depth`.
fn expand_nested(
    text: &str,
    whole: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    depth: usize,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((before, after_dollar)) = rest.split_once('$') {
        out.push_str(before);
        if let Some(after) = after_dollar.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(body) = after_dollar.strip_prefix('{') {
            let (reference, after) = closing_brace(body)
                .and_then(|end| body.split_at_checked(end))
                .and_then(|(reference, brace)| Some((reference, brace.strip_prefix('}')?)))
                .ok_or_else(|| format!("unterminated reference in \"{whole}\""))?;
            out.push_str(&resolve(reference, whole, lookup, depth)?);
            rest = after;
        } else {
            out.push('$');
            rest = after_dollar;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The index of the `}` closing a reference whose body starts `body`: references
/// nested in it (`${...}`) are skipped whole, `$$` is one literal `$`.
fn closing_brace(body: &str) -> Option<usize> {
    let bytes = body.as_bytes();
    let mut open = 0usize;
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        match byte {
            b'$' if bytes.get(index + 1) == Some(&b'$') => index += 1,
            b'$' if bytes.get(index + 1) == Some(&b'{') => {
                open += 1;
                index += 1;
            }
            b'}' if open == 0 => return Some(index),
            b'}' => open -= 1,
            _ => {}
        }
        index += 1;
    }
    None
}

fn resolve(
    reference: &str,
    whole: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    depth: usize,
) -> Result<String, String> {
    let Some(spec) = reference.strip_prefix("env:") else {
        return Err(format!(
            "unsupported reference \"${{{reference}}}\"; use ${{env:NAME}} or ${{env:NAME:-default}}"
        ));
    };
    let (name, default) = match spec.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (spec, None),
    };
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        return Err(format!("invalid environment variable name \"{name}\""));
    }
    match (lookup(name), default) {
        (Some(value), _) => Ok(value),
        // A default is expanded only when it is taken, so an unset variable in a default
        // that is not needed is no error.
        (None, Some(default)) if default.contains('$') => {
            if depth >= MAX_NESTING {
                return Err(format!(
                    "references nested more than {MAX_NESTING} deep in \"{whole}\""
                ));
            }
            expand_nested(default, whole, lookup, depth + 1)
        }
        (None, Some(default)) => Ok(default.to_string()),
        (None, None) => Err(format!(
            "environment variable {name} is not set (give a default with ${{env:{name}:-value}})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(mut value: Value) -> (Value, Vec<String>) {
        let lookup = |name: &str| match name {
            "HOST" => Some("jaeger".to_string()),
            "PORT" => Some("4317".to_string()),
            _ => None,
        };
        let mut errors = Vec::new();
        expand(&mut value, "", &lookup, &mut errors);
        (value, errors.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn expands_defaults_escapes_and_types() {
        let (value, errors) = run(json!({
            "a": "${env:HOST}:${env:PORT}",
            "b": "${env:MISSING:-fallback}",
            "c": "cost $$5",
            "d": "${env:PORT}",
            "e": ["${env:HOST}"]
        }));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            value,
            json!({"a": "jaeger:4317", "b": "fallback", "c": "cost $5", "d": 4317, "e": ["jaeger"]})
        );
    }

    #[test]
    fn missing_variables_name_the_path() {
        let (_, errors) = run(json!({"exporters": {"otlp": {"endpoint": "${env:NOPE}"}}}));
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("exporters.otlp.endpoint: environment variable NOPE is not set"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn defaults_holding_references_are_expanded() {
        let (value, errors) = run(json!({
            "a": "${env:B:-${env:HOST}}",
            "b": "${env:B:-${env:C:-${env:PORT}}}/x",
            "c": "${env:HOST:-${env:NOPE}}",
            "d": "${env:B:-http://${env:HOST}:${env:C:-4318}}",
            "e": "${env:B:-$${env:HOST}}",
            "f": "${env:B:-${env:PORT}}"
        }));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            value,
            json!({
                "a": "jaeger",
                "b": "4317/x",
                "c": "jaeger",
                "d": "http://jaeger:4318",
                "e": "${env:HOST}",
                "f": 4317
            })
        );
    }

    #[test]
    fn nested_defaults_are_bounded_and_errors_name_the_path() {
        let deep = format!("{}x{}", "${env:B:-".repeat(9), "}".repeat(9));
        let (_, errors) = run(json!({
            "exporters": {"otlp": {
                "endpoint": deep,
                "headers": {"x": "${env:B:-${env:NOPE}}"},
                "compression": "${env:B:-${env:C}"
            }}
        }));
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors[0].starts_with("exporters.otlp.compression: unterminated reference"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].starts_with("exporters.otlp.endpoint: references nested more than 8 deep"),
            "{}",
            errors[1]
        );
        assert!(
            errors[2].starts_with("exporters.otlp.headers.x: environment variable NOPE is not set"),
            "{}",
            errors[2]
        );
        let eight = format!("{}x{}", "${env:B:-".repeat(8), "}".repeat(8));
        let (value, errors) = run(json!({ "a": eight }));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(value, json!({"a": "x"}));
    }

    #[test]
    fn bad_references_are_errors() {
        let (_, errors) = run(json!({"a": "${file:/etc/x}", "b": "${env:OPEN"}));
        assert_eq!(errors.len(), 2);
    }
}
