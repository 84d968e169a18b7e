//! `revenant outbox install`: Revenant's outbox schema in a service's own database, so the
//! service writes its events in its business transaction and `revenant relay` publishes them
//! (a source with `native = true`).
//!
//! Policy: the schema is exactly Revenant's own (the same migration files, applied in the
//! `revenant` schema of that database), in one transaction; a database that already has it
//! is left as it is and says so.

use anyhow::Context;
use sqlx::PgPool;

/// The migrations that make Revenant's `outbox` table, its indexes and its NOTIFY triggers.
/// 0016 needs the `pg_trgm` extension (trusted: the CREATE privilege on the database is
/// enough) for the error-text filter's index.
const OUTBOX_DDL: [(&str, &str); 3] = [
    ("0002_outbox.sql", include_str!("../../../migrations/0002_outbox.sql")),
    ("0008_outbox_bucket_indexes.sql", include_str!("../../../migrations/0008_outbox_bucket_indexes.sql")),
    ("0016_outbox_error_trigram.sql", include_str!("../../../migrations/0016_outbox_error_trigram.sql")),
];

#[derive(Debug, PartialEq, Eq)]
pub enum Installed {
    Created,
    AlreadyThere,
}

/// Creates `revenant.outbox` (and its triggers) in the database of `pool` unless it exists.
pub async fn install(pool: &PgPool) -> anyhow::Result<Installed> {
    let mut tx = pool.begin().await?;
    // Two installs at once: the second waits here, then finds the table.
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtextextended('revenant.outbox install', 0))")
        .execute(&mut *tx)
        .await?;
    let exists: Option<String> =
        sqlx::query_scalar!("SELECT to_regclass('revenant.outbox')::text").fetch_one(&mut *tx).await?;
    if exists.is_some() {
        return Ok(Installed::AlreadyThere);
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
