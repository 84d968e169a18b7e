//! Server functions for replay plans: preview, create, progress, pause / resume / cancel,
//! and a dead letter's story.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

pub use types::{ItemStatus, Order, PlanStatus};

use crate::error::AppError;
use crate::pages::dead_letters::api::DlQuery;

/// What to replay, as the page sends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// Built once per click and sent as JSON: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum SelectionInput {
    Ids(Vec<i64>),
    Filter(DlQuery),
}

/// Where to, as the page sends it: mode `original`, `exchange` or `queue`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetInput {
    pub mode: String,
    pub exchange: String,
    pub routing_key: String,
    pub queue: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanOptions {
    pub rate_per_sec: String,
    pub start_in_mins: String,
    pub order: Order,
    pub auto_pause_percent: String,
    pub confirm_count: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetView {
    pub exchange: String,
    pub routing_key: String,
    pub count: i64,
    pub exists: Option<bool>,
    pub queue: Option<String>,
    pub consumers: Option<u32>,
    /// Through an exchange: the queues it routes to (None when unknown).
    pub reaches: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviewView {
    /// The set in words (the filter it was taken with, the group, or the ids).
    #[serde(default)]
    pub selection: String,
    pub count: i64,
    pub targets: Vec<TargetView>,
    pub more_targets: bool,
    pub without_destination: i64,
    pub origin_queues: Vec<String>,
    pub already_replayed: i64,
    /// Message type, body shape and count of each kind in the set, largest first.
    pub kinds: Vec<(Option<String>, Option<String>, i64)>,
    pub needs_typed_confirmation: bool,
    pub broker_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanView {
    pub id: i64,
    /// The set the plan froze, in words.
    #[serde(default)]
    pub selection: String,
    pub created_by: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub target: String,
    pub rate_per_sec: Option<f32>,
    pub start_at: chrono::DateTime<chrono::Utc>,
    pub order: Order,
    pub status: PlanStatus,
    pub paused_reason: Option<String>,
    pub total: i64,
    pub sent: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub left: i64,
    /// Why a live plan is not moving: no replay publisher holds a broker connection now.
    #[serde(default)]
    pub waiting: Option<String>,
    /// Sent messages that died again since (`replay_of`), by the failure group they fell into.
    #[serde(default)]
    pub died_again: Vec<(Option<i64>, i64)>,
    /// A per-key ordered plan's keys held back by a failure, each with the dead letter that
    /// failed first (at most [`HELD_KEYS_SHOWN`]).
    #[serde(default)]
    pub held_keys: Vec<(String, i64)>,
    /// Items with no confirm in time: they may have been delivered, and are sent again.
    #[serde(default)]
    pub unconfirmed: i64,
}

/// Held-back keys a plan page lists.
pub const HELD_KEYS_SHOWN: usize = 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemView {
    pub dead_letter_id: i64,
    pub seq: i64,
    pub exchange: String,
    pub routing_key: String,
    pub status: ItemStatus,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoryView {
    pub at: chrono::DateTime<chrono::Utc>,
    pub dead_letter_id: i64,
    pub kind: String,
    pub text: String,
}

#[cfg(feature = "ssr")]
mod server;

#[server(prefix = "/api", endpoint = "replay/preview")]
pub async fn replay_preview(selection: SelectionInput, target: TargetInput) -> Result<PreviewView, AppError> {
    crate::guard::require(engine::auth::Role::Operator)?;
    server::preview(selection, target).await
}

#[server(prefix = "/api", endpoint = "replay/create")]
pub async fn replay_create(
    selection: SelectionInput,
    target: TargetInput,
    options: PlanOptions,
) -> Result<i64, AppError> {
    let who = crate::guard::require(engine::auth::Role::Operator)?;
    server::create(&who, selection, target, options).await
}

/// A failure group's awaiting messages to their origin queue, from a plain HTML form (the
/// group's replay page works before its script loads): on success the browser goes to the
/// plan's page; when refused, back to the preview with why, in a word (`refused=`).
#[server(prefix = "/api", endpoint = "replay/group")]
pub async fn replay_group(group: i64, rate: String, confirm_count: String) -> Result<i64, AppError> {
    let who = crate::guard::require(engine::auth::Role::Operator)?;
    let selection = SelectionInput::Filter(crate::pages::dead_letters::api::DlQuery {
        group: Some(group.to_string()),
        ..Default::default()
    });
    let target = TargetInput { mode: "origin".into(), ..Default::default() };
    let options = PlanOptions {
        rate_per_sec: rate,
        auto_pause_percent: DEFAULT_AUTO_PAUSE_PERCENT.into(),
        confirm_count,
        ..Default::default()
    };
    let created = server::create(&who, selection, target, options).await;
    let to = match &created {
        Ok(id) => types::routes::replay_plan(*id),
        Err(e) => format!("{}?refused={}", types::routes::group_replay(group), Refused::of(e).word()),
    };
    leptos_axum::redirect(&to);
    created
}

/// The auto-pause share the planner starts with: a plan pauses when this many percent of
/// what it sent die again.
pub const DEFAULT_AUTO_PAUSE_PERCENT: &str = "50";

/// Why a plan from a form was not created, as the page that shows it says it; a word in the
/// address, so a crafted link can only pick one of these sentences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The set changed since the preview (the typed count no longer matches).
    Changed,
    /// Nothing awaits triage any more, or the typed count was missing or wrong.
    Invalid,
    Failed,
}

impl Refused {
    pub fn of(e: &AppError) -> Self {
        match e {
            AppError::Conflict(_) => Refused::Changed,
            AppError::Invalid(_) => Refused::Invalid,
            _ => Refused::Failed,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Refused::Changed => "changed",
            Refused::Invalid => "invalid",
            Refused::Failed => "failed",
        }
    }

    pub fn parse(word: &str) -> Option<Self> {
        [Refused::Changed, Refused::Invalid, Refused::Failed].into_iter().find(|r| r.word() == word)
    }

    pub fn sentence(self) -> &'static str {
        match self {
            Refused::Changed => {
                "Not created: the group changed since that preview (messages arrived or were triaged). The preview below is current: check it and replay again."
            }
            Refused::Invalid => {
                "Not created: nothing of this group awaits triage any more, or the typed count did not match. The preview below is current."
            }
            Refused::Failed => "Not created: the server could not create the plan (its log says why). Try again.",
        }
    }
}

#[server(prefix = "/api", endpoint = "replay/list")]
pub async fn replay_list() -> Result<Vec<PlanView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    server::list().await
}

/// A plan and one page of its items in send order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanPage {
    pub plan: PlanView,
    pub items: Vec<ItemView>,
    /// The `after` of the next page; None on the last.
    pub next_after: Option<i64>,
}

