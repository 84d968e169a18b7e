//! PostgreSQL connections and migrations.
//!
//! Every connection puts the `revenant` schema first on its `search_path`, so Revenant's
//! tables (and sqlx's migration bookkeeping) live apart from whatever else shares the
//! database, while queries stay unqualified.

use std::str::FromStr;

use anyhow::Context;
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

/// What the console crate names without depending on sqlx itself.
pub use sqlx::{Error, PgPool as Pool};

pub const SCHEMA: &str = "revenant";

pub fn options(url: &str) -> anyhow::Result<PgConnectOptions> {
    let opts = PgConnectOptions::from_str(url).context("DATABASE_URL is not a valid PostgreSQL URL")?;
    Ok(opts.options([("search_path", "revenant,public")]).application_name("revenant"))
}

pub async fn connect(url: &str, max: u32) -> anyhow::Result<PgPool> {
    let pool = PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(std::time::Duration::from_secs(5))
        .connect_with(options(url)?)
        .await
        .context("cannot connect to PostgreSQL (DATABASE_URL)")?;
    Ok(pool)
}

/// Creates the schema, then applies migrations. sqlx holds an advisory lock while
/// migrating, so several processes starting together is safe.
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    // Two processes racing on CREATE SCHEMA IF NOT EXISTS can still collide on the
    // catalog's unique index; the loser simply finds it there on retry.
    for attempt in 0..3 {
        match sqlx::query!("CREATE SCHEMA IF NOT EXISTS revenant").execute(pool).await {
            Ok(_) => break,
            Err(e) if attempt < 2 => {
                tracing::debug!(error = %e, "create schema raced, retrying");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e).context("cannot create schema revenant"),
        }
    }
    sqlx::migrate!("../migrations").run(pool).await.context("migrations failed")?;
    Ok(())
}

/// The server's version string, e.g. "PostgreSQL 15.19".
pub async fn server_version(pool: &PgPool) -> Result<String, sqlx::Error> {
    // current_setting() is SHOW as a function: a query can name its column (and its nullability).
    let v: String =
        sqlx::query_scalar!(r#"SELECT current_setting('server_version') AS "server_version!""#).fetch_one(pool).await?;
    Ok(format!("PostgreSQL {v}"))
}
