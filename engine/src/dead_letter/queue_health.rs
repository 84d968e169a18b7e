//! What the DLQ cards say besides depth: messages stored as unreadable, and queues stuck.
//!
//! Policy: both come from PostgreSQL, so every console instance shows them whichever
//! ingester saw the trouble: unreadable counts from the dead letters' notes (a partial index,
//! so the count reads the few, not the queue), stuck queues from the ingesters' heartbeats
//! (live ones only: a stopped ingester's last word is not news).

use std::collections::HashMap;

use sqlx::PgExecutor;

/// Dead letters of one queue, awaiting triage, that the ingester could not read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub count: i64,
    /// The newest one's note (what could not be read).
    pub latest: String,
}

/// Per queue, its awaiting dead letters stored with an `unreadable` note.
pub async fn unreadable_by_queue(db: impl PgExecutor<'_>) -> Result<HashMap<String, Unreadable>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT queue AS "queue!", count(*) AS "count!", (array_agg(unreadable ORDER BY id DESC))[1] AS "latest!"
           FROM dead_letters WHERE unreadable IS NOT NULL AND status = 'awaiting' GROUP BY queue"#
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.queue, Unreadable { count: r.count, latest: r.latest })).collect())
}

/// Per queue, why a live ingester reports it stuck (see `ingest::IngestStats::stuck`).
pub async fn stuck_by_queue(db: impl PgExecutor<'_>) -> Result<HashMap<String, String>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT s->>'queue' AS "queue!", s->>'reason' AS "reason!" FROM heartbeats,
                  jsonb_array_elements(CASE WHEN jsonb_typeof(detail->'stuck') = 'array' THEN detail->'stuck'
                                            ELSE '[]'::jsonb END) AS s
           WHERE role = 'ingest' AND last_seen > now() - interval '30 seconds'
             AND s->>'queue' IS NOT NULL AND s->>'reason' IS NOT NULL"#
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.queue, r.reason)).collect())
}
