//! Cutting an encoded OTLP export request into requests of at most a given size,
//! without decoding it: at resource boundaries first, then at scope, metric and item
//! boundaries inside a resource too large alone. Every part repeats the headers
//! (resource, scope, metric description, schema URL) of the items it holds, so it is
//! a request of its own. An item is never cut: one over the size with its headers
//! is a part of its own, larger than the size, for the caller to judge.

use std::ops::Range;

use bytes::{Buf, Bytes};
use opscope_model::TelemetryKind;
use opscope_proto::varint;

/// One request of a cut, with the items it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub bytes: Bytes,
    pub items: usize,
}

/// What cutting refuses: bytes that are not a protobuf message of the shape expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a well-formed OTLP request at byte {offset}: {why}")]
pub struct Malformed {
    offset: usize,
    why: &'static str,
}

/// How a message of one level of an OTLP request holds its items.
enum Level {
    /// The message is one item: a span, a log record, a data point.
    Item,
    /// The items are in the repeated message fields `children`, each of level `of`;
    /// every other field is a header, which each part repeats.
    Holder {
        children: &'static [u32],
        of: &'static Level,
    },
}

const ITEM: Level = Level::Item;
/// `ScopeSpans.spans` and `ScopeLogs.log_records` are field 2.
const SCOPE_RECORDS: Level = Level::Holder {
    children: &[2],
    of: &ITEM,
};
/// `Gauge`, `Sum`, `Histogram`, `ExponentialHistogram` and `Summary` hold
/// `data_points` in field 1.
const METRIC_DATA: Level = Level::Holder {
    children: &[1],
    of: &ITEM,
};
/// `Metric.data` is one of gauge (5), sum (7), histogram (9), exponential histogram
/// (10) and summary (11).
const METRIC: Level = Level::Holder {
    children: &[5, 7, 9, 10, 11],
    of: &METRIC_DATA,
};
const SCOPE_METRICS: Level = Level::Holder {
    children: &[2],
    of: &METRIC,
};
/// `ResourceSpans.scope_spans`, `ResourceLogs.scope_logs` and
/// `ResourceMetrics.scope_metrics` are field 2.
const RESOURCE_RECORDS: Level = Level::Holder {
    children: &[2],
    of: &SCOPE_RECORDS,
};
const RESOURCE_METRICS: Level = Level::Holder {
    children: &[2],
    of: &SCOPE_METRICS,
};

/// An export request holds its resources in field 1.
const REQUEST_RESOURCES: &[u32] = &[1];

fn resource_level(kind: TelemetryKind) -> &'static Level {
    match kind {
        TelemetryKind::Traces | TelemetryKind::Logs => &RESOURCE_RECORDS,
        TelemetryKind::Metrics => &RESOURCE_METRICS,
    }
}

/// Cuts `request`, an export request of `kind`, into requests of at most `max`
/// bytes, in the order of the items they hold; only a part of one item can be larger.
pub fn cut(request: &Bytes, kind: TelemetryKind, max: usize) -> Result<Vec<Part>, Malformed> {
    let cutter = Cutter { src: request };
    let parts = cutter.cut_message(
        0..request.len(),
        REQUEST_RESOURCES,
        resource_level(kind),
        max,
    )?;
    Ok(parts
        .into_iter()
        .map(|(pieces, items)| Part {
            bytes: cutter.materialise(&pieces),
            items,
        })
        .collect())
}

/// Part of a message being rebuilt: a field of the original as it is, or rebuilt.
enum Piece {
    Whole(Range<usize>),
    Built(Vec<u8>),
}

impl Piece {
    fn len(&self) -> usize {
        match self {
            Self::Whole(range) => range.len(),
            Self::Built(bytes) => bytes.len(),
        }
    }
}

/// A message's parts, each as pieces and with the items it holds.
type Parts = Vec<(Vec<Piece>, usize)>;

struct Cutter<'a> {
    src: &'a Bytes,
}

