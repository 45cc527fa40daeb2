//! What the fuzz targets share: an OTLP request run through the processing the
//! pipeline applies (input limits, operator tagger, correlator), and the splitting
//! of one fuzz input into several files.

use opscope::fuzzing::{InputLimits, WithinLimits};
use opscope_processors::correlator::{Correlator, CorrelatorConfig};
use opscope_processors::tagger::{OperatorTagger, TaggerConfig};
use opscope_processors::{CorrelatorEvents, Taggable};

/// An hour of event time, past every detector's window.
const HOUR_NANOS: u64 = 3_600_000_000_000;

/// What a receiver does with a decoded request and the processors after it: refuse
/// it over the input limits, tag it, extract correlator events, feed and advance the
/// correlator. The request is tagged twice: tagging what is tagged must not panic
/// either (a gateway receives records another opscope tagged).
pub fn process<T: Taggable + CorrelatorEvents + WithinLimits>(mut request: T) {
    if request.check_limits(&InputLimits::default()).is_err() {
        return;
    }
    let mut tagger = OperatorTagger::new(&TaggerConfig::default());
    request.tag(&mut tagger);
    let mut events = Vec::new();
    request.correlator_events(&mut events);
    let mut correlator = Correlator::new(CorrelatorConfig::default());
    for event in events {
        correlator.observe(event);
    }
    let now = correlator.watermark();
    correlator.advance(now);
    correlator.advance(now.saturating_add(HOUR_NANOS));
    correlator.active();
    request.tag(&mut tagger);
}

/// The separator between the parts of a multi-file input.
pub const PART_SEPARATOR: &[u8] = b"\n--part--\n";

/// Splits an input at [`PART_SEPARATOR`].
pub fn parts(data: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = data;
    while let Some(at) = rest
        .windows(PART_SEPARATOR.len())
        .position(|window| window == PART_SEPARATOR)
    {
        let (part, tail) = rest.split_at(at);
        parts.push(part);
        rest = tail.get(PART_SEPARATOR.len()..).unwrap_or_default();
    }
    parts.push(rest);
    parts
}
