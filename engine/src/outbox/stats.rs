//! Counters the relay keeps while it runs, for the heartbeat row and a Prometheus `/metrics`.
//!
//! Policy: plain atomics, written by the relay and read by anyone holding the `Arc`; no lock
//! is ever taken on the publish path. The confirm-latency histogram has fixed buckets so a
//! scrape is a handful of loads, and its counts are kept per bucket (not cumulative) so one
//! observation is one increment; [`LatencySnapshot::cumulative`] gives Prometheus' form.

use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
    time::Duration,
};

/// Upper bounds, in seconds, of the confirm-latency buckets; a last `+Inf` bucket follows.
pub const LATENCY_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

#[derive(Debug, Default)]
pub struct RelayStats {
    /// Rows marked published after their confirm.
    pub published: AtomicU64,
    /// Attempts the broker refused: returned, nacked, bad row, missing exchange.
    pub failed_attempts: AtomicU64,
    /// Rows that ended `failed` (max attempts reached, or a bad row).
    pub failed_final: AtomicU64,
    /// Publishes the broker returned as unroutable (also counted in `failed_attempts`).
    pub returned: AtomicU64,
    /// Publishes awaiting their confirm right now; never above the window.
    pub in_flight: AtomicU64,
    /// Confirmed or failed publishes whose marks are not committed yet (waiting or flushing).
    pub unflushed_marks: AtomicU64,
    /// Mark flushes committed (each one statement, one commit, many rows).
    pub mark_flushes: AtomicU64,
    /// Publishes with no answer in time or whose channel went away: they may have been
    /// delivered, so they are not attempts; their rows are re-sent when their lease ends.
    pub unconfirmed: AtomicU64,
    /// Whether the relay has a broker channel in confirm mode right now.
    pub connected: AtomicBool,
    /// Whether RabbitMQ blocks the relay's connection (an alarm), and connections left unclosed.
    pub blocks: std::sync::Arc<crate::amqp::blocked::BlockState>,
    /// Whether this instance publishes the source now (a mapped table: holds its relay lock;
    /// false while standing by for another relay).
    pub active: AtomicBool,
    latency: Latency,
}

#[derive(Debug, Default)]
struct Latency {
    /// One slot per bucket in [`LATENCY_BUCKETS`], then `+Inf`.
    counts: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

/// A consistent-enough copy of the histogram (each field read once, relaxed).
#[derive(Debug, Clone, PartialEq)]
pub struct LatencySnapshot {
    /// Per-bucket counts, same order as [`LATENCY_BUCKETS`], then `+Inf`.
    pub counts: Vec<u64>,
    pub sum_seconds: f64,
    pub count: u64,
}

impl LatencySnapshot {
    /// `(le, count in this bucket alone)` pairs; the last `le` is `+Inf`.
    pub fn buckets(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        LATENCY_BUCKETS.iter().copied().chain([f64::INFINITY]).zip(self.counts.iter().copied())
    }

    /// `(le, cumulative count)` pairs as Prometheus exposes them; the last `le` is `+Inf`.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        let bounds = LATENCY_BUCKETS.iter().copied().chain([f64::INFINITY]);
        bounds
            .zip(&self.counts)
            .map(|(le, c)| {
                acc += c;
                (le, acc)
            })
            .collect()
    }
}

impl RelayStats {
    pub fn observe_confirm_latency(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let slot = LATENCY_BUCKETS.iter().position(|le| secs <= *le).unwrap_or(LATENCY_BUCKETS.len());
        self.latency.counts[slot].fetch_add(1, Relaxed);
        self.latency.sum_micros.fetch_add(d.as_micros().min(u64::MAX as u128) as u64, Relaxed);
    }

    pub fn confirm_latency(&self) -> LatencySnapshot {
        let counts: Vec<u64> = self.latency.counts.iter().map(|c| c.load(Relaxed)).collect();
        let count = counts.iter().sum();
        LatencySnapshot { counts, sum_seconds: self.latency.sum_micros.load(Relaxed) as f64 / 1e6, count }
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_land_in_the_first_bucket_that_holds_them() {
        let s = RelayStats::default();
        s.observe_confirm_latency(Duration::from_micros(500));
        s.observe_confirm_latency(Duration::from_millis(3));
        s.observe_confirm_latency(Duration::from_millis(5));
        s.observe_confirm_latency(Duration::from_secs(60));
        let snap = s.confirm_latency();
        assert_eq!(snap.count, 4);
        assert_eq!(snap.counts[0], 1);
        assert_eq!(snap.counts[2], 2, "3 ms and exactly 5 ms both belong to le=0.005");
        assert_eq!(*snap.counts.last().unwrap(), 1);
        assert!((snap.sum_seconds - 60.0085).abs() < 1e-6, "{}", snap.sum_seconds);
    }

    #[test]
    fn cumulative_counts_end_with_the_total() {
        let s = RelayStats::default();
        for ms in [1, 20, 20, 700] {
            s.observe_confirm_latency(Duration::from_millis(ms));
        }
        let c = s.confirm_latency().cumulative();
        assert_eq!(c.len(), LATENCY_BUCKETS.len() + 1);
        assert_eq!(c[4], (0.025, 3));
        assert_eq!(c.last().unwrap().1, 4);
        assert!(c.last().unwrap().0.is_infinite());
    }
}
