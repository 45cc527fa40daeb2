//! The `memory_limiter` processor: keeps opscope under a memory limit by refusing new
//! data above a soft limit and, as a last resort, dropping queued data above a hard
//! one. Admission is decided where receivers hand data to a pipeline (before it is
//! queued), so in the processor chain the limiter only passes data on.

pub mod config;
pub mod state;
pub mod system;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use config::MemoryLimiterConfig;
pub use state::{Limits, MemoryState};
pub use system::{SystemMemory, SystemMemoryError};

use opscope_model::memory::MemoryAccount;

use crate::processor::Processor;

/// One configured limiter, shared by the receivers that consult it and the task that
/// samples memory.
#[derive(Clone)]
pub struct MemoryLimiter(Arc<Inner>);

struct Inner {
    limits: Limits,
    check_interval: Duration,
    account: MemoryAccount,
    /// Resident memory before any data was held: code, runtime, tables, listeners.
    baseline: u64,
    state: AtomicU8,
    /// The last resident memory sampled.
    resident: AtomicU64,
}

/// What one sample of memory found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub before: MemoryState,
    pub after: MemoryState,
    pub usage: u64,
}

impl MemoryLimiter {
    pub fn new(
        limits: Limits,
        check_interval: Duration,
        account: MemoryAccount,
        baseline: u64,
    ) -> Self {
        Self(Arc::new(Inner {
            limits,
            check_interval,
            account,
            baseline,
            state: AtomicU8::new(MemoryState::Normal as u8),
            resident: AtomicU64::new(baseline),
        }))
    }

    pub fn limits(&self) -> Limits {
        self.0.limits
    }

    pub fn check_interval(&self) -> Duration {
        self.0.check_interval
    }

    pub fn account(&self) -> &MemoryAccount {
        &self.0.account
    }

    pub fn state(&self) -> MemoryState {
        MemoryState::from_gauge_value(self.0.state.load(Ordering::Relaxed))
    }

    /// Memory in use as the limiter counts it: the larger of the data held (plus the
    /// baseline) and the last resident size sampled. The resident size is what the
    /// kernel enforces, but it is sampled once per interval and keeps pages the
    /// allocator has not returned; the held bytes follow every request but count only
    /// the data's decoded size, not allocation overhead, connections or encoding
    /// buffers. Each covers the other's blind spot, and the larger never underestimates.
    pub fn usage(&self) -> u64 {
        let held = self.0.account.bytes().saturating_add(self.0.baseline);
        held.max(self.0.resident.load(Ordering::Relaxed))
    }

    /// Whether a request of `incoming` bytes may enter: not while above the soft limit,
    /// nor when it would take the held data over it before the next sample notices.
    pub fn admits(&self, incoming: u64) -> bool {
        self.state() == MemoryState::Normal
            && self.usage().saturating_add(incoming) < self.0.limits.soft
    }

    /// Takes a new resident size sample and moves the state.
    pub fn observe(&self, resident: u64) -> Observation {
        self.0.resident.store(resident, Ordering::Relaxed);
        let usage = self.usage();
        let before = self.state();
        let after = self.0.limits.next_state(before, usage);
        self.0.state.store(after as u8, Ordering::Relaxed);
        Observation {
            before,
            after,
            usage,
        }
    }
}

/// In the chain the limiter has nothing left to do: it admitted the data already.
impl<T> Processor<T> for MemoryLimiter {
    fn process(&mut self, data: T, _now: Instant, out: &mut Vec<T>) {
        out.push(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn limiter() -> MemoryLimiter {
        let limits = Limits {
            soft: 80 * MIB,
            hard: 100 * MIB,
        };
        MemoryLimiter::new(
            limits,
            Duration::from_secs(1),
            MemoryAccount::default(),
            10 * MIB,
        )
    }

    #[test]
    fn held_data_is_refused_at_the_soft_limit_before_any_sample() {
        let limiter = limiter();
        assert!(limiter.admits(60 * MIB));
        let _held = limiter.account().hold(60 * MIB);
        assert_eq!(limiter.usage(), 70 * MIB);
        assert!(limiter.admits(5 * MIB));
        assert!(!limiter.admits(10 * MIB), "would reach the soft limit");
        assert_eq!(limiter.state(), MemoryState::Normal);
    }

    #[test]
    fn resident_memory_above_the_limits_moves_the_state() {
        let limiter = limiter();
        let soft = limiter.observe(85 * MIB);
        assert_eq!(
            (soft.before, soft.after),
            (MemoryState::Normal, MemoryState::Soft)
        );
        assert!(!limiter.admits(1));
        assert_eq!(limiter.observe(120 * MIB).after, MemoryState::Hard);
        assert_eq!(limiter.observe(90 * MIB).after, MemoryState::Soft);
        assert_eq!(limiter.observe(20 * MIB).after, MemoryState::Normal);
        assert!(limiter.admits(1));
    }

    #[test]
    fn held_bytes_count_even_when_the_resident_size_is_low() {
        let limiter = limiter();
        let held = limiter.account().hold(95 * MIB);
        assert_eq!(limiter.observe(30 * MIB).after, MemoryState::Hard);
        drop(held);
        assert_eq!(limiter.observe(30 * MIB).after, MemoryState::Normal);
    }
}
