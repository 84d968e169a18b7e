//! The banner's server functions and wire types: firing alerts, and a broker that blocks publishers.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FiringView {
    pub rule_id: i64,
    pub name: String,
    pub severity: String,
    pub target: Option<String>,
    pub value: Option<f64>,
    pub since_secs: i64,
    pub link: String,
    pub message: Option<String>,
}

#[server(prefix = "/api", endpoint = "alerts/firing")]
pub async fn firing_alerts() -> Result<Vec<FiringView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let now = chrono::Utc::now();
    Ok(engine::alerts::firing(&state.pool)
        .await?
        .into_iter()
        .filter(|a| !a.silenced)
        .map(|a| FiringView {
            rule_id: a.rule_id,
            name: a.name,
            severity: a.severity.as_str().to_string(),
            target: a.target,
            value: a.value,
            since_secs: (now - a.since).num_seconds(),
            link: a.link,
            message: a.message,
        })
        .collect())
}

/// RabbitMQ blocks publishing (a memory or disk alarm): who waits, why, since when.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BlockedView {
    /// The roles that wait ("relay", "replay"), each once.
    pub roles: Vec<String>,
    /// The alarms the management API names ("memory alarm on rabbit@rvn1"), else the broker's reason.
    pub why: String,
    pub since_secs: i64,
}

impl BlockedView {
    /// "RabbitMQ: publishers blocked (memory alarm on rabbit@rvn1) for 2m 10s".
    pub fn line(&self) -> String {
        format!("RabbitMQ: publishers blocked ({}) for {}", self.why, crate::format::age_secs(self.since_secs))
    }
}

#[server(prefix = "/api", endpoint = "broker/blocked")]
pub async fn broker_blocked() -> Result<Option<BlockedView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let blocked = engine::heartbeats::blocked(&state.pool).await?;
    let Some(first) = blocked.first() else { return Ok(None) };
    let alarms = state.broker.alarms().await;
    let why = if alarms.is_empty() { first.reason.clone() } else { alarms.join(", ") };
    let mut roles: Vec<String> = blocked.iter().map(|b| b.role.clone()).collect();
    roles.dedup();
    Ok(Some(BlockedView { roles, why, since_secs: (chrono::Utc::now() - first.since).num_seconds() }))
}