impl Cutter<'_> {
    /// The message whose fields are `src[range]` (a holder of items) cut into parts
    /// of at most `max` bytes each, a part being the fields of a message of the same
    /// level. A field that does not fit even alone is cut in turn, down to items,
    /// which are a part each; a child message that holds no item and does not fit
    /// is left out.
    fn cut_message(
        &self,
        range: Range<usize>,
        children: &[u32],
        of: &Level,
        max: usize,
    ) -> Result<Parts, Malformed> {
        let fields = fields(self.src, range)?;
        let (kids, headers): (Vec<&Field>, Vec<&Field>) = fields
            .iter()
            .partition(|field| children.contains(&field.number));
        let header_len: usize = headers.iter().map(|field| field.whole.len()).sum();
        // With headers over the size, every item goes alone.
        let room = max.saturating_sub(header_len);
        let mut parts: Parts = Vec::new();
        let mut current: Vec<Piece> = Vec::new();
        let mut current_len = 0;
        let mut current_items = 0;
        for kid in kids {
            let value = kid.value.clone().ok_or(Malformed {
                offset: kid.whole.start,
                why: "a repeated message field is not length-delimited",
            })?;
            let chunks = match of {
                Level::Holder {
                    children,
                    of: grandchildren,
                } if kid.whole.len() > room => {
                    self.cut_child(kid.number, value, children, grandchildren, room)?
                }
                _ => vec![(Piece::Whole(kid.whole.clone()), count(self.src, value, of)?)],
            };
            for (chunk, items) in chunks {
                if current_len + chunk.len() > room && !current.is_empty() {
                    parts.push((std::mem::take(&mut current), current_items));
                    current_len = 0;
                    current_items = 0;
                }
                current_len += chunk.len();
                current_items += items;
                current.push(chunk);
            }
        }
        if !current.is_empty() {
            parts.push((current, current_items));
        }
        // Headers first, as an encoder writes them; their order does not matter.
        Ok(parts
            .into_iter()
            .map(|(chunks, items)| {
                let mut pieces: Vec<Piece> = headers
                    .iter()
                    .map(|field| Piece::Whole(field.whole.clone()))
                    .collect();
                pieces.extend(chunks);
                (pieces, items)
            })
            .collect())
    }

    /// A child message too large for `room` cut into fields (key, length, value) of
    /// at most `room` bytes each.
    fn cut_child(
        &self,
        number: u32,
        value: Range<usize>,
        children: &[u32],
        of: &Level,
        room: usize,
    ) -> Result<Vec<(Piece, usize)>, Malformed> {
        let overhead = key_len(number) + varint::encoded_len(room as u64);
        let parts = self.cut_message(value, children, of, room.saturating_sub(overhead))?;
        Ok(parts
            .into_iter()
            .map(|(pieces, items)| {
                let len: usize = pieces.iter().map(Piece::len).sum();
                let mut out = Vec::with_capacity(overhead + len);
                varint::write(&mut out, u64::from(number << 3 | LENGTH_DELIMITED));
                varint::write(&mut out, len as u64);
                for piece in &pieces {
                    self.extend(&mut out, piece);
                }
                (Piece::Built(out), items)
            })
            .collect())
    }

    fn extend(&self, out: &mut Vec<u8>, piece: &Piece) {
        match piece {
            Piece::Whole(range) => {
                out.extend_from_slice(self.src.get(range.clone()).unwrap_or_default())
            }
            Piece::Built(bytes) => out.extend_from_slice(bytes),
        }
    }

    /// A part's bytes: a slice of the request, shared, when the part is a run of its
    /// fields as they are (the usual case: whole resources); otherwise built.
    fn materialise(&self, pieces: &[Piece]) -> Bytes {
        let mut run: Option<Range<usize>> = Some(0..0);
        for piece in pieces {
            run = match (run, piece) {
                (Some(run), Piece::Whole(range)) if run.is_empty() => Some(range.clone()),
                (Some(run), Piece::Whole(range)) if run.end == range.start => {
                    Some(run.start..range.end)
                }
                _ => None,
            };
        }
        if let Some(run) = run {
            return self.src.slice(run);
        }
        let mut out = Vec::with_capacity(pieces.iter().map(Piece::len).sum());
        for piece in pieces {
            self.extend(&mut out, piece);
        }
        Bytes::from(out)
    }
}

/// Items of the message whose fields are `src[range]`.
fn count(src: &[u8], range: Range<usize>, level: &Level) -> Result<usize, Malformed> {
    let Level::Holder { children, of } = level else {
        return Ok(1);
    };
    let mut items = 0;
    for field in fields(src, range)? {
        if !children.contains(&field.number) {
            continue;
        }
        let value = field.value.ok_or(Malformed {
            offset: field.whole.start,
            why: "a repeated message field is not length-delimited",
        })?;
        items += count(src, value, of)?;
    }
    Ok(items)
}

const VARINT: u32 = 0;
const SIXTY_FOUR_BIT: u32 = 1;
const LENGTH_DELIMITED: u32 = 2;
const THIRTY_TWO_BIT: u32 = 5;

/// One field of a message: its number, its whole encoding (key, length, value) and,
/// when length-delimited, its value.
struct Field {
    number: u32,
    whole: Range<usize>,
    value: Option<Range<usize>>,
}

