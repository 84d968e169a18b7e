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
    let (pg, mq) = tokio::join!(engine::health::postgres(&state.pool), state.broker.check());
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

/// What an on-call engineer wants from a heartbeat at a glance.
#[cfg(feature = "ssr")]
fn summary(role: &str, d: &serde_json::Value) -> String {
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
            (Some(p), Some(s), Some(f)) => format!("plans running {p} · sent {s} · failed {f}"),
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
