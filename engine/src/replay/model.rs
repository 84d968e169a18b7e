//! What the console sends to plan a replay and reads back about it.
//!
//! Policy: a plan row carries its own progress counters (sent, failed, cancelled), kept by
//! the same statements that change item states, so progress is one cheap read by id even
//! for a plan of 100 000 messages.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use types::{ItemStatus, Order, PlanStatus, TargetMode};

use crate::dead_letter::store::ListFilter;

/// What the operator picked. Only dead letters awaiting triage are ever taken.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
// One per plan or preview, never in a hot loop: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Selection {
    /// One message, or a hand-picked selection.
    Ids(Vec<i64>),
    /// A failure group.
    Group(i64),
    /// Everything matching the list filter at the moment the plan is created.
    Filter(ListFilter),
}

impl Selection {
    /// The set in words, as the preview and the plan's page restate it.
    pub fn words(&self) -> String {
        match self {
            Selection::Ids(ids) if ids.len() == 1 => format!("dead letter #{}", ids[0]),
            Selection::Ids(ids) => format!("{} dead letters picked one by one", ids.len()),
            Selection::Group(id) => format!("failure group #{id}"),
            Selection::Filter(f) => format!("what matched {}", f.words()),
        }
    }
}

/// Where the messages go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum Target {
    /// Each message to the queue it died in (from `x-death`, or the failure headers its
    /// framework set), through the default exchange: only that queue gets a copy, never the
    /// sibling queues bound to the same routing key. The safe default.
    Origin,
    /// Each message's original exchange and (first) routing key, from its `x-death`: every
    /// queue bound to that key gets a copy (the preview lists them).
    Original,
    Exchange {
        exchange: String,
        routing_key: String,
    },
    /// A queue, through the default exchange.
    Queue {
        queue: String,
    },
}

impl Target {
    pub fn mode(&self) -> TargetMode {
        match self {
            Self::Origin => TargetMode::Origin,
            Self::Original => TargetMode::Original,
            Self::Exchange { .. } => TargetMode::Exchange,
            Self::Queue { .. } => TargetMode::Queue,
        }
    }

    /// The fixed (exchange, routing key), or None when each message keeps its own.
    pub fn fixed(&self) -> Option<(&str, &str)> {
        match self {
            Self::Origin | Self::Original => None,
            Self::Exchange { exchange, routing_key } => Some((exchange, routing_key)),
            Self::Queue { queue } => Some(("", queue)),
        }
    }
}

/// One destination of a preview, with what the broker says about it.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    pub exchange: String,
    pub routing_key: String,
    /// Messages of the selection going there.
    pub count: i64,
    /// From a passive declare; None when the broker could not be asked.
    pub exists: Option<bool>,
    /// Set when the destination is a queue (a queue target, or the default exchange).
    pub queue: Option<String>,
    /// Consumers on that queue right now.
    pub consumers: Option<u32>,
    /// Through an exchange: every queue the broker would route it to (from the management
    /// API); None when that could not be read or routing cannot be told from a snapshot.
    pub reaches: Option<Vec<String>>,
}

/// What a plan would do, shown before anything is sent.
#[derive(Debug, Clone, Serialize)]
pub struct Preview {
    pub count: i64,
    /// Destinations, largest first (at most `preview::MAX_TARGETS`).
    pub targets: Vec<TargetCheck>,
    /// True when there are more destinations than listed.
    pub more_targets: bool,
    /// Messages with no destination for this target (no `x-death` and no failure headers
    /// naming one): the plan is refused; pick an exchange or queue instead.
    pub without_destination: i64,
    /// The queues the selection's messages died in, most messages first (at most a few):
    /// what the "a queue" field is prefilled with.
    pub origin_queues: Vec<String>,
    /// Messages of the selection that were replayed before (sent by an earlier plan, or
    /// themselves a replay that died again).
    pub already_replayed: i64,
    /// The kinds of message in the selection (message type, body shape, count), largest
    /// first, at most [`super::preview::MAX_KINDS`]: more than one means the set mixes kinds.
    pub kinds: Vec<(Option<String>, Option<String>, i64)>,
    pub needs_typed_confirmation: bool,
    /// Why the broker checks are missing, when they are.
    pub broker_error: Option<String>,
}

/// A plan to create.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreatePlan {
    pub selection: Selection,
    pub target: Target,
    /// Messages per second; None for as fast as confirms allow.
    pub rate_per_sec: Option<f32>,
    /// None: now.
    pub start_at: Option<DateTime<Utc>>,
    /// Whole plan, per routing key, per header, or none.
    pub order: Order,
    /// Pause on its own when more than this share (0 < s ≤ 1) of recently sent messages
    /// died again within `auto_pause_window_secs`.
    pub auto_pause_share: Option<f32>,
    pub auto_pause_window_secs: i32,
    /// The number of messages, as typed by the operator; required above
    /// [`super::TYPED_CONFIRMATION_ABOVE`], and when given it must match the frozen set.
    pub confirm_count: Option<i64>,
}

impl CreatePlan {
    pub fn new(selection: Selection, target: Target) -> Self {
        Self {
            selection,
            target,
            rate_per_sec: None,
            start_at: None,
            order: Order::None,
            auto_pause_share: None,
            auto_pause_window_secs: 300,
            confirm_count: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Plan {
    pub id: i64,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub source: serde_json::Value,
    pub target_mode: TargetMode,
    pub target_exchange: Option<String>,
    pub target_routing_key: Option<String>,
    pub rate_per_sec: Option<f32>,
    pub start_at: DateTime<Utc>,
    pub ordered: bool,
    /// Per-key order (`routing_key`, `header:<name>`); see [`Plan::order`].
    pub order_by: Option<String>,
    pub status: PlanStatus,
    pub auto_pause_share: Option<f32>,
    pub auto_pause_window_secs: i32,
    pub paused_reason: Option<String>,
    pub total: i64,
    pub sent: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl Plan {
    pub fn order(&self) -> Order {
        Order::from_columns(self.ordered, self.order_by.as_deref())
    }

    /// Items still to send.
    pub fn left(&self) -> i64 {
        (self.total - self.sent - self.failed - self.cancelled).max(0)
    }
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct PlanItem {
    pub plan_id: i64,
    pub dead_letter_id: i64,
    pub seq: i64,
    pub exchange: String,
    pub routing_key: String,
    pub status: ItemStatus,
    /// The broker's reason, for a failed item.
    pub error: Option<String>,
    pub sent_at: Option<DateTime<Utc>>,
    pub settled_at: Option<DateTime<Utc>>,
}
