//! Replay: send dead letters back to RabbitMQ, the most dangerous button in the console.
//!
//! Policy (design invariant 2): the set to replay is resolved by the server and frozen when
//! the plan is created; that one transaction writes the plan, its items, the dead letters'
//! move awaiting → replaying, and the audit entry. A publisher (any instance, under a lease
//! on the plan) sends each item with publisher confirms, persistent and `mandatory`, as an
//! exact copy of the dead letter (of its latest edit, if edited, plus `x-revenant-edited`)
//! plus `x-revenant-replay-id` / `x-revenant-replayed-by`, and marks it sent only after its
//! own confirm, in group commits of many marks (`marks`). A crash re-sends what was not
//! marked, at most the window plus `mark_batch` (at-least-once, never lost); a return
//! or nack marks the item failed with the broker's reason and puts the dead letter back to
//! awaiting.
//!
//! - `model`: what the UI sends and reads (selection, target, plan rows, items).
//! - `selection`: a selection → the SQL that resolves it, streamed inside PostgreSQL.
//! - `preview`: what a plan would do; `plan`: create, pause, resume, cancel, each audited
//!   with its effect; `progress`: plans, their counters and items.
//! - `items`: the publisher's reads and its group marks; `marks`: a plan's mark flusher.
//! - `broker`: passive checks (exchange exists, queue consumers) on throwaway channels.
//! - `publisher`, `sender`: the worker role, and one plan's send loop; `keys`: a plan ordered
//!   per routing key or header value (one in flight per key, a failed key's later messages
//!   held back).
//! - `autopause`, `lineage`, `stats`: the died-again brake, a message's story, counters.
//! - `edit`: a new version of one dead letter (body, headers) that its replays send instead.

pub mod autopause;
pub mod broker;
pub mod config;
pub mod edit;
pub mod edit_log;
mod heartbeat;
pub mod items;
mod keys;
pub mod lineage;
pub mod marks;
pub mod model;
pub mod plan;
pub mod preview;
pub mod progress;
pub mod publisher;
pub mod selection;
mod sender;
pub mod stats;

pub use model::{CreatePlan, Order, Plan, PlanItem, Preview, Selection, Target, TargetCheck, TargetMode};
pub use stats::ReplayStats;

/// Header naming the replay item that sent a message: `"<plan id>:<dead letter id>"`.
pub const REPLAY_ID_HEADER: &str = "x-revenant-replay-id";
/// Header naming the operator who created the plan that sent it.
pub const REPLAYED_BY_HEADER: &str = "x-revenant-replayed-by";
/// Plans larger than this ask the operator to type the number of messages.
pub const TYPED_CONFIRMATION_ABOVE: i64 = 100;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("replay plan {0} not found")]
    NotFound(i64),
    #[error("dead letter {0} not found")]
    DeadLetterNotFound(i64),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

impl ReplayError {
    /// Maps the replay tables' named constraints to a conflict the operator can act on.
    pub(crate) fn from_db(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(d) if d.constraint() == Some("replay_items_pkey") => {
                Self::Conflict("a message appears twice in the plan".into())
            }
            sqlx::Error::Database(d) if d.constraint().is_some_and(|c| c.starts_with("replay_plans_")) => {
                Self::Invalid(format!("plan refused by the database: {}", d.message()))
            }
            _ => Self::Db(e),
        }
    }
}
