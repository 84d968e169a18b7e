//! Server functions of the Topology page, what they return, and the pure ordering and
//! counting the page does on it (shared by server and browser, tested without I/O).

#[cfg(feature = "ssr")]
use engine::settings::ExposeSecret;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

pub use types::{Check, Level, Placement, QueueRole, Verdict};

use crate::error::AppError;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QueueView {
    pub name: String,
    pub level: Level,
    /// The pattern of the contract that set the level; `None` means the default (standard).
    pub contract: Option<String>,
    pub role: QueueRole,
    pub consumers: Option<i64>,
    pub ready: Option<i64>,
    pub unacked: Option<i64>,
    pub publish_rate: Option<f64>,
    pub deliver_rate: Option<f64>,
    pub checks: Vec<Check>,
    /// For a dead-letter queue: whether it is in Revenant's watched set (ingested).
    #[serde(default)]
    pub watched: Option<bool>,
    /// The queue's type (`classic`, `quorum`, `stream`) and where it lives.
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub placement: Placement,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExchangeView {
    pub name: String,
    pub checks: Vec<Check>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub checks: Vec<Check>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopologyView {
    pub vhost: String,
    pub taken_at: chrono::DateTime<chrono::Utc>,
    pub reachable: bool,
    /// True when no management URL is configured (rather than configured but not answering).
    pub management_off: bool,
    pub unreachable: Option<String>,
    pub not_checked: Vec<String>,
    pub rabbitmq_version: Option<String>,
    pub nodes: Vec<NodeView>,
    /// Failing critical queues first, then by worst verdict (see `sort_queues`).
    pub queues: Vec<QueueView>,
    pub exchanges: Vec<ExchangeView>,
    /// The management UI, for each queue's link to its page there; None when it is off.
    #[serde(default)]
    pub broker: Option<types::routes::ManagementUi>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContractView {
    /// `None` for a contract from revenant.toml (those cannot be deleted here).
    pub id: Option<i64>,
    pub pattern: String,
    pub level: Level,
    pub note: Option<String>,
    /// `console` or `config`.
    pub origin: String,
    pub created_by: Option<String>,
    pub updated_at: Option<chrono::DateTime<chrono::Utc>>,
    /// A config contract that a console contract with the same pattern replaces.
    pub overridden: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContractsView {
    pub vhost: String,
    pub contracts: Vec<ContractView>,
}

impl QueueView {
    pub fn worst(&self) -> Verdict {
        Verdict::worst(&self.checks)
    }

    /// A critical queue failing a check: what pages someone, so it is listed first.
    pub fn failing_critical(&self) -> bool {
        self.level == Level::Critical && self.worst() == Verdict::Fail
    }
}

/// Failing critical queues first, then worse verdicts, then higher levels, then by name.
pub fn sort_queues(queues: &mut [QueueView]) {
    queues.sort_by(|a, b| {
        b.failing_critical()
            .cmp(&a.failing_critical())
            .then_with(|| b.worst().rank().cmp(&a.worst().rank()))
            .then_with(|| b.level.cmp(&a.level))
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// Queues counted by their worst verdict, and the nodes' failing alarm checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub fail: usize,
    pub warn: usize,
    pub unknown: usize,
    pub pass: usize,
    pub failing_critical: usize,
    pub alarms: usize,
}

impl TopologyView {
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for q in &self.queues {
            match q.worst() {
                Verdict::Fail => s.fail += 1,
                Verdict::Warn => s.warn += 1,
                Verdict::Unknown => s.unknown += 1,
                Verdict::Pass => s.pass += 1,
            }
            s.failing_critical += usize::from(q.failing_critical());
        }
        s.alarms = self.nodes.iter().flat_map(|n| &n.checks).filter(|c| c.verdict == Verdict::Fail).count();
        s
    }
}

#[cfg(feature = "ssr")]
pub(super) mod server;

#[server(prefix = "/api", endpoint = "topology/report")]
pub async fn topology_report() -> Result<TopologyView, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let s = &state.settings;
    let Some(url) = s.management_url.as_ref().map(|u| u.expose_secret()) else {
        let r = engine::topology::unreachable_report(&s.topology_vhost, server::MANAGEMENT_OFF);
        return Ok(server::report_view(r, true));
    };
    let contracts = server::contracts(&state.pool, s).await?;
    let watched = engine::topology::watched(&state.pool).await?;
    let http = engine::topology::http_client().map_err(AppError::internal)?;
    let r = engine::topology::report_or_unreachable(&http, url, &s.topology_vhost, &contracts, &watched).await;
    let ingested: std::collections::HashSet<String> =
        engine::dead_letter::watch::watching(&state.pool).await?.into_iter().collect();
    let mut view = server::report_view(r, false);
    view.broker = engine::management::ui(s, &s.topology_vhost);
    for q in view.queues.iter_mut().filter(|q| q.role == QueueRole::DeadLetter) {
        q.watched = Some(ingested.contains(&q.name));
    }
    Ok(view)
}

#[server(prefix = "/api", endpoint = "topology/contracts")]
pub async fn topology_contracts() -> Result<ContractsView, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let vhost = state.settings.topology_vhost.clone();
    let console = engine::topology::contract::list(&state.pool, Some(&vhost)).await?;
    let config = server::config_contracts(&state.settings)?;
    Ok(ContractsView { contracts: server::contract_views(console, config), vhost })
}

#[server(prefix = "/api", endpoint = "topology/set-contract")]
pub async fn set_contract(pattern: String, level: String, note: Option<String>) -> Result<ContractView, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Operator)?;
    let state = crate::state::app_state()?;
    let level = Level::parse(&level)
        .ok_or_else(|| AppError::Invalid(format!("unknown level `{level}`: critical, standard or disposable")))?;
    let ip = crate::guard::client_ip();
    let mut conn = state.pool.acquire().await?;
    let c = engine::topology::contract::set(
        &mut conn,
        &principal,
        ip.as_deref(),
        &state.settings.topology_vhost,
        pattern.trim(),
        level,
        note.as_deref(),
    )
    .await
    .map_err(server::contract_error)?;
    Ok(server::contract_view(c, false))
}

#[server(prefix = "/api", endpoint = "topology/delete-contract")]
pub async fn delete_contract(id: i64) -> Result<ContractView, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Operator)?;
    let state = crate::state::app_state()?;
    let ip = crate::guard::client_ip();
    let mut conn = state.pool.acquire().await?;
    let c = engine::topology::contract::delete(&mut conn, &principal, ip.as_deref(), id)
        .await
        .map_err(server::contract_error)?;
    Ok(server::contract_view(c, false))
}
