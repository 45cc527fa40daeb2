//! The file descriptors the process's data servers may hold as connections: what
//! the descriptor limit leaves after a reserve for the files tailed, the outgoing
//! connections and the health and telemetry endpoints, so that a flood of
//! connections to the data servers cannot take the descriptors those need.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Kept back from the data servers: at least this many descriptors...
const MIN_RESERVE: usize = 256;
/// ...or this share of the limit, whichever is more, but at most half of it.
const RESERVE_DIVISOR: usize = 8;

pub struct DescriptorBudget {
    limit: usize,
    used: AtomicUsize,
}

/// One descriptor of the budget, given back on drop.
pub struct Descriptor(&'static DescriptorBudget);

impl Drop for Descriptor {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::AcqRel);
    }
}

impl DescriptorBudget {
    /// The budget of this process, read from its descriptor limit on first use.
    pub fn process() -> &'static Self {
        static BUDGET: OnceLock<DescriptorBudget> = OnceLock::new();
        BUDGET.get_or_init(|| Self::within(descriptor_limit()))
    }

    fn within(descriptor_limit: usize) -> Self {
        let reserve = (descriptor_limit / RESERVE_DIVISOR)
            .max(MIN_RESERVE)
            .min(descriptor_limit / 2);
        Self {
            limit: descriptor_limit - reserve,
            used: AtomicUsize::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A descriptor for one more connection, unless the budget is spent.
    pub fn take(&'static self) -> Option<Descriptor> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used < self.limit).then_some(used + 1)
            })
            .ok()
            .map(|_| Descriptor(self))
    }
}

/// The soft `RLIMIT_NOFILE` of the process.
fn descriptor_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) only writes the limit into the struct it is given, which
    // lives for the whole call.
    let result = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if result != 0 {
        // Linux's usual default, should the limit be unreadable.
        return 1024;
    }
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_an_eighth_of_the_limit_and_at_least_256_descriptors() {
        assert_eq!(DescriptorBudget::within(1024).limit(), 768);
        assert_eq!(DescriptorBudget::within(65536).limit(), 57344);
        assert_eq!(DescriptorBudget::within(300).limit(), 150);
    }

    #[test]
    fn descriptors_are_given_back_on_drop() {
        let budget: &'static DescriptorBudget = Box::leak(Box::new(DescriptorBudget {
            limit: 2,
            used: AtomicUsize::new(0),
        }));
        let first = budget.take().expect("room for one");
        let _second = budget.take().expect("room for two");
        assert!(budget.take().is_none(), "the budget is spent");
        drop(first);
        assert!(budget.take().is_some());
    }
}
