//! Counters the replay publisher keeps, for its logs and a Prometheus `/metrics`.
//!
//! Policy: plain atomics written on the send path and read by anyone holding the `Arc`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use serde::Serialize;

#[derive(Debug, Default)]
pub struct ReplayStats {
    /// Items marked sent after their confirm.
    pub sent: AtomicU64,
    /// Items marked failed (returned, nacked, no confirm, missing exchange, bad message).
    pub failed: AtomicU64,
    /// Of the failed, those the broker returned as unroutable.
    pub returned: AtomicU64,
    /// Plans this instance is sending right now.
    pub plans_running: AtomicU64,
    /// Plans paused automatically because replayed messages died again.
    pub auto_paused: AtomicU64,
    pub connected: AtomicBool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReplayCounts {
    pub sent: u64,
    pub failed: u64,
    pub returned: u64,
    pub plans_running: u64,
    pub auto_paused: u64,
    pub connected: bool,
}

impl ReplayStats {
    pub fn snapshot(&self) -> ReplayCounts {
        ReplayCounts {
            sent: self.sent.load(Relaxed),
            failed: self.failed.load(Relaxed),
            returned: self.returned.load(Relaxed),
            plans_running: self.plans_running.load(Relaxed),
            auto_paused: self.auto_paused.load(Relaxed),
            connected: self.connected.load(Relaxed),
        }
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}
