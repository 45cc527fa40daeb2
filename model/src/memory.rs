//! The bytes of telemetry opscope holds in memory, counted where data enters (a
//! pipeline's input) and released where it leaves (delivered, dropped, or written to
//! a durable queue), so the memory limiter sees data before the allocator does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A shared byte counter; a sub-account (one sending queue, say) also counts in
/// every account above it.
#[derive(Clone)]
pub struct MemoryAccount(Arc<Node>);

struct Node {
    bytes: AtomicU64,
    parent: Option<MemoryAccount>,
    /// False when no memory limiter reads the account: sizing data would be wasted work.
    counting: bool,
}

impl Default for MemoryAccount {
    fn default() -> Self {
        Self::new(true)
    }
}

impl MemoryAccount {
    fn new(counting: bool) -> Self {
        Self(Arc::new(Node {
            bytes: AtomicU64::new(0),
            parent: None,
            counting,
        }))
    }

    /// An account that counts nothing, for a process with no memory limiter.
    pub fn not_counting() -> Self {
        Self::new(false)
    }

    /// The size `measure` gives, or 0 without measuring when the account counts nothing.
    pub fn size_of(&self, measure: impl FnOnce() -> u64) -> u64 {
        if self.0.counting { measure() } else { 0 }
    }

    /// An account whose bytes also count in this one.
    pub fn sub_account(&self) -> Self {
        Self(Arc::new(Node {
            bytes: AtomicU64::new(0),
            parent: Some(self.clone()),
            counting: self.0.counting,
        }))
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.0.bytes.load(Ordering::Relaxed)
    }

    /// Counts `bytes` until the returned hold is released or dropped.
    pub fn hold(&self, bytes: u64) -> MemoryHold {
        self.add(bytes);
        MemoryHold {
            account: Some(self.clone()),
            bytes,
        }
    }

    fn add(&self, bytes: u64) {
        let mut node = Some(self);
        while let Some(account) = node {
            account.0.bytes.fetch_add(bytes, Ordering::Relaxed);
            node = account.0.parent.as_ref();
        }
    }

    fn release(&self, bytes: u64) {
        let mut node = Some(self);
        while let Some(account) = node {
            // Saturating: a miscount must not wrap into "memory full forever".
            let _ = account
                .0
                .bytes
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                    Some(held.saturating_sub(bytes))
                });
            node = account.0.parent.as_ref();
        }
    }
}

/// Bytes counted in an account for as long as the data they stand for is held;
/// dropping the hold releases them, so data lost on any path is never counted forever.
#[derive(Default)]
pub struct MemoryHold {
    account: Option<MemoryAccount>,
    bytes: u64,
}

impl MemoryHold {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Takes over the bytes of `other` (which must count in the same account).
    pub fn absorb(&mut self, mut other: MemoryHold) {
        if self.account.is_none() {
            self.account = other.account.take();
        }
        self.bytes = self.bytes.saturating_add(std::mem::take(&mut other.bytes));
    }

    /// Releases up to `bytes` of the hold now; the rest stays held.
    pub fn release(&mut self, bytes: u64) {
        let released = bytes.min(self.bytes);
        if let Some(account) = &self.account {
            account.release(released);
        }
        self.bytes -= released;
    }
}

impl Drop for MemoryHold {
    fn drop(&mut self) {
        self.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_count_in_every_account_above_until_released_or_dropped() {
        let process = MemoryAccount::default();
        let queue = process.sub_account();
        let first = queue.hold(100);
        let mut second = process.hold(50);
        assert_eq!((process.bytes(), queue.bytes()), (150, 100));
        second.release(20);
        assert_eq!(process.bytes(), 130);
        second.release(1000);
        assert_eq!((process.bytes(), second.bytes()), (100, 0));
        drop(first);
        assert_eq!((process.bytes(), queue.bytes()), (0, 0));
    }

    #[test]
    fn absorbed_holds_are_released_together() {
        let account = MemoryAccount::default();
        let mut pipeline = MemoryHold::default();
        pipeline.absorb(account.hold(10));
        pipeline.absorb(account.hold(5));
        assert_eq!(pipeline.bytes(), 15);
        drop(pipeline);
        assert_eq!(account.bytes(), 0);
    }
}
