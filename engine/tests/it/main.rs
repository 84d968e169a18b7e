//! Engine integration tests against the real PostgreSQL and RabbitMQ on this machine:
//! a fresh database per test (`engine::testing::fresh_db`), uniquely named queues.

/// A compile-checked `SELECT count(*) …` polled as one number (sqlx types `count(*)` as
/// nullable; no row count means 0).
macro_rules! count {
    ($pool:expr, $sql:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_scalar!($sql $(, $arg)*).fetch_one($pool).await.unwrap().unwrap_or(0)
    };
}

mod alerts;
mod audit;
mod auth;
mod awaiting_counts;
mod breakdown;
mod closed_sets;
mod demo;
mod group_kinds;
mod inflow;
mod ingest;
mod ingest_batch;
mod ingest_corpus;
mod ingest_hostile;
mod ingest_watch;
mod list_body_search;
mod logical;
mod pass_through;
mod previous_page;
mod publish_returns;
mod relay;
mod relay_logical;
mod relay_mapped;
mod relay_unconfirmed;
mod replay;
mod replay_edit;
mod sources;
mod topology;
mod triage;
