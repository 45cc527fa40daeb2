//! Giving freed memory back to the kernel when the memory limiter asks for it.
//!
//! opscope runs on mimalloc (see `main.rs`), which keeps freed pages with the thread
//! that allocated them and returns them to the kernel lazily, when that thread
//! allocates again. The memory limiter reads the resident size: above its soft limit
//! receivers refuse data, the workers go idle, nothing is allocated, and the pages of
//! data long delivered would stay resident and keep the refusal going. A thread can
//! only collect its own pages, so a request is raised for all of them and each
//! runtime worker answers it the next time it goes idle.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Requests raised so far; a worker that has answered fewer collects.
static REQUESTS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static ANSWERED: Cell<u64> = const { Cell::new(0) };
}

/// Returns this thread's free memory now and asks every runtime worker to do the same.
pub fn return_free_memory() {
    REQUESTS.fetch_add(1, Ordering::Relaxed);
    answer_request();
}

/// For the runtime's `on_thread_park`: collects once per request raised, which
/// happens only while memory is above the soft limit, so idle workers cost one
/// atomic load otherwise.
pub fn on_worker_idle() {
    answer_request();
}

fn answer_request() {
    let requested = REQUESTS.load(Ordering::Relaxed);
    if ANSWERED.get() == requested {
        return;
    }
    ANSWERED.set(requested);
    // SAFETY: mi_collect frees pages of the calling thread's heap that hold no live
    // blocks, and purges the arenas; it has no preconditions and touches no memory
    // the program still owns. Without mimalloc as the allocator it finds nothing.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_answers_a_request_once() {
        return_free_memory();
        let requested = REQUESTS.load(Ordering::Relaxed);
        assert_eq!(ANSWERED.get(), requested);
        std::thread::spawn(move || {
            assert_ne!(ANSWERED.get(), requested);
            on_worker_idle();
            assert!(ANSWERED.get() >= requested);
        })
        .join()
        .unwrap();
    }
}
