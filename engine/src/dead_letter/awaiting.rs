//! Dead letters awaiting triage, counted per queue (the dead-letter queues page).

use sqlx::PgExecutor;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueAwaiting {
    pub queue: String,
    pub awaiting: i64,
}

/// Every queue with at least one stored dead letter awaiting triage, by name.
pub async fn by_queue(db: impl PgExecutor<'_>) -> Result<Vec<QueueAwaiting>, sqlx::Error> {
    sqlx::query_as!(
        QueueAwaiting,
        r#"SELECT queue, count(*) AS "awaiting!" FROM dead_letters WHERE status = 'awaiting'
           GROUP BY queue ORDER BY queue"#
    )
    .fetch_all(db)
    .await
}
