//! The group-commit mark flusher every confirmed-publish path shares (relay, replay).
//!
//! Policy (River's batch completer, inside the publishing loop):
//! - a confirm does not wait for its own commit: its mark joins a group written in one
//!   transaction when `mark_batch` marks wait or the oldest has waited `mark_flush`;
//! - at most one flush is in flight, in a task of its own (a query progresses only while
//!   polled, and the loop, busy publishing, polls between publishes only);
//! - no more than `mark_batch` marks are ever unflushed (waiting plus flushing): the loop takes
//!   no confirm while [`Flusher::has_room`] is false;
//! - **the crash bound**: the loop publishes only while [`Flusher::may_publish`] holds, so
//!   publishes awaiting their confirm plus confirmed-but-unmarked ones never pass
//!   [`duplicate_bound`] = `window + mark_batch − 1`: what a `kill -9` can send twice. Window 1
//!   with `mark_batch` 1 (the strict mode) re-sends at most one message;
//! - **one retry policy**: a flush that fails is tried [`ATTEMPTS`] times in all (a deadlock, a
//!   connection dropped by a restart), then given up: its marks are lost, their rows or items
//!   stay unmarked and are sent again (at-least-once), exactly as after a crash.

use std::{future::Future, time::Duration};

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::group_commit::Batch;

/// Attempts per flush before its marks are given up.
pub const ATTEMPTS: u32 = 3;

/// What a `kill -9` can re-send: every publish awaiting its confirm plus every confirmed
/// message whose mark has not committed, which [`Flusher::may_publish`] keeps at or under this.
pub fn duplicate_bound(window: usize, mark_batch: usize) -> usize {
    window.max(1) + mark_batch.max(1) - 1
}

/// Where a path's marks go: one transaction per call.
pub trait MarkWriter: Clone + Send + Sync + 'static {
    type Mark: Send + Sync + 'static;
    /// What a committed flush reports (rows changed, per-row outcomes).
    type Written: Send + 'static;

    fn write<'a>(&'a self, marks: &'a [Self::Mark]) -> impl Future<Output = Result<Self::Written, String>> + Send + 'a;

    /// Called once per flush after its last attempt, committed or not.
    fn done(&self, _marks: &[Self::Mark]) {}
}

/// One flush's result, for the path to account.
pub struct Flushed<M, W> {
    pub marks: Vec<M>,
    pub result: Result<W, String>,
    pub attempts: u32,
    pub took: Duration,
}

pub struct Flusher<W: MarkWriter> {
    writer: W,
    waiting: Batch<W::Mark>,
    flushing: Option<BoxFuture<'static, Flushed<W::Mark, W::Written>>>,
    flushing_len: usize,
    bound: usize,
    /// Flushes done and the time they took (closing log lines, benches).
    pub flushes: u64,
    pub flush_time: Duration,
}

impl<W: MarkWriter> Flusher<W> {
    pub fn new(writer: W, window: usize, mark_batch: usize, mark_flush: Duration) -> Self {
        Self {
            writer,
            waiting: Batch::new(mark_batch, mark_flush),
            flushing: None,
            flushing_len: 0,
            bound: duplicate_bound(window, mark_batch),
            flushes: 0,
            flush_time: Duration::ZERO,
        }
    }

    pub fn push(&mut self, mark: W::Mark) {
        self.waiting.push(mark);
    }

    /// Marks not committed yet: waiting plus flushing.
    pub fn unflushed(&self) -> usize {
        self.waiting.len() + self.flushing_len
    }

    /// Whether one more confirm may be taken without passing `mark_batch` unflushed marks.
    pub fn has_room(&self) -> bool {
        self.unflushed() < self.waiting.max()
    }

    /// Whether one more publish keeps the crash bound, with `in_flight` awaiting confirms and
    /// at most `window` allowed (a smaller window than configured after a missed confirm).
    pub fn may_publish(&self, in_flight: usize, window: usize) -> bool {
        in_flight < window.max(1) && in_flight + self.unflushed() < self.bound
    }

    /// When the waiting group becomes due by age, if no flush is in flight to wait for first.
    pub fn due_at(&self) -> Option<Instant> {
        if self.flushing.is_some() { None } else { self.waiting.deadline() }
    }

    pub fn is_flushing(&self) -> bool {
        self.flushing.is_some()
    }

