//! The memory limiter at work: every `check_interval` the process's resident memory
//! is sampled and the limiter's state moved; above the hard limit the in-memory
//! sending queues of the limiter's pipelines are shed, oldest batches first.

use std::sync::Arc;

use opscope_exporters::queue::shedding::{self, SheddableQueue};
use opscope_model::memory::MemoryAccount;
use opscope_processors::memory_limiter::{
    MemoryLimiter, MemoryLimiterConfig, MemoryState, SystemMemory,
};
use tokio_util::sync::CancellationToken;

use crate::self_telemetry::MemoryLimiterMetrics;
use opscope_model::config::FieldError;

const MIB: u64 = 1024 * 1024;

/// Builds the limiter of `processors.<id>`: resolves percentage limits against the
/// memory the process may use, and takes the resident size now, before any data is
/// held, as the baseline the held bytes are added to.
pub fn build_limiter(
    id: &str,
    settings: &MemoryLimiterConfig,
    system: &SystemMemory,
    account: &MemoryAccount,
) -> Result<MemoryLimiter, FieldError> {
    let at = |field: &str| format!("processors.{id}.{field}");
    let total = if settings.needs_total_memory() {
        system.total().map_err(|error| {
            FieldError::new(
                at("limit_percentage"),
                format!("cannot tell the memory available: {error}"),
            )
        })?
    } else {
        0
    };
    let limits = settings
        .limits(total)
        .map_err(|error| error.within(&format!("processors.{id}")))?;
    let baseline = system.resident_bytes().unwrap_or_else(|error| {
        tracing::warn!(processor = %id, %error, "cannot read the resident memory; counting held data only");
        0
    });
    if baseline >= limits.soft {
        return Err(FieldError::new(
            at("limit_mib"),
            format!(
                "the soft limit ({} MiB) is below what opscope uses holding no data ({} MiB)",
                limits.soft / MIB,
                baseline / MIB
            ),
        ));
    }
    Ok(MemoryLimiter::new(
        limits,
        settings.check_interval,
        account.clone(),
        baseline,
    ))
}

/// Samples memory for one limiter and enforces its hard limit.
pub struct MemoryWatch {
    pub id: String,
    pub limiter: MemoryLimiter,
    pub system: SystemMemory,
    /// The in-memory sending queues of the pipelines that list the limiter.
    pub queues: Vec<Arc<dyn SheddableQueue>>,
    pub metrics: MemoryLimiterMetrics,
}

impl MemoryWatch {
    pub async fn run(self, stop: CancellationToken) {
        let limits = self.limiter.limits();
        self.metrics.soft_limit.set(gauge(limits.soft));
        self.metrics.hard_limit.set(gauge(limits.hard));
        let mut ticks = tokio::time::interval(self.limiter.check_interval());
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => self.check(),
                () = stop.cancelled() => return,
            }
        }
    }

    fn check(&self) {
        let resident = match self.system.resident_bytes() {
            Ok(resident) => resident,
            Err(error) => {
                tracing::debug!(processor = %self.id, %error, "cannot read the resident memory");
                0
            }
        };
        let seen = self.limiter.observe(resident);
        self.metrics.resident.set(gauge(resident));
        self.metrics
            .accounted
            .set(gauge(self.limiter.account().bytes()));
        self.metrics.state.set(seen.after.gauge_value());
        if seen.after != seen.before {
            self.log_change(seen.before, seen.after, seen.usage);
        }
        if seen.after == MemoryState::Hard {
            self.shed(seen.usage);
        }
        if seen.after != MemoryState::Normal {
            crate::allocator::return_free_memory();
        }
    }

    /// Drops queued batches worth what the usage exceeds the soft limit by: the
    /// resident size lags, so the held bytes are what shedding is measured in.
    fn shed(&self, usage: u64) {
        let excess = usage.saturating_sub(self.limiter.limits().soft);
        let dropped = shedding::shed(&self.queues, excess);
        if dropped.batches > 0 {
            tracing::error!(processor = %self.id, batches = dropped.batches, items = dropped.items,
                bytes = dropped.bytes, usage_mib = usage / MIB,
                "memory above the hard limit: dropped {} queued items, oldest first", dropped.items);
        } else {
            tracing::error!(processor = %self.id, usage_mib = usage / MIB,
                "memory above the hard limit and no in-memory queue holds data to drop");
        }
    }

    fn log_change(&self, before: MemoryState, after: MemoryState, usage: u64) {
        let limits = self.limiter.limits();
        let (soft_mib, hard_mib, usage_mib) = (limits.soft / MIB, limits.hard / MIB, usage / MIB);
        if after > before {
            tracing::warn!(processor = %self.id, state = after.name(), usage_mib, soft_mib, hard_mib,
                "memory above the {} limit: receivers refuse new data", after.name());
        } else {
            tracing::info!(processor = %self.id, state = after.name(), usage_mib, soft_mib, hard_mib,
                "memory back below the {} limit", before.name());
        }
    }
}

fn gauge(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(limit_mib: u64) -> MemoryLimiterConfig {
        MemoryLimiterConfig {
            limit_mib: Some(limit_mib),
            spike_limit_mib: Some(limit_mib / 4),
            ..Default::default()
        }
    }

    #[test]
    fn a_limit_below_the_idle_footprint_is_a_config_error() {
        let account = MemoryAccount::default();
        let system = SystemMemory::default();
        let error = build_limiter("memory_limiter", &settings(1), &system, &account)
            .err()
            .unwrap();
        assert_eq!(error.field, "processors.memory_limiter.limit_mib");
        assert!(error.message.contains("holding no data"), "{error}");
        let limiter = build_limiter("memory_limiter", &settings(4096), &system, &account).unwrap();
        assert_eq!(limiter.limits().hard, 4096 * MIB);
    }
}