/// Items shown per page of a plan.
pub const ITEMS_PER_PAGE: i64 = 200;

/// `after`: the last `seq` of the previous page; `status`: only items in it (`failed`, …).
#[server(prefix = "/api", endpoint = "replay/get")]
pub async fn replay_get(id: i64, after: Option<i64>, status: Option<ItemStatus>) -> Result<PlanPage, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    server::get(id, after, status).await
}

#[server(prefix = "/api", endpoint = "replay/control")]
pub async fn replay_control(id: i64, action: String) -> Result<PlanView, AppError> {
    let who = crate::guard::require(engine::auth::Role::Operator)?;
    server::control(&who, id, &action).await
}

#[server(prefix = "/api", endpoint = "dead-letters/story")]
pub async fn dl_story(id: i64) -> Result<Vec<StoryView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    server::story(id).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_travels_as_a_word_and_reads_back_and_nothing_else_does() {
        for r in [Refused::Changed, Refused::Invalid, Refused::Failed] {
            assert_eq!(Refused::parse(r.word()), Some(r));
        }
        assert_eq!(Refused::parse("<script>"), None);
        assert_eq!(Refused::of(&AppError::Conflict("now 5".into())), Refused::Changed);
        assert_eq!(Refused::of(&AppError::Invalid("nothing to replay".into())), Refused::Invalid);
        assert_eq!(Refused::of(&AppError::Internal), Refused::Failed);
    }
}
