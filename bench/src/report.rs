//! One scenario's result against one collector, printed as one JSON line.

use serde_json::{Map, Value, json};

use crate::signal::Signal;

/// The measured figures of one run. Rates count what reached the sink within the
/// measurement window; CPU and memory are the collector process's.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioReport {
    pub scenario: String,
    /// `opscope`, `baseline` for the binary given with `--baseline`, or `peer` for the
    /// command given with `--peer`.
    pub collector: String,
    /// Which run of the scenario this is, from 1 (see `--rounds`).
    pub round: u32,
    pub signal: Signal,
    /// The offered rate in items per second, `None` when as fast as accepted.
    pub offered_rate: Option<f64>,
    pub window_seconds: f64,
    pub sent: u64,
    pub accepted: u64,
    pub refused: u64,
    pub failed: u64,
    pub received: u64,
    pub cpu_seconds: f64,
    pub peak_rss_bytes: u64,
    pub steady_rss_bytes: u64,
    pub latency_p50_micros: Option<u32>,
    pub latency_p99_micros: Option<u32>,
    pub ceiling_items_per_cpu_second: f64,
}

impl ScenarioReport {
    pub fn items_per_second(&self) -> f64 {
        self.received as f64 / self.window_seconds.max(1e-9)
    }

    /// Items per CPU-second of the collector (user plus system), if it used any.
    pub fn items_per_cpu_second(&self) -> Option<f64> {
        (self.cpu_seconds > 0.0).then(|| self.received as f64 / self.cpu_seconds)
    }

    /// The JSON object, its rate keys named after the signal's unit
    /// (`spans_per_second`, `ceiling_spans_per_cpu_second`, ...).
    pub fn to_json(&self) -> Value {
        let unit = self.signal.unit();
        let per_cpu = self.items_per_cpu_second();
        let millis = |micros: Option<u32>| micros.map(|m| round(f64::from(m) / 1000.0, 3));
        let mut line = Map::new();
        let mut put = |key: String, value: Value| {
            line.insert(key, value);
        };
        put("scenario".into(), json!(self.scenario));
        put("collector".into(), json!(self.collector));
        put("round".into(), json!(self.round));
        put("signal".into(), json!(unit));
        put("offered_per_second".into(), json!(self.offered_rate));
        put(
            "window_seconds".into(),
            json!(round(self.window_seconds, 3)),
        );
        put("sent".into(), json!(self.sent));
        put("accepted".into(), json!(self.accepted));
        put("refused".into(), json!(self.refused));
        put("failed".into(), json!(self.failed));
        put("received".into(), json!(self.received));
        put(
            format!("{unit}_per_second"),
            json!(round(self.items_per_second(), 1)),
        );
        put(
            format!("{unit}_per_cpu_second"),
            json!(per_cpu.map(|v| round(v, 1))),
        );
        put("cpu_seconds".into(), json!(round(self.cpu_seconds, 3)));
        put(
            "cpu_percent".into(),
            json!(round(
                100.0 * self.cpu_seconds / self.window_seconds.max(1e-9),
                1
            )),
        );
        put("peak_rss_bytes".into(), json!(self.peak_rss_bytes));
        put("steady_rss_bytes".into(), json!(self.steady_rss_bytes));
        put(
            "latency_p50_ms".into(),
            json!(millis(self.latency_p50_micros)),
        );
        put(
            "latency_p99_ms".into(),
            json!(millis(self.latency_p99_micros)),
        );
        put(
            format!("ceiling_{unit}_per_cpu_second"),
            json!(round(self.ceiling_items_per_cpu_second, 1)),
        );
        put(
            "ratio_to_ceiling".into(),
            json!(per_cpu.map(|v| round(v / self.ceiling_items_per_cpu_second.max(1e-9), 4))),
        );
        Value::Object(line)
    }

    pub fn json_line(&self) -> String {
        self.to_json().to_string()
    }
}

fn round(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

/// The keys every report line has, for a signal whose unit is `unit`.
pub fn keys(unit: &str) -> Vec<String> {
    let mut keys: Vec<String> = [
        "scenario",
        "collector",
        "round",
        "signal",
        "offered_per_second",
        "window_seconds",
        "sent",
        "accepted",
        "refused",
        "failed",
        "received",
        "cpu_seconds",
        "cpu_percent",
        "peak_rss_bytes",
        "steady_rss_bytes",
        "latency_p50_ms",
        "latency_p99_ms",
        "ratio_to_ceiling",
    ]
    .map(String::from)
    .to_vec();
    keys.extend([
        format!("{unit}_per_second"),
        format!("{unit}_per_cpu_second"),
        format!("ceiling_{unit}_per_cpu_second"),
    ]);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(signal: Signal) -> ScenarioReport {
        ScenarioReport {
            scenario: "traces_full".into(),
            collector: "opscope".into(),
            round: 1,
            signal,
            offered_rate: None,
            window_seconds: 10.0,
            sent: 1000,
            accepted: 990,
            refused: 10,
            failed: 0,
            received: 990,
            cpu_seconds: 0.5,
            peak_rss_bytes: 64 << 20,
            steady_rss_bytes: 60 << 20,
            latency_p50_micros: Some(1500),
            latency_p99_micros: Some(20_000),
            ceiling_items_per_cpu_second: 19_800.0,
        }
    }

    #[test]
    fn a_line_has_every_field_named_for_its_signal() {
        for signal in [Signal::Traces, Signal::Logs, Signal::Metrics] {
            let line: Value =
                serde_json::from_str(&report(signal).json_line()).expect("one JSON object");
            let object = line.as_object().expect("an object");
            let expected = keys(signal.unit());
            for key in &expected {
                assert!(object.contains_key(key), "{key} missing from {line}");
            }
            assert_eq!(object.len(), expected.len(), "no undocumented keys: {line}");
        }
    }

    #[test]
    fn rates_and_ratios_are_derived_from_the_counts() {
        let line = report(Signal::Traces).to_json();
        assert_eq!(line["spans_per_second"], json!(99.0));
        assert_eq!(line["spans_per_cpu_second"], json!(1980.0));
        assert_eq!(line["ratio_to_ceiling"], json!(0.1));
        assert_eq!(line["cpu_percent"], json!(5.0));
        assert_eq!(line["latency_p99_ms"], json!(20.0));
        assert!(!report(Signal::Traces).json_line().contains('\n'));
    }
}
