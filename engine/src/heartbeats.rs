//! The roles' heartbeats as the Overview reads them: every role instance seen in the last
//! day, with how long ago and the detail it last reported. Each role writes its own row.

use sqlx::PgExecutor;

#[derive(Debug, Clone, PartialEq)]
pub struct Heartbeat {
    pub role: String,
    pub instance: String,
    pub host: String,
    pub age_secs: f64,
    pub detail: serde_json::Value,
}

/// Instances seen in the last day, by role, most recent first.
pub async fn recent(db: impl PgExecutor<'_>) -> Result<Vec<Heartbeat>, sqlx::Error> {
    sqlx::query_as!(
        Heartbeat,
        r#"SELECT role, instance::text AS "instance!", host,
                  extract(epoch from now() - last_seen)::float8 AS "age_secs!", detail
           FROM heartbeats WHERE last_seen > now() - interval '1 day' ORDER BY role, last_seen DESC"#
    )
    .fetch_all(db)
    .await
}
