//! Prometheus remote write 1.0: the `WriteRequest` message a sender POSTs (protobuf,
//! snappy block) to `/api/v1/write`. Written by hand from the tag numbers of the
//! public `prompb/remote.proto` and `prompb/types.proto`.

/// `prometheus.WriteRequest`. Tag 2 is reserved by the protocol.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

/// One series: its labels (sorted by name, `__name__` among them) and its samples
/// (in time order).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// What a metric family is, for receivers that keep metadata.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricMetadata {
    #[prost(enumeration = "MetricType", tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub metric_family_name: String,
    #[prost(string, tag = "4")]
    pub help: String,
    #[prost(string, tag = "5")]
    pub unit: String,
}

/// `prometheus.MetricMetadata.MetricType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    Unknown = 0,
    Counter = 1,
    Gauge = 2,
    Histogram = 3,
    GaugeHistogram = 4,
    Summary = 5,
    Info = 6,
    StateSet = 7,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The bytes protoc produces for a one-series request with one metadata entry,
    /// written out by field number: a check on the tags above that does not use them.
    #[test]
    fn wire_layout_matches_the_public_tag_numbers() {
        let request = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label {
                    name: "a".into(),
                    value: "b".into(),
                }],
                samples: vec![Sample {
                    value: 1.0,
                    timestamp: 2,
                }],
            }],
            metadata: vec![MetricMetadata {
                r#type: MetricType::Counter as i32,
                metric_family_name: "m".into(),
                help: "h".into(),
                unit: "u".into(),
            }],
        };
        let label = [0x0a, 1, b'a', 0x12, 1, b'b'];
        let mut sample = vec![0x09];
        sample.extend_from_slice(&1.0f64.to_le_bytes());
        sample.extend_from_slice(&[0x10, 2]);
        let mut series = vec![0x0a, label.len() as u8];
        series.extend_from_slice(&label);
        series.extend_from_slice(&[0x12, sample.len() as u8]);
        series.extend_from_slice(&sample);
        let metadata = [0x08, 1, 0x12, 1, b'm', 0x22, 1, b'h', 0x2a, 1, b'u'];
        let mut expected = vec![0x0a, series.len() as u8];
        expected.extend_from_slice(&series);
        expected.extend_from_slice(&[0x1a, metadata.len() as u8]);
        expected.extend_from_slice(&metadata);
        assert_eq!(request.encode_to_vec(), expected);
    }
}
