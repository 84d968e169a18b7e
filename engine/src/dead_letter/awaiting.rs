//! Dead letters awaiting triage, per queue (the dead-letter queues page, /metrics, the
//! DLQ-awaiting alert): kept by triggers in `dead_letter_queue_counts`
//! (migrations/0015_awaiting_counts.sql), so reading them costs nothing at 10 M rows.

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
        "SELECT queue, awaiting FROM dead_letter_queue_counts WHERE awaiting > 0 ORDER BY queue"
    )
    .fetch_all(db)
    .await
}
