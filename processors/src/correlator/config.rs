//! Settings of the correlator: one section per detector, and the limits of its state
//! (objects tracked, idle expiry, accepted lateness, the pace of signal updates).

use std::time::Duration;

use serde::Deserialize;

use crate::correlator::detectors::api_request_storm::ApiRequestStormConfig;
use crate::correlator::detectors::finalizer_leak::FinalizerLeakConfig;
use crate::correlator::detectors::reconcile_loop::ReconcileLoopConfig;
use crate::correlator::detectors::resource_leak::ResourceLeakConfig;
use crate::correlator::detectors::write_conflict::WriteConflictConfig;
use crate::correlator::lifecycle::journal::JournalConfig;
use opscope_model::config::{FieldError, Validate, duration, positive};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CorrelatorConfig {
    pub reconcile_loop: ReconcileLoopConfig,
    pub write_conflict: WriteConflictConfig,
    pub finalizer_leak: FinalizerLeakConfig,
    pub resource_leak: ResourceLeakConfig,
    pub api_request_storm: ApiRequestStormConfig,
    /// Objects tracked at most; beyond, the least recently seen one is evicted.
    pub max_objects: usize,
    /// An object with no event for this long and nothing firing is forgotten.
    #[serde(deserialize_with = "duration")]
    pub idle_expiry: Duration,
    /// How far behind the newest event time an event may arrive and still count.
    #[serde(deserialize_with = "duration")]
    pub lateness: Duration,
    /// The shortest time between two updates of one firing signal.
    #[serde(deserialize_with = "duration")]
    pub update_interval: Duration,
    /// Where the correlator journals what it takes, to rebuild its state after a
    /// restart (a gateway's volume); none by default.
    pub storage: Option<JournalConfig>,
    /// A gateway's: when the ring of gateways changes, let go of the objects another
    /// gateway owns now and hand their journaled records over to it.
    pub handover: Option<HandoverConfig>,
}

/// Where a gateway learns who owns what, and who it is.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandoverConfig {
    /// The `loadbalancing` exporter whose ring says which gateway owns an object
    /// (the one the gateway sends audit events on through).
    pub exporter: String,
    /// This gateway as the ring names it: `host:port`, e.g. `${env:POD_IP}:4317`.
    pub endpoint: String,
}

impl CorrelatorConfig {
    /// How long what the correlator took can still change its state: an object idle
    /// longer is forgotten, an event later than the lateness is not taken.
    pub fn horizon(&self) -> Duration {
        self.idle_expiry.saturating_add(self.lateness)
    }
}

impl Default for CorrelatorConfig {
    fn default() -> Self {
        Self {
            reconcile_loop: ReconcileLoopConfig::default(),
            write_conflict: WriteConflictConfig::default(),
            finalizer_leak: FinalizerLeakConfig::default(),
            resource_leak: ResourceLeakConfig::default(),
            api_request_storm: ApiRequestStormConfig::default(),
            max_objects: 10_000,
            idle_expiry: Duration::from_secs(15 * 60),
            lateness: Duration::from_secs(30),
            update_interval: Duration::from_secs(30),
            storage: None,
            handover: None,
        }
    }
}

impl Validate for CorrelatorConfig {
    fn validate(&self) -> Result<(), FieldError> {
        let sections = [
            ("reconcile_loop", self.reconcile_loop.validate()),
            ("write_conflict", self.write_conflict.validate()),
            ("finalizer_leak", self.finalizer_leak.validate()),
            ("resource_leak", self.resource_leak.validate()),
            ("api_request_storm", self.api_request_storm.validate()),
        ];
        for (section, result) in sections {
            result.map_err(|error| error.within(section))?;
        }
        if let Some(storage) = &self.storage {
            storage
                .validate()
                .map_err(|error| error.within("storage"))?;
        }
        if self.handover.is_some() && self.storage.is_none() {
            return Err(FieldError::new(
                "handover",
                "needs storage: what is handed over is the journal",
            ));
        }
        if self.max_objects == 0 {
            return Err(FieldError::new("max_objects", "must be at least 1"));
        }
        positive("idle_expiry", self.idle_expiry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let config = CorrelatorConfig::default();
        assert_eq!(config.reconcile_loop.min_reconciles, 30);
        assert_eq!(config.reconcile_loop.window, Duration::from_secs(60));
        assert_eq!(config.write_conflict.min_conflicts, 5);
        assert_eq!(config.finalizer_leak.max_age, Duration::from_secs(300));
        assert_eq!(config.resource_leak.window, Duration::from_secs(900));
        assert_eq!(config.resource_leak.min_r_squared, 0.9);
        assert_eq!(config.api_request_storm.min_sends_per_second, 50.0);
        assert_eq!(config.api_request_storm.duration, Duration::from_secs(120));
        assert_eq!(
            config.api_request_storm.rate_window,
            Duration::from_secs(30)
        );
        assert_eq!(config.api_request_storm.max_instances, 1_000);
        assert_eq!(config.max_objects, 10_000);
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn reads_collector_style_settings() {
        let config: CorrelatorConfig = serde_json::from_str(
            r#"{"reconcile_loop":{"min_reconciles":50,"window":"2m"},
                "finalizer_leak":{"max_age":"10m"},"lateness":"5s",
                "api_request_storm":{"min_sends_per_second":20,"duration":"5m"}}"#,
        )
        .unwrap();
        assert_eq!(config.reconcile_loop.min_reconciles, 50);
        assert_eq!(config.reconcile_loop.window, Duration::from_secs(120));
        assert_eq!(config.reconcile_loop.fast_requeue, Duration::from_secs(1));
        assert_eq!(config.finalizer_leak.max_age, Duration::from_secs(600));
        assert_eq!(config.lateness, Duration::from_secs(5));
        assert_eq!(config.api_request_storm.min_sends_per_second, 20.0);
        assert_eq!(config.api_request_storm.duration, Duration::from_secs(300));
        assert_eq!(
            config.api_request_storm.rate_window,
            Duration::from_secs(30)
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let error = serde_json::from_str::<CorrelatorConfig>(r#"{"write_conflict":{"limit":3}}"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field `limit`"), "{error}");
    }

    #[test]
    fn invalid_settings_are_named_by_their_path() {
        let mut config = CorrelatorConfig::default();
        config.reconcile_loop.field_churn_ratio = 1.5;
        assert_eq!(
            config.validate().unwrap_err().field,
            "reconcile_loop.field_churn_ratio"
        );
        let mut config = CorrelatorConfig::default();
        config.resource_leak.sample_interval = Duration::from_secs(600);
        assert_eq!(
            config.validate().unwrap_err().field,
            "resource_leak.sample_interval"
        );
        let mut config = CorrelatorConfig::default();
        config.api_request_storm.min_sends_per_second = -1.0;
        assert_eq!(
            config.validate().unwrap_err().field,
            "api_request_storm.min_sends_per_second"
        );
        let config = CorrelatorConfig {
            max_objects: 0,
            ..CorrelatorConfig::default()
        };
        assert_eq!(config.validate().unwrap_err().field, "max_objects");
    }
}
