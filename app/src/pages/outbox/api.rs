//! Server functions of the Outbox pages, and what they return.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

pub use types::Bucket;

use crate::body_view::BodyView;
use crate::error::AppError;

/// The filter as it travels in the URL and in forms: strings, validated on the server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OutboxQuery {
    pub source: Option<String>,
    pub bucket: Option<String>,
    pub event_type: Option<String>,
    pub routing_key: Option<String>,
    pub error: Option<String>,
    pub payload: Option<String>,
    pub event_id: Option<String>,
    pub older_than_mins: Option<String>,
    pub newer_than_mins: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SourceHealthView {
    pub source: String,
    pub oldest_pending_secs: Option<i64>,
    pub pending: String,
    pub stuck: String,
    pub failed: String,
    pub stuck_after_secs: i64,
    /// Who publishes the source: "relayed by HOST (instance …) · N/s", or why nobody does.
    pub relay: String,
    /// For a source read from the commit stream: its slot, how far it lags and what is held.
    pub stream: Option<StreamView>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StreamView {
    /// "commit stream · slot revenant_x · read now · holds back 12 KiB of WAL", or why not.
    pub line: String,
    /// "3 events held behind 1 failed event of their key: retry or archive it", when any.
    pub held: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RowView {
    pub id: String,
    pub event_id: String,
    pub event_type: String,
    pub exchange: String,
    pub routing_key: String,
    pub age_secs: i64,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub payload_size: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OutboxPage {
    pub source: String,
    pub bucket: Bucket,
    pub rows: Vec<RowView>,
    pub next: Option<String>,
    /// The `before` cursor of the page before this one; None on the first page.
    pub prev: Option<String>,
    pub count: String,
    /// Archive applies: Revenant's schema, or a mapped table Revenant relays.
    pub can_archive: bool,
    /// Finding this source's pending rows scans a large table (the index to add).
    pub scan_warning: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DetailView {
    pub source: String,
    pub row: RowView,
    pub published_at: Option<chrono::DateTime<chrono::Utc>>,
    pub next_attempt_at: Option<chrono::DateTime<chrono::Utc>>,
    pub content_type: Option<String>,
    pub headers: Option<String>,
    pub archived_reason: Option<String>,
    pub lease_owner: Option<String>,
    /// Archive applies to this row's source (see [`OutboxPage::can_archive`]).
    pub can_archive: bool,
    pub payload: BodyView,
    /// Dead letters that carry this event id as their message id (what happened downstream).
    pub downstream: Vec<(i64, String, types::DeadLetterStatus)>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FrozenView {
    pub selection_id: String,
    pub count: i64,
    pub action: String,
    pub source: String,
}

#[cfg(feature = "ssr")]
mod server;

#[server(prefix = "/api", endpoint = "outbox/health")]
pub async fn outbox_health() -> Result<Vec<SourceHealthView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let now = chrono::Utc::now();
    let relays = engine::heartbeats::source_relays(&state.pool).await?;
    let mut out = Vec::new();
    for src in state.sources.iter() {
        let h = engine::sources::query::health(src).await?;
        let relay = match relays.iter().find(|r| r.source == src.name) {
            Some(r) => format!(
                "relayed by {} (instance {}) · {}",
                r.host,
                r.instance.get(..8).unwrap_or(&r.instance),
                if r.connected { format!("{}/s", r.rate_per_sec) } else { "not connected to RabbitMQ".into() }
            ),
            None if src.relay => "no relay running for this source".to_string(),
            None => "published by its own service (relay = false)".to_string(),
        };
        let stream = match &src.capture {
            engine::settings::Capture::Logical { .. } if src.relay => Some(server::stream_view(src).await?),
            _ => None,
        };
        out.push(SourceHealthView {
            source: h.source,
            oldest_pending_secs: h.oldest_pending.map(|t| (now - t).num_seconds()),
            pending: crate::format::count(h.pending.n, h.pending.capped),
            stuck: crate::format::count(h.stuck.n, h.stuck.capped),
            failed: crate::format::count(h.failed.n, h.failed.capped),
            stuck_after_secs: src.stuck_after.as_secs() as i64,
            relay,
            stream,
        });
    }
    Ok(out)
}

/// A page of the list: the first, the one `after` a cursor, or the one `before` it.
#[server(prefix = "/api", endpoint = "outbox/list")]
pub async fn outbox_list(
    #[server(default)] q: OutboxQuery,
    after: Option<String>,
    before: Option<String>,
) -> Result<OutboxPage, AppError> {
    use engine::sources::query::{self, At};
    crate::guard::require(engine::auth::Role::Viewer)?;
    let src = server::source(q.source.as_deref())?;
    let f = server::filter(&q)?;
    let at = match (before.as_deref(), after.as_deref()) {
        (Some(b), _) => At::Before(b),
        (None, Some(a)) => At::After(a),
        (None, None) => At::Start,
    };
    let query::Page { rows, next, prev } = query::page(&src, &f, at, 50).await?;
    let count = engine::sources::query::count(&src, &f).await?;
    Ok(OutboxPage {
        source: src.name.clone(),
        bucket: f.bucket,
        rows: rows.into_iter().map(server::row_view).collect(),
        next,
        prev,
        count: crate::format::count(count.n, count.capped),
        can_archive: src.cols.relayed,
        scan_warning: engine::sources::query::pending_scan_warning(&src).await?,
    })
}

#[server(prefix = "/api", endpoint = "outbox/detail")]
pub async fn outbox_detail(source: String, id: String, full: bool) -> Result<DetailView, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let src = server::source(Some(&source))?;
    let d = engine::sources::query::detail(&src, &id)
        .await
        .map_err(|e| match e {
            // An id of the wrong type for the column is "no such row", not a crash.
            engine::db::Error::Database(_) => AppError::NotFound(format!("no outbox row {id} in {source}")),
            other => AppError::from(other),
        })?
        .ok_or_else(|| AppError::NotFound(format!("no outbox row {id} in {source}")))?;
    let downstream = engine::dead_letter::downstream::of_message(&state.pool, &d.summary.event_id, 20)
        .await?
        .into_iter()
        .map(|l| (l.id, l.queue, l.status))
        .collect();
    let max = if full { usize::MAX } else { 64 * 1024 };
    Ok(DetailView {
        source: src.name.clone(),
        published_at: d.summary.published_at,
        next_attempt_at: d.next_attempt_at,
        content_type: d.content_type,
        headers: d.headers.map(|h| serde_json::to_string_pretty(&h).unwrap_or_default()),
        archived_reason: d.archived_reason,
        lease_owner: d.lease_owner,
        can_archive: src.cols.relayed,
        payload: BodyView::render(&d.payload, max),
        row: server::row_view(d.summary),
        downstream,
    })
}

#[server(prefix = "/api", endpoint = "outbox/act")]
pub async fn outbox_act(
    source: String,
    action: String,
    ids: Vec<String>,
    reason: Option<String>,
) -> Result<u64, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Operator)?;
    let state = crate::state::app_state()?;
    let src = server::source(Some(&source))?;
    let action =
        types::RowAction::parse(&action).ok_or_else(|| AppError::Invalid(format!("unknown action `{action}`")))?;
    let ip = crate::guard::client_ip();
    let actor = engine::sources::actions::Actor { principal: &principal, ip: ip.as_deref() };
    engine::sources::actions::act_on_ids(&state.pool, &src, action, &ids, reason.as_deref(), &actor)
        .await
        .map_err(server::action_error)
}

#[server(prefix = "/api", endpoint = "outbox/freeze")]
pub async fn outbox_freeze(
    #[server(default)] q: OutboxQuery,
    action: String,
    reason: Option<String>,
) -> Result<FrozenView, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Operator)?;
    let state = crate::state::app_state()?;
    let src = server::source(q.source.as_deref())?;
    let f = server::filter(&q)?;
    let act =
        types::RowAction::parse(&action).ok_or_else(|| AppError::Invalid(format!("unknown action `{action}`")))?;
    let frozen = engine::sources::actions::freeze(&state.pool, &src, &f, act, reason.as_deref(), &principal)
        .await
        .map_err(server::action_error)?;
    Ok(FrozenView {
        selection_id: frozen.selection_id.to_string(),
        count: frozen.count,
        action,
        source: src.name.clone(),
    })
}

#[server(prefix = "/api", endpoint = "outbox/execute")]
pub async fn outbox_execute(selection_id: String) -> Result<u64, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Operator)?;
    let state = crate::state::app_state()?;
    let id = selection_id.parse().map_err(|_| AppError::Invalid("not a selection id".into()))?;
    let ip = crate::guard::client_ip();
    let actor = engine::sources::actions::Actor { principal: &principal, ip: ip.as_deref() };
    engine::sources::actions::execute(&state.pool, &state.sources, id, &actor).await.map_err(server::action_error)
}
