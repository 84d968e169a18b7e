//! The native driver: Revenant's `outbox` schema (in Revenant's database, or installed in a
//! service's with `revenant outbox install`), shared by any number of relays through leases.
//!
//! Policy: see [`super::store`] (claims, leases, marks that check the row is still ours).

use std::time::Duration;

use sqlx::{PgPool, postgres::PgListener};
use uuid::Uuid;

use super::{
    driver::{Driver, Written},
    store::{self, AttemptOutcome, ClaimedRow, FailedAttempt, NOTIFY_CHANNEL, StoreError},
};

pub(crate) struct Native {
    /// `outbox` on this pool (whose search_path starts with `revenant`).
    pool: PgPool,
    /// The pool the relay's own writes (claims and marks) are committed on
    /// ([`super::marks::mark_pool`]).
    marks_pool: PgPool,
}

impl Native {
    pub(crate) fn new(pool: PgPool, marks_pool: PgPool) -> Self {
        Self { pool, marks_pool }
    }
}

impl Driver for Native {
    async fn claim(&self, owner: Uuid, batch: i64, lease: Duration) -> Result<Vec<ClaimedRow>, StoreError> {
        // A lease a PostgreSQL crash forgets only lets the row be claimed again (re-sent,
        // never lost), so claims may skip the fsync wait as marks do.
        store::claim(&self.marks_pool, owner, batch, lease).await
    }

    async fn release(&self, owner: Uuid, ids: &[i64]) -> Result<u64, StoreError> {
        store::release(&self.pool, owner, ids).await
    }

    fn leased(&self) -> bool {
        true
    }

    async fn mark_bad(&self, id: i64, owner: Uuid, reason: &str) -> Result<AttemptOutcome, StoreError> {
        store::mark_bad(&self.pool, id, owner, reason).await
    }

    async fn write_marks(
        &self,
        owner: Uuid,
        max_attempts: i32,
        published: &[i64],
        failed: &[FailedAttempt],
    ) -> Result<Written, StoreError> {
        if failed.is_empty() {
            // The common case: one statement is its own transaction, one commit.
            return Ok((store::mark_published(&self.marks_pool, published).await?, Vec::new()));
        }
        let mut tx = self.marks_pool.begin().await?;
        let changed = store::mark_published(&mut *tx, published).await?;
        let outcomes = store::mark_attempts_failed(&mut *tx, owner, failed, max_attempts).await?;
        tx.commit().await?;
        Ok((changed, outcomes))
    }

    async fn listen(&self) -> Option<PgListener> {
        listen_retries(&self.pool).await
    }
}

/// A connection that hears the retry trigger (an operator put a row back to pending).
pub(super) async fn listen_retries(pool: &PgPool) -> Option<PgListener> {
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
