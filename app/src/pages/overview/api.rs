//! The Overview's server functions and wire types: the two engines' health, the roles' heartbeats.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DependencyView {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HeartbeatView {
    pub role: String,
    pub instance: String,
    pub host: String,
    pub last_seen_secs: i64,
    pub detail: String,
    /// One line for the table: for a relay, its window, marks and crash duplicate bound.
    pub summary: String,
}

#[server(prefix = "/api", endpoint = "dependencies")]
pub async fn dependency_status() -> Result<Vec<DependencyView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let (pg, mut mq, blocked) = tokio::join!(
        engine::health::postgres(&state.pool),
        state.broker.check(),
        engine::heartbeats::blocked(&state.pool)
    );
    // Reachable is not the whole story: a broker with an alarm accepts connections and blocks publishers.
    if let Some(b) = blocked.ok().and_then(|b| b.into_iter().next()) {
        mq.detail = format!("{} · publishers blocked ({})", mq.detail, b.reason);
    }
    Ok([pg, mq].into_iter().map(|d| DependencyView { name: d.name.to_string(), ok: d.ok, detail: d.detail }).collect())
}

#[server(prefix = "/api", endpoint = "heartbeats")]
pub async fn heartbeats() -> Result<Vec<HeartbeatView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    Ok(engine::heartbeats::recent(&state.pool)
        .await?
        .into_iter()
        .map(|h| HeartbeatView {
            summary: summary(&h.role, &h.detail),
            last_seen_secs: h.age_secs as i64,
            detail: h.detail.to_string(),
            role: h.role,
            instance: h.instance,
            host: h.host,
        })
        .collect())
}

/// What an on-call engineer wants from a heartbeat at a glance: a block by RabbitMQ first.
#[cfg(feature = "ssr")]
fn summary(role: &str, d: &serde_json::Value) -> String {
    let base = role_summary(role, d);
    let Some(b) = d.get("blocked").filter(|b| b.is_object()) else { return base };
    let reason = b.get("reason").and_then(serde_json::Value::as_str).unwrap_or("blocked");
    let since = b
        .get("since")
        .and_then(serde_json::Value::as_str)
        .and_then(|s| s.parse::<chrono::DateTime<chrono::Utc>>().ok());
    let secs = since.map_or(0, |t| (chrono::Utc::now() - t).num_seconds());
    let blocked = format!("publishers blocked by RabbitMQ ({reason}) for {}; waiting", crate::format::age_secs(secs));
    if base.is_empty() { blocked } else { format!("{blocked} · {base}") }
}

#[cfg(feature = "ssr")]
fn role_summary(role: &str, d: &serde_json::Value) -> String {
    let n = |k: &str| d.get(k).and_then(serde_json::Value::as_u64);
    match role {
        "relay" => {
            let base = match (n("window"), n("mark_batch"), n("duplicate_bound")) {
                (Some(w), Some(m), Some(b)) => {
                    format!("window {w} · marks in groups of ≤ {m} · a kill -9 re-sends ≤ {b}")
                }
                (Some(w), _, _) => format!("window {w}"),
                _ => String::new(),
            };
            // Which sources this instance publishes, and which it stands by for.
            let sources: Vec<String> = d
                .get("sources")
                .and_then(serde_json::Value::as_array)
                .map(|list| {
                    list.iter()
                        .filter_map(|s| {
                            let name = s.get("name")?.as_str()?;
                            let active = s.get("active").and_then(serde_json::Value::as_bool).unwrap_or(false);
                            Some(if active { name.to_string() } else { format!("{name} (standby)") })
                        })
                        .collect()
                })
                .unwrap_or_default();
            if sources.len() > 1 { format!("{base} · sources: {}", sources.join(", ")) } else { base }
        }
        "replay" => match (n("plans_running"), n("sent"), n("failed")) {
            (Some(p), Some(s), Some(f)) => match n("unconfirmed").filter(|u| *u > 0) {
                Some(u) => format!("plans running {p} · sent {s} · failed {f} · unconfirmed {u} (sent again)"),
                None => format!("plans running {p} · sent {s} · failed {f}"),
            },
            _ => String::new(),
        },
        "ingest" => d
            .get("queues")
            .and_then(serde_json::Value::as_array)
            .map(|q| q.iter().filter_map(serde_json::Value::as_str).collect::<Vec<_>>().join(", "))
            .unwrap_or_default(),
        _ => String::new(),
    }
}