/// The fields of the message encoded in `src[range]`, in order.
fn fields(src: &[u8], range: Range<usize>) -> Result<Vec<Field>, Malformed> {
    let mut buf = src.get(range.clone()).ok_or(Malformed {
        offset: range.start,
        why: "a length runs past the end",
    })?;
    let end = range.end;
    let at = |buf: &[u8]| end - buf.len();
    let mut fields = Vec::new();
    while !buf.is_empty() {
        let start = at(buf);
        let malformed = |why| Malformed { offset: start, why };
        let key = varint::read(&mut buf).map_err(|_| malformed("a field key is cut short"))?;
        let number =
            u32::try_from(key >> 3).map_err(|_| malformed("a field number is too large"))?;
        let skip = match (key & 7) as u32 {
            VARINT => {
                varint::read(&mut buf).map_err(|_| malformed("a varint is cut short"))?;
                0
            }
            SIXTY_FOUR_BIT => 8,
            THIRTY_TWO_BIT => 4,
            LENGTH_DELIMITED => {
                let len = varint::read(&mut buf).map_err(|_| malformed("a length is cut short"))?;
                usize::try_from(len).map_err(|_| malformed("a length is too large"))?
            }
            _ => return Err(malformed("groups are not OTLP")),
        };
        if skip > buf.len() {
            return Err(malformed("a field runs past the end of its message"));
        }
        let value_start = at(buf);
        buf.advance(skip);
        let value = ((key & 7) as u32 == LENGTH_DELIMITED).then(|| value_start..at(buf));
        fields.push(Field {
            number,
            whole: start..at(buf),
            value,
        });
    }
    Ok(fields)
}

fn key_len(number: u32) -> usize {
    varint::encoded_len(u64::from(number << 3))
}

#[cfg(test)]
mod tests {
    use opscope_model::Telemetry;
    use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
    use opscope_proto::otlp::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
    use opscope_proto::otlp::metrics::v1::{
        Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
    };
    use opscope_proto::otlp::resource::v1::Resource;
    use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use opscope_proto::prost::Message;

    use super::*;

    fn resource(name: &str) -> Resource {
        Resource {
            attributes: vec![KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(name.into())),
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// `resources` resources of `scopes` scopes of `spans` spans, each span's name
    /// `r/s/i` padded to about `span_size` bytes.
    fn traces(
        resources: usize,
        scopes: usize,
        spans: usize,
        span_size: usize,
    ) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: (0..resources)
                .map(|r| ResourceSpans {
                    resource: Some(resource(&format!("service-{r}"))),
                    scope_spans: (0..scopes)
                        .map(|s| ScopeSpans {
                            scope: Some(InstrumentationScope {
                                name: format!("scope-{s}"),
                                ..Default::default()
                            }),
                            spans: (0..spans)
                                .map(|i| Span {
                                    name: format!("{r}/{s}/{i:06}{}", "x".repeat(span_size)),
                                    ..Default::default()
                                })
                                .collect(),
                            schema_url: format!("https://schema/{s}"),
                        })
                        .collect(),
                    schema_url: "https://schema/resource".into(),
                })
                .collect(),
        }
    }

    /// Every span's name with its resource's service name, scope name and schema URLs.
    fn flat(request: &ExportTraceServiceRequest) -> Vec<String> {
        let mut out = Vec::new();
        for r in &request.resource_spans {
            let service = format!("{:?}", r.resource);
            for s in &r.scope_spans {
                let scope = s.scope.as_ref().map(|scope| scope.name.clone());
                for span in &s.spans {
                    out.push(format!(
                        "{service} {} {scope:?} {} {}",
                        r.schema_url, s.schema_url, span.name
                    ));
                }
            }
        }
        out
    }

    fn cut_traces(request: &ExportTraceServiceRequest, max: usize) -> Vec<Part> {
        let bytes = Bytes::from(request.encode_to_vec());
        cut(&bytes, TelemetryKind::Traces, max).expect("a request cuts")
    }

    /// The parts decoded one after the other, after checking each against its items.
    fn decoded(parts: &[Part]) -> ExportTraceServiceRequest {
        let mut all = ExportTraceServiceRequest::default();
        for part in parts {
            let request =
                ExportTraceServiceRequest::decode(part.bytes.clone()).expect("a part decodes");
            assert_eq!(request.item_count(), part.items);
            all.append(request);
        }
        all
    }

    #[test]
    fn whole_resources_are_shared_slices_of_the_request_under_the_size() {
        let request = traces(8, 1, 20, 100);
        let bytes = Bytes::from(request.encode_to_vec());
        let max = bytes.len() / 3;
        let parts = cut(&bytes, TelemetryKind::Traces, max).unwrap();
        assert!(parts.len() >= 3, "{} parts", parts.len());
        for part in &parts {
            assert!(part.bytes.len() <= max);
            let offset = part.bytes.as_ptr() as usize - bytes.as_ptr() as usize;
            assert!(
                offset < bytes.len(),
                "a part of whole resources is not copied"
            );
        }
        assert_eq!(flat(&decoded(&parts)), flat(&request));
    }

