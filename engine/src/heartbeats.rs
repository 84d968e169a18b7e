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

/// Upserts one role instance's row (every few seconds, and once more when it stops).
pub async fn upsert(
    db: impl PgExecutor<'_>,
    role: &str,
    instance: uuid::Uuid,
    host: &str,
    detail: &serde_json::Value,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO heartbeats (role, instance, host, detail) VALUES ($1, $2, $3, $4)
         ON CONFLICT (role, instance) DO UPDATE SET last_seen = now(), host = EXCLUDED.host, detail = EXCLUDED.detail",
        role,
        instance,
        host,
        detail
    )
    .execute(db)
    .await?;
    Ok(())
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

/// Which relay instance publishes a source now, and how fast, from the relays' heartbeats.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceRelay {
    pub source: String,
    pub instance: String,
    pub host: String,
    pub rate_per_sec: f64,
    /// Whether that relay has its broker connection now.
    pub connected: bool,
}

/// The active relay of each source, from heartbeats of the last 30 s (a relay beats every
/// 5 s); a source missing here has no live relay.
pub async fn source_relays(db: impl PgExecutor<'_>) -> Result<Vec<SourceRelay>, sqlx::Error> {
    sqlx::query_as!(
        SourceRelay,
        r#"SELECT s->>'name' AS "source!", h.instance::text AS "instance!", h.host,
                  coalesce((s->>'rate_per_sec')::float8, 0) AS "rate_per_sec!",
                  coalesce((s->>'connected')::boolean, false) AS "connected!"
             FROM heartbeats h, jsonb_array_elements(coalesce(h.detail->'sources', '[]'::jsonb)) s
            WHERE h.role = 'relay' AND h.last_seen > now() - interval '30 seconds'
              AND coalesce((s->>'active')::boolean, false)
            ORDER BY h.last_seen DESC"#
    )
    .fetch_all(db)
    .await
}

/// A role whose broker connection RabbitMQ blocks now, from heartbeats of the last 30 s.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockedRole {
    pub role: String,
    pub host: String,
    /// The broker's reason ("low on memory").
    pub reason: String,
    pub since: chrono::DateTime<chrono::Utc>,
}

/// The roles RabbitMQ blocks now (their heartbeats carry `blocked`), longest blocked first.
pub async fn blocked(db: impl PgExecutor<'_>) -> Result<Vec<BlockedRole>, sqlx::Error> {
    sqlx::query_as!(
        BlockedRole,
        r#"SELECT role, host, coalesce(detail->'blocked'->>'reason', 'blocked') AS "reason!",
                  coalesce((detail->'blocked'->>'since')::timestamptz, last_seen) AS "since!"
           FROM heartbeats
           WHERE last_seen > now() - interval '30 seconds' AND jsonb_typeof(detail->'blocked') = 'object'
             AND NOT coalesce((detail->>'stopped')::boolean, false)
           ORDER BY 4, role"#
    )
    .fetch_all(db)
    .await
}
