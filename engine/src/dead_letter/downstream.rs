//! Dead letters that carry an outbox event's id as their message id: what happened to the
//! event downstream (the outbox detail page).

use sqlx::PgExecutor;

use super::model::Status;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downstream {
    pub id: i64,
    pub queue: String,
    pub status: Status,
}

/// The newest `limit` dead letters whose message id is `message_id`, newest first.
pub async fn of_message(db: impl PgExecutor<'_>, message_id: &str, limit: i64) -> Result<Vec<Downstream>, sqlx::Error> {
    sqlx::query_as!(
        Downstream,
        r#"SELECT id, queue, status AS "status: Status" FROM dead_letters
           WHERE message_id = $1 ORDER BY ingested_at DESC LIMIT $2"#,
        message_id,
        limit
    )
    .fetch_all(db)
    .await
}
