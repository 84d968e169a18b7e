//! The relay's marks: what a confirmed or refused publish writes, on the shared group-commit
//! flusher ([`crate::publish::flusher`]: batching, one flush in flight, backpressure, retries,
//! the crash bound).
//!
//! Policy:
//! - a published row is marked `published`; a refused one records a failed attempt (retried
//!   with backoff, failed for good after `max_attempts`);
//! - a flush given up leaves its rows leased (a mapped table's rows: released under the relay
//!   lock, claimed again) and they are re-sent when the lease ends (at-least-once), as after a
//!   crash;
//! - with `relay.synchronous_commit = off` the flushes (and the native table's claims) run on
//!   connections of their own with that setting, so only the relay's own writes (never a
//!   service's events) skip the WAL fsync wait.

use std::{
    collections::HashMap,
    sync::{Arc, atomic::Ordering::Relaxed},
    time::Duration,
};

use sqlx::{PgPool, postgres::PgPoolOptions};
use uuid::Uuid;

use super::{
    driver::{Driver, Written},
    stats::RelayStats,
    store::{AttemptOutcome, FailedAttempt},
};
use crate::{
    publish::{Flushed, Flusher, MarkWriter},
    settings::RelaySettings,
};

/// What a `kill -9` can re-send: every publish awaiting its confirm, plus every confirmed row
/// whose mark has not committed (the shared bound, `window + mark_batch − 1`).
pub fn duplicate_bound(cfg: &RelaySettings) -> usize {
    crate::publish::duplicate_bound(cfg.window, cfg.mark_batch)
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

/// Where the relay's marks go: its table, as this relay.
pub(super) struct Writer<D> {
    table: Arc<D>,
    owner: Uuid,
    max_attempts: i32,
}

impl<D> Clone for Writer<D> {
    fn clone(&self) -> Self {
        Self { table: self.table.clone(), owner: self.owner, max_attempts: self.max_attempts }
    }
}

impl<D: Driver> MarkWriter for Writer<D> {
    type Mark = Mark;
    type Written = Written;

    async fn write<'a>(&'a self, marks: &'a [Mark]) -> Result<Written, String> {
        let published: Vec<i64> =
            marks.iter().filter_map(|m| if let Mark::Published { id } = m { Some(*id) } else { None }).collect();
        let failed: Vec<FailedAttempt> = marks
            .iter()
            .filter_map(|m| if let Mark::Failed { attempt, .. } = m { Some(attempt.clone()) } else { None })
            .collect();
        self.table.write_marks(self.owner, self.max_attempts, &published, &failed).await.map_err(|e| e.to_string())
    }

    fn done(&self, marks: &[Mark]) {
        let ids: Vec<i64> = marks.iter().map(Mark::id).collect();
        self.table.flushed(&ids);
    }
}

pub(super) type Marks<D> = Flusher<Writer<D>>;

pub(super) fn flusher<D: Driver>(table: Arc<D>, owner: Uuid, cfg: &RelaySettings) -> Marks<D> {
    let writer = Writer { table, owner, max_attempts: cfg.max_attempts };
    Flusher::new(writer, cfg.window, cfg.mark_batch, cfg.mark_flush)
}

/// Counts and logs one flush.
pub(super) fn account(done: Flushed<Mark, Written>, stats: &RelayStats) {
    let Flushed { marks, result, attempts, .. } = done;
    let published = marks.iter().filter(|m| matches!(m, Mark::Published { .. })).count() as u64;
    let (changed, outcomes) = match result {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, marks = marks.len(), attempts,
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
    for m in &marks {
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