    #[test]
    fn a_resource_too_large_alone_is_cut_by_scopes_and_spans_keeping_its_headers() {
        let request = traces(1, 3, 400, 200);
        let max = 16 * 1024;
        assert!(request.encoded_len() > 10 * max);
        let parts = cut_traces(&request, max);
        for part in &parts {
            assert!(part.bytes.len() <= max, "{} > {max}", part.bytes.len());
            let decoded = ExportTraceServiceRequest::decode(part.bytes.clone()).unwrap();
            let first = &decoded.resource_spans[0];
            assert_eq!(first.resource, Some(resource("service-0")));
            assert_eq!(first.schema_url, "https://schema/resource");
        }
        let all = decoded(&parts);
        assert_eq!(all.item_count(), 1200);
        assert_eq!(
            flat(&all),
            flat(&request),
            "every span, in order, under its headers"
        );
        // Parts are filled: no more than one part in two is under half the size.
        let small = parts.iter().filter(|p| p.bytes.len() < max / 2).count();
        assert!(
            small * 2 <= parts.len(),
            "{small} of {} parts are small",
            parts.len()
        );
    }

    #[test]
    fn a_metric_with_too_many_points_is_cut_between_points_keeping_its_description() {
        let points = (0..5000)
            .map(|i| NumberDataPoint {
                time_unix_nano: i,
                value: Some(number_data_point::Value::AsInt(i as i64)),
                ..Default::default()
            })
            .collect();
        let request = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(resource("metrics")),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "requests".into(),
                        unit: "1".into(),
                        data: Some(metric::Data::Sum(Sum {
                            data_points: points,
                            aggregation_temporality: 2,
                            is_monotonic: true,
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let bytes = Bytes::from(request.encode_to_vec());
        let max = 8 * 1024;
        let parts = cut(&bytes, TelemetryKind::Metrics, max).unwrap();
        assert!(parts.len() > 5);
        let mut times = Vec::new();
        for part in &parts {
            assert!(part.bytes.len() <= max);
            let decoded = ExportMetricsServiceRequest::decode(part.bytes.clone()).unwrap();
            assert_eq!(decoded.item_count(), part.items);
            let metric = &decoded.resource_metrics[0].scope_metrics[0].metrics[0];
            assert_eq!(
                (metric.name.as_str(), metric.unit.as_str()),
                ("requests", "1")
            );
            let Some(metric::Data::Sum(sum)) = &metric.data else {
                panic!("a sum stays a sum: {metric:?}");
            };
            assert!(sum.is_monotonic && sum.aggregation_temporality == 2);
            times.extend(sum.data_points.iter().map(|p| p.time_unix_nano));
        }
        assert_eq!(times, (0..5000).collect::<Vec<_>>());
    }

    #[test]
    fn an_item_over_the_size_alone_is_a_part_of_its_own() {
        let mut request = traces(1, 1, 5, 10);
        request.resource_spans[0].scope_spans[0].spans[2].name = "y".repeat(5000);
        let parts = cut_traces(&request, 1000);
        let over: Vec<&Part> = parts.iter().filter(|p| p.bytes.len() > 1000).collect();
        assert_eq!(over.len(), 1);
        assert_eq!(over[0].items, 1);
        assert_eq!(flat(&decoded(&parts)), flat(&request));
    }

    #[test]
    fn headers_over_the_size_leave_every_item_alone() {
        let mut request = traces(1, 1, 3, 10);
        request.resource_spans[0].resource = Some(resource(&"r".repeat(2000)));
        let parts = cut_traces(&request, 1000);
        assert_eq!(parts.iter().map(|p| p.items).collect::<Vec<_>>(), [1, 1, 1]);
        assert_eq!(flat(&decoded(&parts)), flat(&request));
    }

    #[test]
    fn bytes_that_are_not_a_request_are_refused_with_where() {
        let cut_short = Bytes::from_static(&[0x0a, 0x10, 0x0a]);
        let error = cut(&cut_short, TelemetryKind::Traces, 10).unwrap_err();
        assert_eq!(
            error.to_string(),
            "not a well-formed OTLP request at byte 0: a field runs past the end of its message"
        );
        let group = Bytes::from_static(&[0x0b, 0x0c]);
        assert!(cut(&group, TelemetryKind::Logs, 10).is_err());
        let not_a_message = Bytes::from_static(&[0x08, 0x01]);
        assert!(cut(&not_a_message, TelemetryKind::Traces, 10).is_err());
    }
}
