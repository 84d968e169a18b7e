//! The edits made to a dead letter, oldest first: who changed what before a replay (a
//! message's story).

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditEntry {
    pub id: i64,
    pub edited_at: DateTime<Utc>,
    pub edited_by: String,
    pub note: Option<String>,
}

pub async fn of(db: impl PgExecutor<'_>, dead_letter_id: i64) -> Result<Vec<EditEntry>, sqlx::Error> {
    sqlx::query_as!(
        EditEntry,
        "SELECT id, edited_at, edited_by, note FROM dead_letter_edits WHERE dead_letter_id = $1 ORDER BY id",
        dead_letter_id
    )
    .fetch_all(db)
    .await
}
