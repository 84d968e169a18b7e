//! The table a relay session publishes: Revenant's `outbox` schema (in Revenant's database or
//! installed in a service's), or a service's own outbox table read through its mapping.
//!
//! Policy: the session's loop (claim ahead, publish with confirms, group-committed marks) is
//! the same for both; only these few operations differ. A native table is shared by leases
//! (`FOR UPDATE SKIP LOCKED`); a mapped table has no lease columns, so one relay at a time
//! publishes it, the one holding its advisory lock ([`super::mapped`]).

use std::sync::Arc;

use sqlx::{PgPool, postgres::PgListener};
use uuid::Uuid;

use super::{
    mapped::Mapped,
    marks::Mark,
    store::{self, AttemptOutcome, ClaimedRow, FailedAttempt, NOTIFY_CHANNEL, StoreError},
};

#[derive(Clone)]
pub(crate) enum Table {
    /// `outbox` on this pool (whose search_path starts with `revenant`), and the pool the
    /// relay's own writes (claims and marks) are committed on (see [`super::marks::mark_pool`]).
    Native {
        pool: PgPool,
        marks_pool: PgPool,
    },
    Mapped(Arc<Mapped>),
}

impl Table {
    /// Leases (native) or takes (mapped, under its lock) up to `batch` due rows.
    pub(crate) async fn claim(
        &self,
        owner: Uuid,
        batch: i64,
        lease: std::time::Duration,
    ) -> Result<Vec<ClaimedRow>, StoreError> {
        match self {
            // A lease a PostgreSQL crash forgets only lets the row be claimed again (re-sent,
            // never lost), so claims may skip the fsync wait as marks do.
            Table::Native { marks_pool, .. } => store::claim(marks_pool, owner, batch, lease).await,
            Table::Mapped(m) => m.claim(batch).await,
        }
    }

    /// Gives rows back unpublished, so they are claimed again now.
    pub(crate) async fn release(&self, owner: Uuid, ids: &[i64]) -> Result<u64, StoreError> {
        match self {
            Table::Native { pool, .. } => store::release(pool, owner, ids).await,
            Table::Mapped(m) => Ok(m.forget(ids)),
        }
    }

    /// Whether a claimed row must not be sent once its deadline passed (a native lease may
    /// have moved to another relay; a mapped row is ours while the lock is).
    pub(crate) fn leased(&self) -> bool {
        matches!(self, Table::Native { .. })
    }

    /// A row that can never be published as it stands: failed at once.
    pub(crate) async fn mark_bad(&self, id: i64, owner: Uuid, reason: &str) -> Result<AttemptOutcome, StoreError> {
        match self {
            Table::Native { pool, .. } => store::mark_bad(pool, id, owner, reason).await,
            Table::Mapped(m) => {
                let one = [FailedAttempt { id, reason: reason.to_string(), retry_in: std::time::Duration::ZERO }];
                let done = m.write_failed(m.marks_pool(), &one, 1).await?;
                m.forget(&[id]);
                Ok(done.first().map_or(AttemptOutcome::NotOwned, |(_, o)| *o))
            }
        }
    }

    /// Commits a group of marks in one transaction; returns the rows marked published and
    /// each failed attempt's outcome.
    pub(crate) async fn write_marks(
        &self,
        owner: Uuid,
        max_attempts: i32,
        marks: &[Mark],
    ) -> Result<(u64, Vec<(i64, AttemptOutcome)>), StoreError> {
        let published: Vec<i64> =
            marks.iter().filter_map(|m| if let Mark::Published { id } = m { Some(*id) } else { None }).collect();
        let failed: Vec<FailedAttempt> = marks
            .iter()
            .filter_map(|m| if let Mark::Failed { attempt, .. } = m { Some(attempt.clone()) } else { None })
            .collect();
        match self {
            Table::Native { marks_pool, .. } => {
                if failed.is_empty() {
                    // The common case: one statement is its own transaction, one commit.
                    return Ok((store::mark_published(marks_pool, &published).await?, Vec::new()));
                }
                let mut tx = marks_pool.begin().await?;
                let changed = store::mark_published(&mut *tx, &published).await?;
                let outcomes = store::mark_attempts_failed(&mut *tx, owner, &failed, max_attempts).await?;
                tx.commit().await?;
                Ok((changed, outcomes))
            }
            Table::Mapped(m) => m.write_marks(&published, &failed, max_attempts).await,
        }
    }

    /// After a flush's last attempt: marked or not, a mapped table's rows are no longer in
    /// flight, and a flush given up makes them claimable again (re-sent, never lost), as a
    /// crash would. A native row's lease does that by itself.
    pub(crate) fn flushed(&self, marks: &[Mark]) {
        if let Table::Mapped(m) = self {
            let all: Vec<i64> = marks.iter().map(Mark::id).collect();
            m.forget(&all);
        }
    }

    /// A LISTEN connection that wakes the relay when an operator retries a row (native tables
    /// only); new rows are found by polling.
    pub(crate) async fn listen(&self) -> Option<PgListener> {
        let Table::Native { pool, .. } = self else { return None };
        let res = async {
            let mut l = PgListener::connect_with(pool).await?;
            l.listen(NOTIFY_CHANNEL).await?;
            Ok::<_, sqlx::Error>(l)
        }
        .await;
        match res {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN {NOTIFY_CHANNEL}; polling only until it works");
                None
            }
        }
    }
}
