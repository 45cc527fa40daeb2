//! The crate-private parsers the fuzz targets in `fuzz/` drive, re-exported under one
//! path; built only with the `fuzzing` feature and not part of the crate's API.

pub use crate::config::{Config, DEFAULT_CONFIG};
pub use crate::receivers::common::decode_budget::{Census, WireFormat};
pub use crate::receivers::common::input_limits::{InputLimits, WithinLimits};
pub use crate::receivers::filelog::checkpoint::Position;
pub use crate::receivers::filelog::config::LineFormat;
pub use crate::receivers::filelog::cri::{Stream, parse_container_line};
pub use crate::receivers::filelog::join::Joins;
pub use crate::receivers::filelog::reader::{BatchLimits, Ending, ReadEnd, RecordReader};
pub use crate::receivers::filelog::record::Assembled;
pub use crate::receivers::k8s_audit::K8sAuditConfig;
pub use crate::receivers::k8s_audit::filter::EventFilter;
pub use crate::receivers::k8s_audit::webhook::admitted_records;
pub use crate::receivers::otlp::http::Format as OtlpHttpFormat;
pub use crate::receivers::prometheus_scrape::exposition::{Format as ExpositionFormat, parse};
pub use crate::receivers::prometheus_scrape::otlp_metrics::to_metrics;
pub use crate::receivers::prometheus_scrape::series_starts::SeriesStarts;
pub use opscope_model::kubernetes::audit::EventList;
