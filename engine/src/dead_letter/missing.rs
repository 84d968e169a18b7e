//! Queues the broker says do not exist, as the depth sampler last found them.
//!
//! Policy: only a definite answer counts. A passive declare refused with 404 marks the queue
//! missing (keeping when that was first seen); a declare that succeeds clears it. Any other
//! failure (a broken connection, an access refusal) changes nothing, so a broker that is away
//! never makes every queue look deleted.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

/// Records what the broker answered for `queue`: it exists, or it does not. True when that
/// is news (the queue went missing, or came back), so the caller logs a change once.
pub async fn record(db: impl PgExecutor<'_>, queue: &str, exists: bool) -> Result<bool, sqlx::Error> {
    if exists {
        let gone = sqlx::query!("DELETE FROM missing_queues WHERE queue = $1", queue).execute(db).await?;
        return Ok(gone.rows_affected() > 0);
    }
    // `since` is kept on conflict: a row whose `since` is this statement's time is new.
    sqlx::query_scalar!(
        r#"INSERT INTO missing_queues (queue) VALUES ($1)
           ON CONFLICT (queue) DO UPDATE SET checked_at = now()
           RETURNING since = checked_at AS "new!""#,
        queue
    )
    .fetch_one(db)
    .await
}

/// Every queue found missing, with since when.
pub async fn all(db: impl PgExecutor<'_>) -> Result<HashMap<String, DateTime<Utc>>, sqlx::Error> {
    let rows = sqlx::query!("SELECT queue, since FROM missing_queues").fetch_all(db).await?;
    Ok(rows.into_iter().map(|r| (r.queue, r.since)).collect())
}
