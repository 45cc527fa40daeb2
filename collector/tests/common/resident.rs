//! The agent's resident size, read from `/proc`, once or sampled in the background.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

/// `VmRSS` of process `pid` in bytes; 0 once it is gone.
pub fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Samples a process's resident size every 10 ms until dropped; `peak` is the
/// largest seen.
pub struct RssSampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl RssSampler {
    pub fn start(pid: u32) -> Self {
        let peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = thread::spawn({
            let (peak, stop) = (Arc::clone(&peak), Arc::clone(&stop));
            move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(resident_bytes(pid), Ordering::Relaxed);
                    thread::sleep(Duration::from_millis(10));
                }
            }
        });
        Self {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