    /// Starts a flush when none is in flight and the group is due (or `force`d).
    pub fn start(&mut self, force: bool) {
        if self.flushing.is_some() || self.waiting.is_empty() {
            return;
        }
        if !force && !self.waiting.is_due(Instant::now()) {
            return;
        }
        let marks = self.waiting.take();
        self.flushing_len = marks.len();
        let writer = self.writer.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut attempts = 1;
            let result = loop {
                match writer.write(&marks).await {
                    Err(e) if attempts < ATTEMPTS => {
                        tracing::debug!(attempt = attempts, error = %e, "cannot commit marks; retrying");
                        tokio::time::sleep(Duration::from_millis(20 * u64::from(attempts))).await;
                        attempts += 1;
                    }
                    res => break res,
                }
            };
            writer.done(&marks);
            Flushed { marks, result, attempts, took: started.elapsed() }
        });
        self.flushing = Some(Box::pin(async move {
            task.await.unwrap_or_else(|e| Flushed {
                marks: Vec::new(),
                result: Err(format!("the mark flush task failed: {e}")),
                attempts: 0,
                took: Duration::ZERO,
            })
        }));
    }

    /// Resolves when the flush in flight has committed (or given up); pending forever if none.
    pub async fn flushed(&mut self) -> Flushed<W::Mark, W::Written> {
        let Some(flush) = self.flushing.as_mut() else {
            return std::future::pending().await;
        };
        let done = flush.await;
        self.flushing = None;
        self.flushing_len = 0;
        self.flushes += 1;
        self.flush_time += done.took;
        done
    }

    /// Commits everything still unflushed, handing each flush to `account`.
    pub async fn drain(&mut self, mut account: impl FnMut(Flushed<W::Mark, W::Written>)) {
        loop {
            if self.flushing.is_some() {
                account(self.flushed().await);
            }
            if self.waiting.is_empty() {
                return;
            }
            self.start(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicU32, Ordering::SeqCst},
    };

    use super::*;

    /// Fails its first `fail` writes, then commits; counts calls.
    #[derive(Clone)]
    struct Flaky {
        fail: u32,
        calls: Arc<AtomicU32>,
        done: Arc<AtomicU32>,
    }

    impl MarkWriter for Flaky {
        type Mark = i64;
        type Written = usize;

        async fn write<'a>(&'a self, marks: &'a [i64]) -> Result<usize, String> {
            let n = self.calls.fetch_add(1, SeqCst) + 1;
            if n <= self.fail { Err(format!("failure {n}")) } else { Ok(marks.len()) }
        }

        fn done(&self, _marks: &[i64]) {
            self.done.fetch_add(1, SeqCst);
        }
    }

    fn flaky(fail: u32) -> Flaky {
        Flaky { fail, calls: Arc::default(), done: Arc::default() }
    }

    #[test]
    fn the_bound_is_window_plus_marks_less_one() {
        assert_eq!(duplicate_bound(1, 1), 1);
        assert_eq!(duplicate_bound(128, 256), 383);
        assert_eq!(duplicate_bound(0, 0), 1, "zero is clamped to one");
        let f = Flusher::new(flaky(0), 2, 2, Duration::from_secs(1));
        assert!(f.may_publish(1, 2));
        assert!(!f.may_publish(2, 2), "the window is full");
        assert!(!f.may_publish(1, 1), "a window reduced after a missed confirm is kept");
    }

    #[tokio::test]
    async fn unflushed_marks_count_against_the_bound_until_committed() {
        let mut f = Flusher::new(flaky(0), 2, 2, Duration::from_secs(60));
        f.push(1);
        assert!(f.may_publish(1, 2), "1 in flight + 1 unflushed < 3");
        f.push(2);
        assert!(!f.has_room());
        assert!(!f.may_publish(1, 2), "1 in flight + 2 unflushed would pass 3");
        f.start(false);
        assert!(f.is_flushing(), "a full group is due at once");
        assert_eq!(f.unflushed(), 2, "flushing marks still count");
        let done = f.flushed().await;
        assert_eq!((done.marks, done.result, done.attempts), (vec![1, 2], Ok(2), 1));
        assert_eq!(f.unflushed(), 0);
        assert!(f.may_publish(1, 2));
    }

    #[tokio::test]
    async fn a_failed_flush_is_retried_then_given_up() {
        let w = flaky(1);
        let mut f = Flusher::new(w.clone(), 4, 4, Duration::ZERO);
        f.push(7);
        f.start(true);
        let done = f.flushed().await;
        assert_eq!((done.result, done.attempts), (Ok(1), 2), "the second attempt commits");
        let w = flaky(u32::MAX);
        let mut f = Flusher::new(w.clone(), 4, 4, Duration::ZERO);
        f.push(8);
        let mut seen = Vec::new();
        f.drain(|d| seen.push((d.marks, d.result.is_err(), d.attempts))).await;
        assert_eq!(seen, vec![(vec![8], true, ATTEMPTS)]);
        assert_eq!((w.calls.load(SeqCst), w.done.load(SeqCst)), (ATTEMPTS, 1), "done once per flush, not per attempt");
        assert_eq!(f.unflushed(), 0, "given-up marks no longer count: their rows are sent again");
    }
}
