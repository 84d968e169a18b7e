//! Server functions of the Outbox pages, and what they return.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

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
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RowView {
    pub id: String,
    pub event_id: String,
    pub event_type: String,
    pub exchange: String,
    pub routing_key: String,
    pub age_secs: i64,
    pub created_at: String,
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub payload_size: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OutboxPage {
    pub source: String,
    pub bucket: String,
    pub rows: Vec<RowView>,
    pub next: Option<String>,
    pub count: String,
    pub native: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DetailView {
    pub source: String,
    pub row: RowView,
    pub published_at: Option<String>,
    pub next_attempt_at: Option<String>,
    pub content_type: Option<String>,
    pub headers: Option<String>,
    pub archived_reason: Option<String>,
    pub lease_owner: Option<String>,
    pub payload: BodyView,
    /// Dead letters that carry this event id as their message id (what happened downstream).
    pub downstream: Vec<(i64, String, String)>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FrozenView {
    pub selection_id: String,
    pub count: i64,
    pub action: String,
    pub source: String,
}

#[cfg(feature = "ssr")]
mod server {
    use engine::sources::{Source, query};

    use super::*;

    pub fn source(name: Option<&str>) -> Result<Source, AppError> {
        let state = crate::state::app_state()?;
        let name = name.filter(|n| !n.is_empty()).unwrap_or(engine::sources::NATIVE);
        engine::sources::find(&state.sources, name)
            .cloned()
            .ok_or_else(|| AppError::NotFound(format!("no outbox source named {name}")))
    }

    fn minutes(field: &str, v: &Option<String>) -> Result<Option<i64>, AppError> {
        match v.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => match s.parse::<i64>() {
                Ok(n) if (1..=525_600).contains(&n) => Ok(Some(n)),
                _ => Err(AppError::Invalid(format!("{field}: `{s}` is not a number of minutes between 1 and 525600"))),
            },
        }
    }

    pub fn filter(q: &OutboxQuery) -> Result<query::Filter, AppError> {
        let clean = |v: &Option<String>| v.as_ref().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        let bucket = match clean(&q.bucket) {
            None => query::Bucket::Pending,
            Some(b) => query::Bucket::parse(&b).ok_or_else(|| AppError::Invalid(format!("unknown list `{b}`")))?,
        };
        Ok(query::Filter {
            bucket,
            event_type: clean(&q.event_type),
            routing_key: clean(&q.routing_key),
            error: clean(&q.error),
            payload: clean(&q.payload),
            event_id: clean(&q.event_id),
            older_than_mins: minutes("older than", &q.older_than_mins)?,
            newer_than_mins: minutes("newer than", &q.newer_than_mins)?,
        })
    }

    pub fn row_view(r: query::RowSummary) -> RowView {
        let now = chrono::Utc::now();
        RowView {
            age_secs: (now - r.created_at).num_seconds(),
            created_at: crate::format::time(r.created_at),
            id: r.id,
            event_id: r.event_id,
            event_type: r.event_type,
            exchange: r.exchange,
            routing_key: r.routing_key,
            status: r.status,
            attempts: r.attempts,
            last_error: r.last_error,
            payload_size: r.payload_size,
        }
    }

    pub fn action_error(e: engine::sources::actions::ActionError) -> AppError {
        use engine::sources::actions::ActionError as E;
        match e {
            E::Invalid(m) => AppError::Invalid(m),
            E::SelectionGone => AppError::Conflict(e.to_string()),
            E::Db(e) => AppError::from(e),
        }
    }
}

#[server(prefix = "/api", endpoint = "outbox/health")]
pub async fn outbox_health() -> Result<Vec<SourceHealthView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let now = chrono::Utc::now();
    let mut out = Vec::new();
    for src in state.sources.iter() {
        let h = engine::sources::query::health(src).await?;
        out.push(SourceHealthView {
            source: h.source,
            oldest_pending_secs: h.oldest_pending.map(|t| (now - t).num_seconds()),
            pending: crate::format::count(h.pending.n, h.pending.capped),
            stuck: crate::format::count(h.stuck.n, h.stuck.capped),
            failed: crate::format::count(h.failed.n, h.failed.capped),
            stuck_after_secs: src.stuck_after.as_secs() as i64,
        });
    }
    Ok(out)
}

#[server(prefix = "/api", endpoint = "outbox/list")]
pub async fn outbox_list(q: OutboxQuery, after: Option<String>) -> Result<OutboxPage, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let src = server::source(q.source.as_deref())?;
    let f = server::filter(&q)?;
    let (rows, next) = engine::sources::query::list(&src, &f, after.as_deref(), 50).await?;
    let count = engine::sources::query::count(&src, &f).await?;
    Ok(OutboxPage {
        source: src.name.clone(),
        bucket: f.bucket.as_str().into(),
        rows: rows.into_iter().map(server::row_view).collect(),
        next,
        count: crate::format::count(count.n, count.capped),
        native: src.native(),
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
            sqlx::Error::Database(_) => AppError::NotFound(format!("no outbox row {id} in {source}")),
            other => AppError::from(other),
        })?
        .ok_or_else(|| AppError::NotFound(format!("no outbox row {id} in {source}")))?;
    let downstream: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT id, queue, status FROM dead_letters WHERE message_id = $1 ORDER BY ingested_at DESC LIMIT 20",
    )
    .bind(&d.summary.event_id)
    .fetch_all(&state.pool)
    .await?;
    let max = if full { usize::MAX } else { 64 * 1024 };
    Ok(DetailView {
        source: src.name.clone(),
        published_at: d.summary.published_at.map(crate::format::time),
        next_attempt_at: d.next_attempt_at.map(crate::format::time),
        content_type: d.content_type,
        headers: d.headers.map(|h| serde_json::to_string_pretty(&h).unwrap_or_default()),
        archived_reason: d.archived_reason,
        lease_owner: d.lease_owner,
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
    let action = engine::sources::actions::Action::parse(&action)
        .ok_or_else(|| AppError::Invalid(format!("unknown action `{action}`")))?;
    let ip = crate::guard::client_ip();
    let actor = engine::sources::actions::Actor { principal: &principal, ip: ip.as_deref() };
    engine::sources::actions::act_on_ids(&state.pool, &src, action, &ids, reason.as_deref(), &actor)
        .await
        .map_err(server::action_error)
}

#[server(prefix = "/api", endpoint = "outbox/freeze")]
pub async fn outbox_freeze(q: OutboxQuery, action: String, reason: Option<String>) -> Result<FrozenView, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Operator)?;
    let state = crate::state::app_state()?;
    let src = server::source(q.source.as_deref())?;
    let f = server::filter(&q)?;
    let act = engine::sources::actions::Action::parse(&action)
        .ok_or_else(|| AppError::Invalid(format!("unknown action `{action}`")))?;
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
