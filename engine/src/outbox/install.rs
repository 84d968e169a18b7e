//! `revenant outbox install`: Revenant's outbox schema in a service's own database, so the
//! service writes its events in its business transaction and `revenant relay` publishes them
//! (a source with `native = true`).
//!
//! Policy: the schema is exactly Revenant's own (the same migration files, applied in the
//! `revenant` schema of that database), in one transaction; a database that already has it
//! is left as it is and says so.

use anyhow::Context;
use sqlx::PgPool;

/// The migrations that make Revenant's `outbox` table, its indexes and its retry trigger.
/// 0016 needs the `pg_trgm` extension (trusted: the CREATE privilege on the database is
/// enough) for the error-text filter's index.
const OUTBOX_DDL: [(&str, &str); 5] = [
    ("0002_outbox.sql", include_str!("../../../migrations/0002_outbox.sql")),
    ("0008_outbox_bucket_indexes.sql", include_str!("../../../migrations/0008_outbox_bucket_indexes.sql")),
    ("0016_outbox_error_trigram.sql", include_str!("../../../migrations/0016_outbox_error_trigram.sql")),
    (DROP_INSERT_NOTIFY.0, DROP_INSERT_NOTIFY.1),
    (STREAM_HELD.0, STREAM_HELD.1),
];

/// The commit-stream relay's held events (`capture = "logical"`); applied to an outbox
/// installed before it. Idempotent.
const STREAM_HELD: (&str, &str) =
    ("0025_outbox_stream_held.sql", include_str!("../../../migrations/0025_outbox_stream_held.sql"));

/// Applied to an outbox installed before it: the insert trigger's NOTIFY serialised the
/// service's commits. Idempotent.
const DROP_INSERT_NOTIFY: (&str, &str) =
    ("0022_outbox_no_insert_notify.sql", include_str!("../../../migrations/0022_outbox_no_insert_notify.sql"));

#[derive(Debug, PartialEq, Eq)]
pub enum Installed {
    Created,
    AlreadyThere,
    /// It was there from an earlier version: the insert NOTIFY trigger is dropped and the
    /// commit-stream relay's column added.
    Upgraded,
}

/// Whether `revenant.outbox` in this database still has the insert trigger that NOTIFYs,
/// which serialises the commits of the service writing it.
pub async fn has_insert_notify(db: impl sqlx::PgExecutor<'_>) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM pg_trigger
                          WHERE tgrelid = to_regclass('revenant.outbox') AND tgname = 'outbox_notify') AS "there!""#
    )
    .fetch_one(db)
    .await
}

/// Whether `revenant.outbox` in this database has the commit-stream relay's column.
pub async fn has_stream_held(db: impl sqlx::PgExecutor<'_>) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM pg_attribute
                          WHERE attrelid = to_regclass('revenant.outbox') AND attname = 'stream_lsn'
                            AND NOT attisdropped) AS "there!""#
    )
    .fetch_one(db)
    .await
}

/// Creates `revenant.outbox` (and its triggers) in the database of `pool` unless it exists;
/// an existing one loses the insert NOTIFY trigger of earlier versions.
pub async fn install(pool: &PgPool) -> anyhow::Result<Installed> {
    let mut tx = pool.begin().await?;
    // Two installs at once: the second waits here, then finds the table.
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtextextended('revenant.outbox install', 0))")
        .execute(&mut *tx)
        .await?;
    let exists: Option<String> =
        sqlx::query_scalar!("SELECT to_regclass('revenant.outbox')::text").fetch_one(&mut *tx).await?;
    if exists.is_some() {
        let notify = has_insert_notify(&mut *tx).await?;
        let held = has_stream_held(&mut *tx).await?;
        if !notify && held {
            return Ok(Installed::AlreadyThere);
        }
        sqlx::query!("SET LOCAL search_path = revenant, public").execute(&mut *tx).await?;
        for (name, sql) in [DROP_INSERT_NOTIFY, STREAM_HELD] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut *tx)
                .await
                .with_context(|| format!("applying {name}"))?;
        }
        tx.commit().await?;
        return Ok(Installed::Upgraded);
    }
    sqlx::query!("CREATE SCHEMA IF NOT EXISTS revenant")
        .execute(&mut *tx)
        .await
        .context("cannot create schema revenant")?;
    sqlx::query!("SET LOCAL search_path = revenant, public").execute(&mut *tx).await?;
    for (name, sql) in OUTBOX_DDL {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut *tx).await.with_context(|| format!("applying {name}"))?;
    }
    tx.commit().await?;
    Ok(Installed::Created)
}
