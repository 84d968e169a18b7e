//! The replay publisher's knobs: polling, leases, window, batches and mark flushing.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct PublisherConfig {
    /// How often to look for due plans when idle.
    pub poll: Duration,
    /// How long a plan stays ours without a renewal.
    pub lease: Duration,
    /// How often a sender renews its lease and notices pause, cancel and the auto-pause brake.
    pub control_every: Duration,
    pub confirm_timeout: Duration,
    /// Publishes awaiting their confirm at once, per plan (an ordered plan has 1).
    pub window: usize,
    /// Confirm channels a plan is sent on. One by default: an unordered plan then still arrives
    /// in send order (as a shovel's would); with more, its messages may interleave. An ordered
    /// plan (one message in flight, or one per key) keeps its order on any number.
    pub channels: usize,
    /// Items read per query (read ahead while the previous batch is sent, never the whole plan).
    pub batch: i64,
    /// Confirmed items marked in one statement, at most; also the most marks ever unflushed.
    pub mark_batch: usize,
    /// How long the oldest confirmed item waits for its group to be marked, at most.
    pub mark_flush: Duration,
    /// Plans sent at once by this instance.
    pub max_plans: usize,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(1),
            lease: Duration::from_secs(30),
            control_every: Duration::from_millis(500),
            confirm_timeout: Duration::from_secs(15),
            window: 64,
            channels: crate::publish::DEFAULT_CHANNELS,
            batch: 256,
            mark_batch: 256,
            mark_flush: Duration::from_millis(5),
            max_plans: 4,
        }
    }
}
