//! Giving freed memory back to the kernel when the agent goes idle.
//!
//! opscope runs on mimalloc (see `main.rs`), which keeps freed pages with the thread
//! that allocated them and returns them to the kernel lazily: after its purge delay,
//! but only when that thread allocates or frees again. A runtime worker that goes idle
//! after a burst allocates nothing more, so the pages of data long delivered would
//! stay resident for as long as the agent is idle (hundreds of MiB after a burst of
//! large requests), and above the memory limiter's soft limit would keep it refusing.
//! A thread can only collect its own pages, so each runtime worker collects each time
//! it goes idle; under load a worker is seldom idle, and then there is little to
//! collect.

/// For the runtime's `on_thread_park`: returns what this worker freed to the kernel.
pub fn on_worker_idle() {
    collect();
}

/// Returns the calling thread's free memory now (the memory limiter, above its soft limit).
pub fn return_free_memory() {
    collect();
}

fn collect() {
    // SAFETY: mi_collect frees pages of the calling thread's heap that hold no live
    // blocks, and purges the arenas; it has no preconditions and touches no memory
    // the program still owns. Without mimalloc as the allocator it finds nothing.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
