//! Counters the replay publisher keeps, for its logs and a Prometheus `/metrics`.
//!
//! Policy: plain atomics written on the send path and read by anyone holding the `Arc`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use serde::Serialize;

#[derive(Debug, Default)]
pub struct ReplayStats {
    /// Items marked sent after their confirm.
    pub sent: AtomicU64,
    /// Items marked failed (returned, nacked, missing exchange, bad message).
    pub failed: AtomicU64,
    /// Of the failed, those the broker returned as unroutable.
    pub returned: AtomicU64,
    /// Plans this instance is sending right now.
    pub plans_running: AtomicU64,
    /// Plans paused automatically because replayed messages died again.
    pub auto_paused: AtomicU64,
    /// Publishes with no answer in time (or whose channel went away): their items are marked
    /// unconfirmed, never failed, and sent again under the same message id.
    pub unconfirmed: AtomicU64,
    pub connected: AtomicBool,
    /// Whether RabbitMQ blocks the publisher's connection (an alarm), and connections left unclosed.
    pub blocks: std::sync::Arc<crate::amqp::blocked::BlockState>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplayCounts {
    pub sent: u64,
    pub failed: u64,
    pub returned: u64,
    pub unconfirmed: u64,
    pub plans_running: u64,
    pub auto_paused: u64,
    pub connected: bool,
    pub blocked: Option<crate::amqp::blocked::Block>,
    pub unclosed: u64,
}

impl ReplayStats {
    pub fn snapshot(&self) -> ReplayCounts {
        ReplayCounts {
            sent: self.sent.load(Relaxed),
            failed: self.failed.load(Relaxed),
            returned: self.returned.load(Relaxed),
            unconfirmed: self.unconfirmed.load(Relaxed),
            plans_running: self.plans_running.load(Relaxed),
            auto_paused: self.auto_paused.load(Relaxed),
            connected: self.connected.load(Relaxed),
            blocked: self.blocks.current(),
            unclosed: self.blocks.unclosed(),
        }
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}
