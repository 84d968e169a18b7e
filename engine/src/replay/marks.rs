//! One plan's mark flusher: group commits of its items' outcomes after their confirms.
//!
//! Policy (River's batch completer, in the sender's loop, as the relay does it):
//! - a confirm does not wait for its own commit: its mark joins a group committed in one
//!   statement ([`items::mark_sent`], [`items::mark_failed`]) when `mark_batch` marks wait or
//!   the oldest has waited `mark_flush`, whichever comes first;
//! - at most one flush is in flight; no more than `mark_batch` marks are ever unflushed
//!   (waiting plus flushing): the sender stops taking confirms until a flush makes room, so a
//!   crash re-sends at most `window + mark_batch` messages (see [`duplicate_bound`]);
//! - every unflushed mark is committed before the plan is finished, before its lease is
//!   released (pause, cancel, lease lost, stop, a broken channel) and before an ordered plan's
//!   failure pauses it ([`Marks::drain`]);
//! - a flush that fails is retried a few times (a deadlock or a brief outage), then logged and
//!   dropped: its items stay pending and are sent again (at-least-once), as after a crash.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use sqlx::PgPool;
use tokio::time::Instant;

use super::{config::PublisherConfig, items, stats::ReplayStats};
use crate::group_commit::Batch;

/// What a crash can re-send: every publish awaiting its confirm plus every confirmed item
/// whose mark has not committed. Window 1 with `mark_batch` 1 (the strict mode) gives 2.
pub fn duplicate_bound(window: usize, cfg: &PublisherConfig) -> usize {
    window.max(1) + cfg.mark_batch.max(1)
}

/// One item's outcome, waiting to be written.
#[derive(Debug)]
pub(super) enum Mark {
    Sent(i64),
    Failed(i64, String),
    /// No confirm in time, or its channel went away: it may have been delivered.
    Unconfirmed(i64, String),
}

/// Marks written, `(sent marked, failed marked)` or the last attempt's error, and how long it took.
type Flushed = (usize, Result<(u64, u64), String>, Duration);

/// Attempts per flush before its marks are dropped (and their items re-sent).
const ATTEMPTS: u32 = 3;

pub(super) struct Marks {
    waiting: Batch<Mark>,
    flushing: Option<BoxFuture<'static, Flushed>>,
    flushing_len: usize,
    pool: PgPool,
    plan_id: i64,
    stats: Arc<ReplayStats>,
    /// Flushes done and the time they took, for the plan's closing log line.
    pub(super) flushes: u64,
    pub(super) flush_time: Duration,
}

impl Marks {
    pub(super) fn new(pool: PgPool, plan_id: i64, cfg: &PublisherConfig, stats: Arc<ReplayStats>) -> Self {
        Self {
            waiting: Batch::new(cfg.mark_batch, cfg.mark_flush),
            flushing: None,
            flushing_len: 0,
            pool,
            plan_id,
            stats,
            flushes: 0,
            flush_time: Duration::ZERO,
        }
    }

    pub(super) fn push(&mut self, mark: Mark) {
        self.waiting.push(mark);
    }

    /// Marks not committed yet: waiting plus flushing.
    pub(super) fn unflushed(&self) -> usize {
        self.waiting.len() + self.flushing_len
    }

    /// Whether one more confirm may be taken without passing `mark_batch` unflushed marks.
    pub(super) fn has_room(&self) -> bool {
        self.unflushed() < self.waiting.max()
    }

    /// When the waiting group becomes due by age, if no flush is in flight to wait for first.
    pub(super) fn due_at(&self) -> Option<Instant> {
        if self.flushing.is_some() { None } else { self.waiting.deadline() }
    }

    pub(super) fn is_flushing(&self) -> bool {
        self.flushing.is_some()
    }

    /// Starts a flush when none is in flight and the group is due (or `force`d).
    pub(super) fn start(&mut self, force: bool) {
        if self.flushing.is_some() || self.waiting.is_empty() {
            return;
        }
        if !force && !self.waiting.is_due(Instant::now()) {
            return;
        }
        let marks = self.waiting.take();
        self.flushing_len = marks.len();
        let (pool, plan_id, len) = (self.pool.clone(), self.plan_id, marks.len());
        // A task of its own: a query only progresses while polled, and the send loop, busy
        // with confirms, would otherwise starve it.
        let flush = tokio::spawn(async move {
            let started = Instant::now();
            let mut attempt = 1;
            loop {
                match write(&pool, plan_id, &marks).await {
                    Err(e) if attempt < ATTEMPTS => {
                        tracing::debug!(plan_id, attempt, error = %e, "cannot commit replay marks; retrying");
                        tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
                        attempt += 1;
                    }
                    res => return (res.map_err(|e| e.to_string()), started.elapsed()),
                }
            }
        });
        self.flushing = Some(Box::pin(async move {
            let (res, took) =
                flush.await.unwrap_or_else(|e| (Err(format!("the flush task failed: {e}")), Duration::ZERO));
            (len, res, took)
        }));
    }

    /// Resolves when the flush in flight has committed (or given up); pending forever if none.
    pub(super) async fn flushed(&mut self) {
        let Some(flush) = self.flushing.as_mut() else {
            return std::future::pending().await;
        };
        let (len, res, took) = flush.await;
        self.flushing = None;
        self.flushing_len = 0;
        self.flushes += 1;
        self.flush_time += took;
        match res {
            Ok((sent, failed)) => {
                self.stats.sent.fetch_add(sent, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!(
                    plan_id = self.plan_id,
                    marks = len,
                    sent,
                    failed,
                    took_us = took.as_micros() as u64,
                    "replay marks committed"
                );
            }
            Err(e) => tracing::warn!(plan_id = self.plan_id, marks = len, error = %e,
                "cannot commit replay marks; those items stay pending and will be sent again"),
        }
    }

    /// Commits everything still unflushed, waiting for it.
    pub(super) async fn drain(&mut self) {
        loop {
            if self.flushing.is_some() {
                self.flushed().await;
            }
            if self.waiting.is_empty() {
                return;
            }
            self.start(true);
        }
    }
}

/// The sent marks in one statement; with failures or unconfirmed ones too, all in one transaction.
async fn write(pool: &PgPool, plan_id: i64, marks: &[Mark]) -> sqlx::Result<(u64, u64)> {
    let sent: Vec<i64> = marks.iter().filter_map(|m| if let Mark::Sent(id) = m { Some(*id) } else { None }).collect();
    let failed: Vec<(i64, String)> = marks
        .iter()
        .filter_map(|m| if let Mark::Failed(id, why) = m { Some((*id, why.clone())) } else { None })
        .collect();
    let unconfirmed: Vec<(i64, String)> = marks
        .iter()
        .filter_map(|m| if let Mark::Unconfirmed(id, why) = m { Some((*id, why.clone())) } else { None })
        .collect();
    if failed.is_empty() && unconfirmed.is_empty() {
        // The common case: one statement is its own transaction, one commit.
        return Ok((items::mark_sent(pool, plan_id, &sent).await?, 0));
    }
    let mut tx = pool.begin().await?;
    let s = items::mark_sent(&mut *tx, plan_id, &sent).await?;
    let f = items::mark_failed(&mut *tx, plan_id, &failed).await?;
    items::mark_unconfirmed(&mut *tx, plan_id, &unconfirmed).await?;
    tx.commit().await?;
    Ok((s, f))
}
