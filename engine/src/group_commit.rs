//! Group commit: gather the writes of many messages into one statement and one commit.
//!
//! Policy (the shape of River's batch completer): a batch is *due* when `max` items wait, or
//! when its oldest item has waited `linger`, whichever comes first. The relay's marks, the
//! ingester's stores and replay's sent marks all use it, so each path pays one PostgreSQL
//! commit (one fsync) per batch instead of one per message. What a batch holds is not yet
//! durable: callers bound it (and document the bound) and never acknowledge its items to
//! anyone before the batch has committed.

use std::time::Duration;

use tokio::time::Instant;

/// Items waiting for one write.
#[derive(Debug)]
pub struct Batch<T> {
    items: Vec<T>,
    first_at: Option<Instant>,
    max: usize,
    linger: Duration,
}

impl<T> Batch<T> {
    /// `max` is clamped to at least 1.
    pub fn new(max: usize, linger: Duration) -> Self {
        let max = max.max(1);
        Self { items: Vec::with_capacity(max.min(4096)), first_at: None, max, linger }
    }

    pub fn push(&mut self, item: T) {
        if self.items.is_empty() {
            self.first_at = Some(Instant::now());
        }
        self.items.push(item);
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// `max` items are waiting.
    pub fn is_full(&self) -> bool {
        self.items.len() >= self.max
    }

    /// Full, or its oldest item has lingered long enough.
    pub fn is_due(&self, now: Instant) -> bool {
        self.is_full() || self.deadline().is_some_and(|d| now >= d)
    }

    /// When the batch becomes due by age; `None` while empty (nothing to wait for).
    pub fn deadline(&self) -> Option<Instant> {
        self.first_at.map(|t| t + self.linger)
    }

    /// Empties the batch, handing over its items in the order they were pushed.
    pub fn take(&mut self) -> Vec<T> {
        self.first_at = None;
        std::mem::replace(&mut self.items, Vec::with_capacity(self.max.min(4096)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_batch_is_due_when_full_or_when_its_oldest_item_has_lingered() {
        let mut b = Batch::new(3, Duration::from_millis(5));
        assert!(!b.is_due(Instant::now()) && b.deadline().is_none());
        b.push(1);
        b.push(2);
        assert!(!b.is_due(Instant::now()));
        tokio::time::advance(Duration::from_millis(5)).await;
        assert!(b.is_due(Instant::now()), "the oldest item lingered 5 ms");
        assert_eq!(b.take(), vec![1, 2]);
        assert!(b.is_empty() && b.deadline().is_none());
        for i in 0..3 {
            b.push(i);
        }
        assert!(b.is_full() && b.is_due(Instant::now()), "full before any time passed");
    }

    #[test]
    fn a_batch_of_zero_is_a_batch_of_one() {
        let mut b = Batch::new(0, Duration::from_secs(1));
        assert_eq!(b.max(), 1);
        b.push("x");
        assert!(b.is_full());
    }
}
