//! Settings of the `memory_limiter` processor, named as in the OpenTelemetry
//! Collector: a hard limit in MiB or as a share of the memory the process may use,
//! and a spike allowance below it that sets the soft limit.

use std::time::Duration;

use serde::Deserialize;

use super::state::Limits;
use opscope_model::config::{FieldError, MAX_DURATION, Validate, duration, duration_in};

const MIB: u64 = 1024 * 1024;
/// The shortest `check_interval`. A check reads the resident size, and above the soft
/// limit also walks the allocator's heaps to return free memory; the resident size
/// moves no faster than the allocator gives memory back, so checking more often than
/// every 50 ms sees nothing new and only burns CPU (1 ns was a busy loop).
const MIN_CHECK_INTERVAL: Duration = Duration::from_millis(50);
/// The spike allowance when none is configured, as in the OpenTelemetry Collector.
const DEFAULT_SPIKE_PERCENT_OF_LIMIT: u64 = 20;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryLimiterConfig {
    /// How often the process's resident memory is sampled.
    #[serde(deserialize_with = "duration")]
    pub check_interval: Duration,
    pub limit_mib: Option<u64>,
    /// Of the cgroup's memory limit, or of the RAM when there is none.
    pub limit_percentage: Option<u64>,
    pub spike_limit_mib: Option<u64>,
    pub spike_limit_percentage: Option<u64>,
}

impl Default for MemoryLimiterConfig {
    fn default() -> Self {
        Self {
            check_interval: Duration::from_secs(1),
            limit_mib: None,
            limit_percentage: None,
            spike_limit_mib: None,
            spike_limit_percentage: None,
        }
    }
}

impl MemoryLimiterConfig {
    /// Whether [`limits`](Self::limits) needs the memory the process may use.
    pub fn needs_total_memory(&self) -> bool {
        self.limit_percentage.is_some() || self.spike_limit_percentage.is_some()
    }

    /// The limits in bytes; `total` is the memory the process may use (read only when
    /// a percentage is configured).
    pub fn limits(&self, total: u64) -> Result<Limits, FieldError> {
        let percent_of_total = |percent: u64| total / 100 * percent;
        let hard = match (self.limit_mib, self.limit_percentage) {
            (Some(mib), _) => mib.saturating_mul(MIB),
            (None, Some(percent)) => percent_of_total(percent),
            (None, None) => return Err(FieldError::new("limit_mib", "is not set")),
        };
        let spike = match (self.spike_limit_mib, self.spike_limit_percentage) {
            (Some(mib), _) => mib.saturating_mul(MIB),
            (None, Some(percent)) => percent_of_total(percent),
            (None, None) => hard / 100 * DEFAULT_SPIKE_PERCENT_OF_LIMIT,
        };
        if spike >= hard {
            return Err(FieldError::new(
                "spike_limit_mib",
                format!(
                    "the spike allowance ({spike} bytes) is not below the limit ({hard} bytes)"
                ),
            ));
        }
        Ok(Limits {
            soft: hard - spike,
            hard,
        })
    }
}

impl Validate for MemoryLimiterConfig {
    fn validate(&self) -> Result<(), FieldError> {
        duration_in(
            "check_interval",
            self.check_interval,
            MIN_CHECK_INTERVAL..=MAX_DURATION,
        )?;
        match (self.limit_mib, self.limit_percentage) {
            (None, None) => {
                return Err(FieldError::new(
                    "limit_mib",
                    "set limit_mib or limit_percentage",
                ));
            }
            (Some(_), Some(_)) => {
                return Err(FieldError::new(
                    "limit_percentage",
                    "set limit_mib or limit_percentage, not both",
                ));
            }
            (Some(0), None) => return Err(FieldError::new("limit_mib", "must be at least 1")),
            _ => {}
        }
        check_percentage("limit_percentage", self.limit_percentage)?;
        check_percentage("spike_limit_percentage", self.spike_limit_percentage)?;
        if self.spike_limit_mib.is_some() && self.spike_limit_percentage.is_some() {
            return Err(FieldError::new(
                "spike_limit_percentage",
                "set spike_limit_mib or spike_limit_percentage, not both",
            ));
        }
        if let (Some(limit), Some(spike)) = (self.limit_mib, self.spike_limit_mib)
            && spike >= limit
        {
            return Err(FieldError::new(
                "spike_limit_mib",
                format!("{spike} is not below limit_mib {limit}"),
            ));
        }
        if let (Some(limit), Some(spike)) = (self.limit_percentage, self.spike_limit_percentage)
            && spike >= limit
        {
            return Err(FieldError::new(
                "spike_limit_percentage",
                format!("{spike} is not below limit_percentage {limit}"),
            ));
        }
        Ok(())
    }
}

fn check_percentage(field: &str, value: Option<u64>) -> Result<(), FieldError> {
    match value {
        Some(percent) if !(1..=100).contains(&percent) => Err(FieldError::new(
            field,
            format!("{percent} is not between 1 and 100"),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> MemoryLimiterConfig {
        serde_json::from_str(json).unwrap()
    }

    fn error(json: &str) -> String {
        config(json).validate().unwrap_err().to_string()
    }

    #[test]
    fn limits_in_mib_with_the_default_spike() {
        let limiter = config(r#"{"limit_mib": 100}"#);
        limiter.validate().unwrap();
        assert!(!limiter.needs_total_memory());
        let limits = limiter.limits(0).unwrap();
        assert_eq!(limits.hard, 100 * MIB);
        assert_eq!(limits.soft, 100 * MIB - 100 * MIB / 100 * 20);
    }

    #[test]
    fn percentages_are_of_the_total_memory() {
        let limiter = config(r#"{"limit_percentage": 80, "spike_limit_percentage": 20}"#);
        limiter.validate().unwrap();
        assert!(limiter.needs_total_memory());
        let limits = limiter.limits(1000 * MIB).unwrap();
        assert_eq!((limits.soft, limits.hard), (600 * MIB, 800 * MIB));
    }

    #[test]
    fn invalid_settings_name_their_field() {
        assert_eq!(error("{}"), "limit_mib: set limit_mib or limit_percentage");
        assert_eq!(
            error(r#"{"limit_mib": 10, "limit_percentage": 50}"#),
            "limit_percentage: set limit_mib or limit_percentage, not both"
        );
        assert_eq!(
            error(r#"{"limit_mib": 100, "spike_limit_mib": 100}"#),
            "spike_limit_mib: 100 is not below limit_mib 100"
        );
        assert_eq!(
            error(r#"{"limit_percentage": 120}"#),
            "limit_percentage: 120 is not between 1 and 100"
        );
        assert_eq!(
            error(r#"{"limit_mib": 10, "check_interval": "0s"}"#),
            "check_interval: must be between 50ms and 1year, not 0s"
        );
        assert_eq!(
            error(r#"{"limit_mib": 10, "check_interval": "1ns"}"#),
            "check_interval: must be between 50ms and 1year, not 1ns"
        );
        assert!(
            serde_json::from_str::<MemoryLimiterConfig>(r#"{"limit": 1}"#)
                .unwrap_err()
                .to_string()
                .contains("unknown field")
        );
    }

    #[test]
    fn a_spike_in_mib_above_a_percentage_limit_is_refused_once_resolved() {
        let limiter = config(r#"{"limit_percentage": 10, "spike_limit_mib": 200}"#);
        limiter.validate().unwrap();
        assert!(limiter.limits(1000 * MIB).is_err());
    }
}
