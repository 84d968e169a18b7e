//! One plan's marks: what each item's confirm writes, on the shared group-commit flusher
//! ([`crate::publish::flusher`]: batching, one flush in flight, backpressure, retries, the
//! crash bound).
//!
//! Policy:
//! - an acked item is marked `sent`, a refused one `failed` (its dead letter awaits triage
//!   again), one without an answer `unconfirmed` (sent again under the same message id);
//! - every unflushed mark is committed before the plan is finished, before its lease is
//!   released (pause, cancel, lease lost, stop, a broken channel) and before an ordered plan's
//!   failure pauses it;
//! - a flush given up leaves its items pending: they are sent again (at-least-once), as after
//!   a crash.

use std::sync::atomic::Ordering::Relaxed;

use sqlx::PgPool;

use super::{config::PublisherConfig, items, stats::ReplayStats};
use crate::publish::{Flushed, Flusher, MarkWriter};

/// What a crash can re-send: every publish awaiting its confirm plus every confirmed item
/// whose mark has not committed (the shared bound, `window + mark_batch − 1`). Window 1 with
/// `mark_batch` 1 (the strict mode) gives 1.
pub fn duplicate_bound(window: usize, cfg: &PublisherConfig) -> usize {
    crate::publish::duplicate_bound(window, cfg.mark_batch)
}

/// One item's outcome, waiting to be written.
#[derive(Debug)]
pub(super) enum Mark {
    Sent(i64),
    Failed(i64, String),
    /// No confirm in time, or its channel went away: it may have been delivered.
    Unconfirmed(i64, String),
}

/// Where a plan's marks go.
#[derive(Clone)]
pub(super) struct Writer {
    pool: PgPool,
    plan_id: i64,
}

impl MarkWriter for Writer {
    type Mark = Mark;
    /// Items marked sent, and failed.
    type Written = (u64, u64);

    async fn write<'a>(&'a self, marks: &'a [Mark]) -> Result<(u64, u64), String> {
        write(&self.pool, self.plan_id, marks).await.map_err(|e| e.to_string())
    }
}

pub(super) type Marks = Flusher<Writer>;

pub(super) fn flusher(pool: PgPool, plan_id: i64, window: usize, cfg: &PublisherConfig) -> Marks {
    Flusher::new(Writer { pool, plan_id }, window, cfg.mark_batch, cfg.mark_flush)
}

/// Counts and logs one flush.
pub(super) fn account(done: Flushed<Mark, (u64, u64)>, plan_id: i64, stats: &ReplayStats) {
    let len = done.marks.len();
    match done.result {
        Ok((sent, failed)) => {
            stats.sent.fetch_add(sent, Relaxed);
            tracing::debug!(
                plan_id,
                marks = len,
                sent,
                failed,
                took_us = done.took.as_micros() as u64,
                "replay marks committed"
            );
        }
        Err(e) => tracing::warn!(plan_id, marks = len, attempts = done.attempts, error = %e,
            "cannot commit replay marks; those items stay pending and will be sent again"),
    }
}

/// Commits every unflushed mark of the plan, waiting for it.
pub(super) async fn drain(marks: &mut Marks, plan_id: i64, stats: &ReplayStats) {
    marks.drain(|done| account(done, plan_id, stats)).await;
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
