//! The audit log's server function and wire types.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditView {
    pub id: i64,
    pub at: chrono::DateTime<chrono::Utc>,
    pub actor: String,
    pub actor_role: String,
    pub source_ip: String,
    pub action: String,
    pub target: String,
    pub filter: String,
    pub item_count: i64,
    pub outcome: String,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditPage {
    pub rows: Vec<AuditView>,
    pub next_before: Option<i64>,
    /// The `after` cursor of the page before this one (newer entries); None on the first page.
    #[serde(default)]
    pub prev_after: Option<i64>,
}

/// What a non-admin reads in place of a detail only admins see (`engine::audit`).
pub const ADMIN_ONLY: &str = "(detail shown to admins only)";

#[server(prefix = "/api", endpoint = "audit/list")]
pub async fn audit_list(
    actor: Option<String>,
    action: Option<String>,
    text: Option<String>,
    before: Option<i64>,
    after: Option<i64>,
) -> Result<AuditPage, AppError> {
    let reader = crate::guard::require(engine::auth::Role::Viewer)?.role;
    let state = crate::state::app_state()?;
    let clean = |s: Option<String>| s.map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let after = after.filter(|_| before.is_none());
    let filter = engine::audit::AuditFilter {
        actor: clean(actor),
        action: clean(action),
        text: clean(text),
        before_id: before,
        after_id: after,
    };
    let (rows, more) = engine::audit::list(&state.pool, &filter, reader, 50).await?;
    let (first, last) = (rows.first().map(|r| r.id), rows.last().map(|r| r.id));
    // `more` is about the side the page was read towards: newer ones for an `after` page.
    let (next_before, prev_after) = match after {
        Some(_) => (last, first.filter(|_| more)),
        None => (last.filter(|_| more), first.filter(|_| before.is_some())),
    };
    let json = |v: Option<serde_json::Value>| v.map(|v| v.to_string()).unwrap_or_default();
    // A dead-letter filter or a replay's set in words, as the list and the plan say them;
    // anything else as stored.
    let filter_text = |action: &str, v: Option<serde_json::Value>| {
        let words = v.as_ref().and_then(|v| match action {
            "replay.create" => serde_json::from_value::<engine::replay::Selection>(v.clone()).ok().map(|s| s.words()),
            a if a.starts_with("dead_letter.") => {
                engine::dead_letter::store::ListFilter::from_stored(v).map(|f| f.words())
            }
            _ => None,
        });
        words.unwrap_or_else(|| json(v))
    };
    let admin_only = |action: &str| {
        !reader.at_least(engine::auth::Role::Admin) && engine::audit::ADMIN_ONLY_DETAIL.contains(&action)
    };
    Ok(AuditPage {
        rows: rows
            .into_iter()
            .map(|r| AuditView {
                // First: they read `r.action`, which a field below moves.
                detail: if admin_only(&r.action) { ADMIN_ONLY.into() } else { json(r.detail) },
                filter: filter_text(&r.action, r.filter),
                id: r.id,
                at: r.at,
                actor: r.actor,
                actor_role: r.actor_role,
                source_ip: r.source_ip.unwrap_or_default(),
                action: r.action,
                target: r.target.unwrap_or_default(),
                item_count: r.item_count,
                outcome: r.outcome,
            })
            .collect(),
        next_before,
        prev_after,
    })
}
