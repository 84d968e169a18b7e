//! Queues the broker says do not exist, as the depth sampler last found them.
//!
//! Policy: only a definite answer counts. A passive declare refused with 404 marks the queue
//! missing (keeping when that was first seen); a declare that succeeds clears it. Any other
//! failure (a broken connection, an access refusal) changes nothing, so a broker that is away
//! never makes every queue look deleted.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

/// Records what the broker answered for `queue`: it exists, or it does not.
pub async fn record(db: impl PgExecutor<'_>, queue: &str, exists: bool) -> Result<(), sqlx::Error> {
    if exists {
        sqlx::query!("DELETE FROM missing_queues WHERE queue = $1", queue).execute(db).await?;
    } else {
        sqlx::query!(
            "INSERT INTO missing_queues (queue) VALUES ($1)
             ON CONFLICT (queue) DO UPDATE SET checked_at = now()",
            queue
        )
        .execute(db)
        .await?;
    }
    Ok(())
}

/// Every queue found missing, with since when.
pub async fn all(db: impl PgExecutor<'_>) -> Result<HashMap<String, DateTime<Utc>>, sqlx::Error> {
    let rows = sqlx::query!("SELECT queue, since FROM missing_queues").fetch_all(db).await?;
    Ok(rows.into_iter().map(|r| (r.queue, r.since)).collect())
}
