//! Retry policy of the sending queue: exponential backoff with jitter, bounded by a
//! total elapsed time, with the OpenTelemetry Collector's settings and defaults.

use std::time::Duration;

use opscope_model::config::{FieldError, Validate, duration};
use rand::Rng;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    pub enabled: bool,
    #[serde(deserialize_with = "duration")]
    pub initial_interval: Duration,
    #[serde(deserialize_with = "duration")]
    pub max_interval: Duration,
    /// Give up on a batch after this long; zero retries forever.
    #[serde(deserialize_with = "duration")]
    pub max_elapsed_time: Duration,
    pub multiplier: f64,
    pub randomization_factor: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            initial_interval: Duration::from_secs(5),
            max_interval: Duration::from_secs(30),
            max_elapsed_time: Duration::from_secs(300),
            multiplier: 1.5,
            randomization_factor: 0.5,
        }
    }
}

impl Validate for RetryConfig {
    fn validate(&self) -> Result<(), FieldError> {
        use opscope_model::config::FieldError;
        if self.initial_interval.is_zero() {
            return Err(FieldError::new(
                "initial_interval",
                "must be greater than zero",
            ));
        }
        if self.max_interval < self.initial_interval {
            return Err(FieldError::new(
                "max_interval",
                "must not be smaller than initial_interval",
            ));
        }
        if self.multiplier.is_nan() || self.multiplier < 1.0 {
            return Err(FieldError::new("multiplier", "must be at least 1"));
        }
        if !(0.0..=1.0).contains(&self.randomization_factor) {
            return Err(FieldError::new(
                "randomization_factor",
                "must be between 0 and 1",
            ));
        }
        Ok(())
    }
}

/// The delays between attempts for one batch.
pub struct Backoff {
    next: Duration,
    config: RetryConfig,
}

impl Backoff {
    pub fn new(config: &RetryConfig) -> Self {
        Self {
            next: config.initial_interval,
            config: config.clone(),
        }
    }

    /// The next delay: the current interval spread by the randomization factor,
    /// after which the interval grows by the multiplier up to the maximum.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next.as_secs_f64();
        let spread = base * self.config.randomization_factor;
        let delay = if spread > 0.0 {
            rand::rng().random_range(base - spread..=base + spread)
        } else {
            base
        };
        let grown = (base * self.config.multiplier).min(self.config.max_interval.as_secs_f64());
        self.next = Duration::from_secs_f64(grown);
        Duration::from_secs_f64(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_within_jitter_up_to_the_maximum() {
        let config = RetryConfig {
            initial_interval: Duration::from_millis(100),
            max_interval: Duration::from_millis(400),
            ..Default::default()
        };
        let mut backoff = Backoff::new(&config);
        let bases = [100.0, 150.0, 225.0, 337.5, 400.0, 400.0];
        for base in bases {
            let delay = backoff.next_delay().as_secs_f64() * 1000.0;
            assert!(
                delay >= base * 0.5 - 1e-6 && delay <= base * 1.5 + 1e-6,
                "delay {delay} outside jitter of {base}"
            );
        }
    }

    #[test]
    fn max_below_initial_is_rejected() {
        let config = RetryConfig {
            initial_interval: Duration::from_secs(5),
            max_interval: Duration::from_secs(1),
            ..Default::default()
        };
        assert_eq!(config.validate().unwrap_err().field, "max_interval");
    }
}
