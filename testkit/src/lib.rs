//! Revenant's test kit: what every integration test of the workspace stands on.
//!
//! - [`fresh_db`] / [`blank_db`]: a database per test, copied from a template migrated once
//!   per run, dropped when the test ends (also on panic) — crates.io's test databases are the
//!   model (`db`).
//! - [`Doomed`]: queue and exchange names deleted from the broker when the test ends (`broker`).
//! - [`eventually`] (and [`until`], [`count_until`]): the one way to wait for the background.
//! - [`count!`]: a compile-checked `SELECT count(*) …` as one number.
//!
//! Real components only: the local PostgreSQL (`TEST_DATABASE_URL`) and RabbitMQ
//! (`TEST_AMQP_URL`).

mod broker;
mod db;
mod poll;

pub use broker::{Doomed, amqp_url, unique};
pub use db::{TestDb, admin_url, blank_db, fresh_db};
pub use poll::{count_until, eventually, until};

/// A compile-checked `SELECT count(*) …` read as one number (sqlx types `count(*)` as
/// nullable; no row means 0). The calling crate checks the query, as any `query!`.
#[macro_export]
macro_rules! count {
    ($pool:expr, $sql:literal $(, $arg:expr)* $(,)?) => {
        ::sqlx::query_scalar!($sql $(, $arg)*).fetch_one($pool).await.unwrap().unwrap_or(0)
    };
}
