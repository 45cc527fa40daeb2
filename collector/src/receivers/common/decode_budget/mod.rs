//! What an OTLP request would become once decoded, counted from its bytes before
//! anything is built: its items and the memory its structs would take. A request
//! over the receiver's budget is refused without being decoded, and the memory of
//! one within it is reserved against the memory limiter before decoding starts, so
//! that a small request of many empty elements cannot decode into gigabytes.

mod json;
mod protobuf;
mod schema;

use std::mem::size_of;

use opscope_model::TelemetryKind;
use opscope_model::memory::MemoryHold;

use super::input_limits::InputLimits;
use crate::consumer::{Consumer, Refusal};
use schema::{FieldKind, Message};

const MIB: u64 = 1024 * 1024;

/// The wire formats a request's census is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    Protobuf,
    Json,
}

/// What decoding a request would build.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Census {
    /// Spans, log records or metric data points.
    pub items: u64,
    /// The bytes its structs, strings and number lists would take, allocator
    /// overhead aside.
    pub decoded_bytes: u64,
}

impl Census {
    /// Reads the census of a `kind` request in `format`.
    pub fn of(kind: TelemetryKind, format: WireFormat, body: &[u8]) -> Result<Self, CensusError> {
        let message = match kind {
            TelemetryKind::Traces => &schema::TRACES_REQUEST,
            TelemetryKind::Logs => &schema::LOGS_REQUEST,
            TelemetryKind::Metrics => &schema::METRICS_REQUEST,
        };
        match format {
            WireFormat::Protobuf => protobuf::census(message, body),
            WireFormat::Json => json::census(message, body),
        }
    }

    fn add(&mut self, bytes: usize) {
        self.decoded_bytes = self
            .decoded_bytes
            .saturating_add(u64::try_from(bytes).unwrap_or(u64::MAX));
    }

    /// One element of a repeated message field.
    fn element(&mut self, message: &Message) {
        self.add(message.size);
        if message.item {
            self.items = self.items.saturating_add(1);
        }
    }

    fn text(&mut self, bytes: usize) {
        self.add(bytes);
    }

    fn repeated_text(&mut self, bytes: usize) {
        self.add(size_of::<String>());
        self.add(bytes);
    }

    fn numbers(&mut self, count: usize) {
        self.add(count.saturating_mul(size_of::<u64>()));
    }

    /// One number outside a packed run, counted when the field is a number list.
    fn unpacked_number(&mut self, field: Option<FieldKind>) {
        if let Some(FieldKind::Numbers { .. }) = field {
            self.numbers(1);
        }
    }

    /// Whether the request fits the receiver's budget; the reason names the limit.
    pub fn check(&self, limits: &InputLimits, kind: TelemetryKind) -> Result<(), String> {
        if self.items > limits.max_items as u64 {
            return Err(format!(
                "the request holds {} {}, more than limits.max_items {}",
                self.items,
                kind.item_name(),
                limits.max_items
            ));
        }
        let budget = (limits.max_decoded_size_mib as u64).saturating_mul(MIB);
        if self.decoded_bytes > budget {
            return Err(format!(
                "the request would take {} MiB once decoded, more than limits.max_decoded_size_mib {}",
                self.decoded_bytes.div_ceil(MIB),
                limits.max_decoded_size_mib
            ));
        }
        Ok(())
    }
}

/// Bytes that do not read as the request they claim to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CensusError(String);

impl CensusError {
    fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// Why a request was not let through to decoding.
#[derive(Debug)]
pub enum Refused {
    /// Not readable as an OTLP request: a bad request.
    Undecodable(CensusError),
    /// Over the receiver's budget, with the items it holds: too large, not worth
    /// sending again as it is.
    OverBudget { reason: String, items: usize },
    /// The memory limiter would not take what it decodes into: retry later.
    Memory { refusal: Refusal, items: usize },
}

/// A request let through to decoding: the memory its decoding takes, counted until
/// the pipelines hold the decoded request.
pub struct Admission {
    pub hold: Option<MemoryHold>,
}

/// Reads the census of `body`, checks it against `limits`, and reserves its decoded
/// size in the memory account of the pipelines `consumer` feeds.
pub fn admit<T: opscope_model::Telemetry>(
    format: WireFormat,
    body: &[u8],
    limits: &InputLimits,
    consumer: &Consumer<T>,
) -> Result<Admission, Refused> {
    let census = Census::of(T::KIND, format, body).map_err(Refused::Undecodable)?;
    let items = usize::try_from(census.items).unwrap_or(usize::MAX);
    census
        .check(limits, T::KIND)
        .map_err(|reason| Refused::OverBudget { reason, items })?;
    let hold = consumer
        .reserve(census.decoded_bytes)
        .map_err(|refusal| Refused::Memory { refusal, items })?;
    Ok(Admission { hold })
}

#[cfg(test)]
mod tests;
