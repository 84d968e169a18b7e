//! The real server on port 0 with its own database, driven over HTTP.

/// A compile-checked `SELECT count(*) …` read as one number (sqlx types `count(*)` as
/// nullable; no row count means 0).
macro_rules! count {
    ($pool:expr, $sql:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_scalar!($sql $(, $arg)*).fetch_one($pool).await.unwrap().unwrap_or(0)
    };
}

mod audit;
mod chaos;
mod chaos_mapped;
mod cli;
mod cluster;
mod dlq_cli;
mod dlq_watch;
mod export;
mod export_limits;
mod hardening;
mod harness;
mod hostile;
mod metrics;
mod page_loads;
mod pages;
mod probe;
mod security;
