//! Heap bytes the correlator holds per tracked object at a steady load: 10 000
//! objects' reconcile traces (the harness's `steady_10k` workload, 10 000 spans per
//! second of event time for 30 s) tagged and correlated in process, then the
//! correlator dropped and the bytes it freed counted. And per idle object: the same
//! load, then five minutes of event time without events (past every detector's
//! window, short of the idle expiry), as most of a big cluster's objects are.
//!
//! `cargo run --release -p opscope-bench --example tracked_object_memory`
//!
//! Counts the bytes asked of the allocator, not its own overhead.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use opscope_processors::CorrelatorEvents;
use opscope_processors::correlator::{Correlator, CorrelatorConfig};
use opscope_processors::tagger::{OperatorTagger, TaggerConfig};
use opscope_workload::{OperatorWorkload, WorkloadConfig};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const OBJECTS: usize = 10_000;
const SECONDS: u64 = 30;
/// Requests per second of event time, of 200 spans each: 10 000 spans per second.
const REQUESTS_PER_SECOND: u64 = 50;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (tracked, busy) = measure(false)?;
    println!("{tracked} tracked objects at a steady load: {busy} bytes per object");
    let (tracked, idle) = measure(true)?;
    println!("{tracked} tracked objects idle for five minutes: {idle} bytes per object");
    Ok(())
}

/// Tracked objects and the bytes the correlator held per object, after the load or,
/// with `idle`, five minutes of event time after it.
fn measure(idle: bool) -> Result<(usize, usize), Box<dyn std::error::Error>> {
    let start = opscope_model::timestamp::now_unix_nanos();
    let config = WorkloadConfig {
        objects: OBJECTS,
        pods: 100,
        ..WorkloadConfig::default()
    };
    let mut workload = OperatorWorkload::new(config, start)?;
    let mut tagger = OperatorTagger::new(&TaggerConfig::default());
    let mut correlator = Correlator::new(CorrelatorConfig::default());
    let step = 1_000_000_000 / REQUESTS_PER_SECOND;
    let mut events = Vec::new();
    for request in 1..=SECONDS * REQUESTS_PER_SECOND {
        let (mut traces, _) = workload.traces(200, start + request * step);
        tagger.tag_traces(&mut traces);
        traces.correlator_events(&mut events);
        for event in events.drain(..) {
            correlator.observe(event);
        }
        correlator.advance(correlator.watermark());
    }
    if idle {
        correlator.advance(correlator.watermark() + 5 * 60 * 1_000_000_000);
    }
    let tracked = correlator.stats().tracked_objects;
    let before = LIVE.load(Ordering::Relaxed);
    drop(correlator);
    let held = before.saturating_sub(LIVE.load(Ordering::Relaxed));
    Ok((tracked, held / tracked.max(1)))
}
