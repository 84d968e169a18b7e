//! `revenant demo`: traffic that makes a fresh console come alive within a minute.
//!
//! A demo orders service writes orders and their outbox events in one transaction
//! (`service`); Revenant's relay publishes them to a demo topology (`topology`); demo
//! consumers succeed mostly and fail the realistic ways (`behaviour`, `consumers`): a
//! renamed field, a body that is not JSON, a transient error, a dependency that goes down,
//! expiries and overflows; the ingester then reads the DLQs in [`topology::DEMO_DLQS`].
//! `run` drives it all at a steady low rate; `reset` removes everything it created.
//!
//! Policy: the demo is a guest on the operator's broker and database. Every broker name
//! carries a prefix (`demo`), its one table is `public.demo_orders`, and `reset` removes
//! exactly those and the rows Revenant stored about them, nothing else.

pub mod behaviour;
pub mod command;
pub mod consumers;
pub mod run;
pub mod service;
pub mod topology;

pub use command::command;
pub use run::{DEFAULT_RATE_PER_SEC, ResetSummary, reset, reset_with, run, run_with};
pub use topology::{DEMO_DLQS, Names};

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("invalid demo prefix `{0}`: letters, digits, '-', '_' and '.' only, at most 100")]
    InvalidPrefix(String),
    #[error(transparent)]
    Outbox(#[from] engine::outbox::store::StoreError),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}
