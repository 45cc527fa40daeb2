//! How `opscope analyze` prints what it found: one JSON object per signal per line,
//! or a table for people with the hint under each row and a summary line.

use opscope_model::signal::format_figure;
use opscope_model::signal::{Severity, Signal, SignalState};
use opscope_model::timestamp::format_rfc3339;

use super::Totals;

/// Most severe first, firing before resolved, then by signal and object.
pub fn sort_for_people(signals: &mut [Signal]) {
    signals.sort_by(|a, b| {
        let rank = |s: &Signal| {
            (
                s.severity != Severity::Critical,
                s.state != SignalState::Firing,
                s.signal,
            )
        };
        rank(a)
            .cmp(&rank(b))
            .then_with(|| a.object.display().cmp(&b.object.display()))
    });
}

pub fn table(signals: &[Signal], totals: &Totals) -> String {
    let mut out = String::new();
    if signals.is_empty() {
        out.push_str("No signals: nothing in the input looks like a reconcile loop, write conflict, finalizer leak or resource leak.\n");
    } else {
        out.push_str(&format!(
            "{:<9} {:<9} {:<15} {:<40} {:<24} {}\n",
            "SEVERITY", "STATE", "SIGNAL", "OBJECT", "OPERATOR", "CAUSE"
        ));
    }
    for signal in signals {
        let state = match signal.state {
            SignalState::Firing => "firing",
            SignalState::Resolved => "resolved",
            SignalState::HandedOver => "handed over",
        };
        out.push_str(&format!(
            "{:<9} {:<9} {:<15} {:<40} {:<24} {}\n",
            signal.severity.name(),
            state,
            signal.signal.name(),
            signal.object.display(),
            signal.operator.name,
            signal.cause
        ));
        let figures: Vec<String> = signal
            .figures
            .iter()
            .map(|(k, v)| format!("{k}={}", format_figure(*v)))
            .collect();
        out.push_str(&format!("    figures:  {}\n", figures.join(" ")));
        out.push_str(&format!(
            "    seen:     {} .. {}\n",
            format_rfc3339(signal.first_seen),
            format_rfc3339(signal.last_seen)
        ));
        if !signal.evidence.is_empty() {
            out.push_str(&format!("    evidence: {}\n", signal.evidence.join(", ")));
        }
        out.push_str(&format!("    hint:     {}\n", signal.hint));
    }
    out.push_str(&format!("\n{}\n", summary(totals, signals.len())));
    out
}

/// The line that ends a report: what was read and found.
pub fn summary(totals: &Totals, signals: usize) -> String {
    let untimed = match totals.untimed {
        0 => String::new(),
        n => format!(", {n} without a time (not correlated)"),
    };
    let skipped = match totals.skipped {
        0 => String::new(),
        n => format!(" ({n} skipped, named above)"),
    };
    format!(
        "{} file(s){skipped}, {} record(s) ({} malformed{untimed}), {} reconcile(s), {} write(s), {} signal(s)",
        totals.files, totals.records, totals.malformed, totals.reconciles, totals.writes, signals
    )
}
