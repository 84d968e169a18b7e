//! The firing-alerts banner's server function and wire type.

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
