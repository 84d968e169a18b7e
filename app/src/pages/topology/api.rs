//! Server functions of the Topology page, what they return, and the pure ordering and
//! counting the page does on it (shared by server and browser, tested without I/O).

#[cfg(feature = "ssr")]
use engine::settings::ExposeSecret;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CheckView {
    pub name: String,
    /// `pass`, `warn`, `fail` or `unknown`: the words `Pill` colours.
    pub verdict: String,
    pub reason: String,
    pub fix: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QueueView {
    pub name: String,
    /// `critical`, `standard` or `disposable`.
    pub level: String,
    /// The pattern of the contract that set the level; `None` means the default (standard).
    pub contract: Option<String>,
    /// `work`, `dead-letter` or `retry`.
    pub role: String,
    pub consumers: Option<i64>,
    pub ready: Option<i64>,
    pub unacked: Option<i64>,
    pub publish_rate: Option<f64>,
    pub deliver_rate: Option<f64>,
    pub checks: Vec<CheckView>,
    /// For a dead-letter queue: whether it is in Revenant's watched set (ingested).
    #[serde(default)]
    pub watched: Option<bool>,
    #[serde(default)]
    pub placement: Placement,
}

/// Where a queue lives: its type, a classic queue's node, a quorum queue's leader and members.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Placement {
    pub kind: String,
    pub node: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<String>,
    pub online: Vec<String>,
}

impl Placement {
    /// One line for the queue's row: `quorum · leader rvn1@h · 3/3 members online`.
    pub fn summary(&self) -> String {
        let mut parts = vec![if self.kind.is_empty() { "classic".to_string() } else { self.kind.clone() }];
        // The management API names a quorum queue's leader as its `node` too: say it once.
        if let Some(n) = self.node.as_ref().filter(|_| self.members.is_empty()) {
            parts.push(format!("on {n}"));
        }
        if !self.members.is_empty() {
            parts.push(format!("leader {}", self.leader.as_deref().unwrap_or("none")));
            let on = self.members.iter().filter(|m| self.online.contains(m)).count();
            parts.push(format!("{on}/{} members online", self.members.len()));
        }
        parts.join(" · ")
    }

    /// The members, each marked offline when it is: for the row's second line.
    pub fn members_line(&self) -> Option<String> {
        (!self.members.is_empty()).then(|| {
            let each: Vec<String> = self
                .members
                .iter()
                .map(|m| if self.online.contains(m) { m.clone() } else { format!("{m} (offline)") })
                .collect();
            format!("members {}", each.join(", "))
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExchangeView {
    pub name: String,
    pub checks: Vec<CheckView>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub checks: Vec<CheckView>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopologyView {
    pub vhost: String,
    pub taken_at: String,
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
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContractView {
    /// `None` for a contract from revenant.toml (those cannot be deleted here).
    pub id: Option<i64>,
    pub pattern: String,
    pub level: String,
    pub note: Option<String>,
    /// `console` or `config`.
    pub origin: String,
    pub created_by: Option<String>,
    pub updated_at: Option<String>,
    /// A config contract that a console contract with the same pattern replaces.
    pub overridden: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContractsView {
    pub vhost: String,
    pub contracts: Vec<ContractView>,
}

/// How bad a verdict is: fail > warn > unknown > pass.
pub fn verdict_rank(v: &str) -> u8 {
    match v {
        "fail" => 3,
        "warn" => 2,
        "unknown" => 1,
        _ => 0,
    }
}

fn level_rank(l: &str) -> u8 {
    match l {
        "critical" => 2,
        "standard" => 1,
        _ => 0,
    }
}

/// The worst verdict among `checks`; `pass` when none apply.
pub fn worst(checks: &[CheckView]) -> &str {
    checks.iter().map(|c| c.verdict.as_str()).max_by_key(|v| verdict_rank(v)).unwrap_or("pass")
}

impl QueueView {
    pub fn worst(&self) -> &str {
        worst(&self.checks)
    }

    /// A critical queue failing a check: what pages someone, so it is listed first.
    pub fn failing_critical(&self) -> bool {
        self.level == "critical" && self.worst() == "fail"
    }
}

/// Failing critical queues first, then worse verdicts, then higher levels, then by name.
pub fn sort_queues(queues: &mut [QueueView]) {
    queues.sort_by(|a, b| {
        b.failing_critical()
            .cmp(&a.failing_critical())
            .then_with(|| verdict_rank(b.worst()).cmp(&verdict_rank(a.worst())))
            .then_with(|| level_rank(&b.level).cmp(&level_rank(&a.level)))
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
                "fail" => s.fail += 1,
                "warn" => s.warn += 1,
                "unknown" => s.unknown += 1,
                _ => s.pass += 1,
            }
            s.failing_critical += usize::from(q.failing_critical());
        }
        s.alarms = self.nodes.iter().flat_map(|n| &n.checks).filter(|c| c.verdict == "fail").count();
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
    for q in view.queues.iter_mut().filter(|q| q.role == "dead-letter") {
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
    let level = engine::topology::Level::parse(&level)
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
