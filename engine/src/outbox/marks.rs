//! The relay's mark flusher: group commits of confirmed and failed publishes.
//!
//! Policy (River's batch completer, in the relay's loop):
//! - a confirm does not wait for its own commit: its mark joins a group that is committed in
//!   one statement when `mark_batch` marks wait or the oldest has waited `mark_flush_ms`;
//! - at most one flush is in flight, and no more than `mark_batch` marks are ever unflushed
//!   (waiting plus flushing): the session stops taking confirms until a flush makes room, so
//!   a `kill -9` can re-send at most the window plus `mark_batch` (see [`duplicate_bound`]);
//! - a flush that fails is logged and dropped: its rows keep their lease (a mapped table's rows:
//!   they stay unpublished under the relay lock, and are claimed again) and are re-sent when
//!   it expires (at-least-once), exactly as a crash would have it;
//! - with `relay.synchronous_commit = off` the flushes (and the native table's claims) run on
//!   connections of their own with that setting, so only the relay's own writes (never a
//!   service's events) skip the WAL fsync wait.

use std::{collections::HashMap, sync::atomic::Ordering::Relaxed, time::Duration};

use futures::future::BoxFuture;
use sqlx::{PgPool, postgres::PgPoolOptions};
use tokio::time::Instant;
use uuid::Uuid;

use super::{
    stats::RelayStats,
    store::{AttemptOutcome, FailedAttempt, StoreError},
    table::Table,
};
use crate::{group_commit::Batch, settings::RelaySettings};

/// What a `kill -9` can re-send: every publish awaiting its confirm, plus every confirmed row
/// whose mark has not committed. The session keeps their sum at or under this, so window 1
/// with `mark_batch` 1 (the strict mode) re-sends at most one event.
pub fn duplicate_bound(cfg: &RelaySettings) -> usize {
    cfg.window + cfg.mark_batch.max(1) - 1
}

/// The pool marks and claims are committed on: the relay's own, or, with
/// `synchronous_commit = off`, a small one whose connections set it (PostgreSQL then
/// acknowledges a commit before its WAL reaches disk; a PostgreSQL crash can forget the last
/// marks and leases, and those rows are re-sent — never lost, since a forgotten mark's row was
/// confirmed by the broker and a forgotten lease only makes its row claimable again). Two
/// connections: at most one flush and one claim are in flight per session.
pub fn mark_pool(pool: &PgPool, cfg: &RelaySettings) -> PgPool {
    if cfg.synchronous_commit {
        return pool.clone();
    }
    let opts = (*pool.connect_options()).clone().options([("synchronous_commit", "off")]);
    PgPoolOptions::new().max_connections(2).acquire_timeout(Duration::from_secs(10)).connect_lazy_with(opts)
}

/// One publish's outcome, waiting to be written.
#[derive(Debug)]
pub(super) enum Mark {
    Published { id: i64 },
    Failed { attempt: FailedAttempt, event_id: String, number: u32 },
}

impl Mark {
    pub(super) fn id(&self) -> i64 {
        match self {
            Mark::Published { id } => *id,
            Mark::Failed { attempt, .. } => attempt.id,
        }
    }
}

type Flushed = (Vec<Mark>, Result<(u64, Vec<(i64, AttemptOutcome)>), StoreError>);

pub(super) struct Marks {
    waiting: Batch<Mark>,
    flushing: Option<BoxFuture<'static, Flushed>>,
    flushing_len: usize,
    table: Table,
    owner: Uuid,
    max_attempts: i32,
}

impl Marks {
    pub(super) fn new(table: Table, owner: Uuid, cfg: &RelaySettings) -> Self {
        Self {
            waiting: Batch::new(cfg.mark_batch, cfg.mark_flush),
            flushing: None,
            flushing_len: 0,
            table,
            owner,
            max_attempts: cfg.max_attempts,
        }
    }

    pub(super) fn push(&mut self, mark: Mark, stats: &RelayStats) {
        self.waiting.push(mark);
        stats.unflushed_marks.store(self.unflushed() as u64, Relaxed);
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

    /// Starts a flush when none is in flight and the group is due (or `now` is forced).
    pub(super) fn start(&mut self, force: bool) {
        if self.flushing.is_some() || self.waiting.is_empty() {
            return;
        }
        if !force && !self.waiting.is_due(Instant::now()) {
            return;
        }
        let marks = self.waiting.take();
        self.flushing_len = marks.len();
        let (table, owner, max_attempts) = (self.table.clone(), self.owner, self.max_attempts);
        // A task of its own: a query progresses only while polled, and the session, busy
        // publishing a window, polls its select only between publishes.
        let task = tokio::spawn(async move {
            let res = table.write_marks(owner, max_attempts, &marks).await;
            (marks, res)
        });
        self.flushing = Some(Box::pin(async move {
            match task.await {
                Ok(done) => done,
                Err(e) => (Vec::new(), Err(StoreError::Invalid(format!("the mark flush task failed: {e}")))),
            }
        }));
    }

    /// Resolves when the flush in flight has committed (or failed); pending forever if none.
    pub(super) async fn flushed(&mut self, stats: &RelayStats) {
        let Some(flush) = self.flushing.as_mut() else {
            return std::future::pending().await;
        };
        let (marks, res) = flush.await;
        self.flushing = None;
        self.flushing_len = 0;
        stats.unflushed_marks.store(self.unflushed() as u64, Relaxed);
        account(&marks, res, stats);
    }

    /// Commits everything still unflushed (shutdown, end of a session).
    pub(super) async fn drain(&mut self, stats: &RelayStats) {
        loop {
            if self.flushing.is_some() {
                self.flushed(stats).await;
            }
            if self.waiting.is_empty() {
                return;
            }
            self.start(true);
        }
    }
}

fn account(marks: &[Mark], res: Result<(u64, Vec<(i64, AttemptOutcome)>), StoreError>, stats: &RelayStats) {
    let published = marks.iter().filter(|m| matches!(m, Mark::Published { .. })).count() as u64;
    let (changed, outcomes) = match res {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, marks = marks.len(),
                "cannot commit marks; those rows will be sent again when their lease expires");
            return;
        }
    };
    RelayStats::bump(&stats.mark_flushes);
    stats.published.fetch_add(changed, Relaxed);
    if changed < published {
        tracing::info!(rows = published - changed, "confirmed, but archived meanwhile: left as they are");
    }
    let outcomes: HashMap<i64, AttemptOutcome> = outcomes.into_iter().collect();
    for m in marks {
        let Mark::Failed { attempt, event_id, number } = m else { continue };
        let (id, reason) = (attempt.id, attempt.reason.as_str());
        match outcomes.get(&id).copied() {
            Some(AttemptOutcome::Failed) => {
                RelayStats::bump(&stats.failed_final);
                tracing::warn!(id, %event_id, attempt = number, reason, "outbox row failed for good");
            }
            Some(_) => tracing::info!(id, %event_id, attempt = number, reason,
                retry_in_ms = attempt.retry_in.as_millis() as u64, "publish attempt failed; will retry"),
            None => tracing::debug!(id, %event_id, "attempt failed on a row no longer ours"),
        }
    }
}
