//! The set of dead-letter queues Revenant ingests, kept in PostgreSQL and changed live.
//!
//! Policy: one table (`watched_queues`) is the truth for every ingester and for the console.
//! `ingest.queues` only seeds it (insert if absent), so a queue an admin stopped stays stopped
//! across restarts until someone starts it again. Starting and stopping are audited in the
//! same transaction as the change (`dlq.watch` / `dlq.unwatch`), from the console and from
//! `revenant dlq` alike. Which queues are *actually* being consumed comes from the live
//! ingesters' heartbeats, not from this table: a queue can be watched with no ingester up.

pub mod caution;

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::{PgExecutor, PgPool};

use crate::{
    audit::{self, Entry},
    auth::Principal,
};

/// Who changes the set: the origin column.
pub use types::WatchOrigin as Origin;

#[derive(Debug, Clone, PartialEq)]
pub struct Watched {
    pub queue: String,
    pub watching: bool,
    pub origin: Origin,
    pub changed_by: Option<String>,
    pub changed_at: DateTime<Utc>,
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("`{0}` is not a queue name (1 to 255 bytes)")]
    BadName(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// A queue name as AMQP allows it: 1 to 255 bytes. Control characters are refused too, so a
/// name pasted with a newline is caught here rather than failing at the broker.
pub fn check_name(queue: &str) -> Result<(), WatchError> {
    if queue.is_empty() || queue.len() > 255 || queue.chars().any(char::is_control) {
        return Err(WatchError::BadName(queue.chars().take(300).collect()));
    }
    Ok(())
}

/// Inserts the queues that are not in the set yet (watching); returns how many were new.
/// Queues already there, watched or stopped, are left as they are.
pub async fn seed(db: impl PgExecutor<'_>, queues: &[String], origin: Origin) -> Result<u64, WatchError> {
    for q in queues {
        check_name(q)?;
    }
    let res = sqlx::query!(
        "INSERT INTO watched_queues (queue, origin) SELECT q, $2 FROM unnest($1::text[]) AS q
         ON CONFLICT (queue) DO NOTHING",
        queues,
        origin.as_str()
    )
    .execute(db)
    .await?;
    Ok(res.rows_affected())
}

/// The queues to consume now.
pub async fn watching(db: impl PgExecutor<'_>) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!("SELECT queue FROM watched_queues WHERE watching ORDER BY queue").fetch_all(db).await
}

/// Every queue ever in the set, stopped ones included.
pub async fn list(db: impl PgExecutor<'_>) -> Result<Vec<Watched>, sqlx::Error> {
    sqlx::query_as!(
        Watched,
        r#"SELECT queue, watching, origin AS "origin: Origin", changed_by, changed_at FROM watched_queues ORDER BY queue"#
    )
    .fetch_all(db)
    .await
}

/// What a start or stop changed: the queues whose state flipped (the others already were so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub changed: Vec<String>,
    pub unchanged: Vec<String>,
}

/// Starts (`watching = true`) or stops ingesting `queues`, with one audit entry. Stopping never
/// drops a message: the ingesters close their consumers and what they held goes back to the
/// queue.
pub async fn set(
    pool: &PgPool,
    by: &Principal,
    client_ip: Option<&str>,
    queues: &[String],
    watching: bool,
    origin: Origin,
) -> Result<Changed, WatchError> {
    for q in queues {
        check_name(q)?;
    }
    let mut tx = pool.begin().await?;
    let changed = sqlx::query_scalar!(
        "INSERT INTO watched_queues AS w (queue, watching, origin, changed_by)
         SELECT q, $2, $3, $4 FROM unnest($1::text[]) AS q
         ON CONFLICT (queue) DO UPDATE SET watching = EXCLUDED.watching, origin = EXCLUDED.origin,
             changed_by = EXCLUDED.changed_by, changed_at = now()
         WHERE w.watching IS DISTINCT FROM EXCLUDED.watching
         RETURNING queue",
        queues,
        watching,
        origin.as_str(),
        by.username
    )
    .fetch_all(&mut *tx)
    .await?;
    let unchanged: Vec<String> = queues.iter().filter(|q| !changed.contains(q)).cloned().collect();
    audit::record(
        &mut *tx,
        Entry {
            actor: by,
            source_ip: client_ip,
            action: if watching { "dlq.watch" } else { "dlq.unwatch" },
            target: Some(format!("queues:{}", queues.join(","))),
            filter: None,
            item_count: changed.len() as i64,
            outcome: "ok",
            detail: Some(json!({"changed": changed, "unchanged": unchanged, "origin": origin.as_str()})),
        },
    )
    .await?;
    tx.commit().await?;
    tracing::info!(?changed, watching, by = %by.username, "watched dead-letter queues changed");
    Ok(Changed { changed, unchanged })
}

/// Queues a live ingester (heartbeat in the last 30 s) is consuming now.
pub async fn ingesting(db: impl PgExecutor<'_>) -> Result<HashSet<String>, sqlx::Error> {
    let rows = sqlx::query_scalar!(
        r#"SELECT DISTINCT jsonb_array_elements_text(detail->'consuming') AS "queue!" FROM heartbeats
           WHERE role = 'ingest' AND last_seen > now() - interval '30 seconds'
             AND jsonb_typeof(detail->'consuming') = 'array'"#
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().collect())
}
