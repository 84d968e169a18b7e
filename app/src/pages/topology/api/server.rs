//! The server side of the Topology server functions: engine reports and contracts turned
//! into the page's serialisable views.

use engine::db::Pool;
use engine::settings::Settings;
use engine::topology::{
    TopologyReport,
    contract::{self, Contract, ContractError, Origin},
};

use super::*;

pub const MANAGEMENT_OFF: &str = "the RabbitMQ management API is off: set management_url in revenant.toml \
     (or REVENANT_MANAGEMENT_URL) to a user with the monitoring tag";

pub fn report_view(r: TopologyReport, management_off: bool) -> TopologyView {
    let mut queues: Vec<QueueView> = r
        .queues
        .into_iter()
        .map(|q| QueueView {
            name: q.queue,
            level: q.level,
            contract: q.contract,
            role: q.role,
            consumers: q.consumers,
            ready: q.messages_ready,
            unacked: q.messages_unacknowledged,
            publish_rate: q.rates.publish,
            deliver_rate: q.rates.deliver,
            checks: q.checks,
            watched: None,
            kind: q.kind,
            placement: q.placement,
        })
        .collect();
    sort_queues(&mut queues);
    TopologyView {
        vhost: r.vhost,
        taken_at: r.taken_at,
        reachable: r.reachable,
        management_off,
        unreachable: r.unreachable,
        not_checked: r.not_checked,
        rabbitmq_version: r.rabbitmq_version,
        nodes: r.nodes.into_iter().map(|n| NodeView { name: n.node, checks: n.checks }).collect(),
        queues,
        exchanges: r.exchanges.into_iter().map(|x| ExchangeView { name: x.exchange, checks: x.checks }).collect(),
        broker: None,
    }
}

/// The `[[contracts]]` of revenant.toml for the checked vhost (levels were validated at start-up).
pub fn config_contracts(s: &Settings) -> Result<Vec<Contract>, AppError> {
    let entries: Vec<(String, Level)> =
        s.contracts.iter().filter_map(|c| Level::parse(&c.level).map(|l| (c.pattern.clone(), l))).collect();
    contract::from_config(&s.topology_vhost, &entries).map_err(AppError::internal)
}

/// Console and config contracts together, as the checks apply them.
pub async fn contracts(pool: &Pool, s: &Settings) -> Result<Vec<Contract>, AppError> {
    let console = contract::list(pool, Some(&s.topology_vhost)).await?;
    Ok(contract::merged(console, config_contracts(s)?))
}

pub fn contract_view(c: Contract, overridden: bool) -> ContractView {
    ContractView {
        id: c.id,
        pattern: c.pattern,
        level: c.level,
        note: c.note,
        origin: match c.origin {
            Origin::Console => "console".into(),
            Origin::Config => "config".into(),
        },
        created_by: c.created_by,
        updated_at: c.updated_at,
        overridden,
    }
}

/// Console contracts first, then the file's, each marked when a console one replaces it.
pub fn contract_views(console: Vec<Contract>, config: Vec<Contract>) -> Vec<ContractView> {
    let replaced = |c: &Contract| console.iter().any(|d| d.pattern == c.pattern);
    let config: Vec<ContractView> = config
        .into_iter()
        .map(|c| {
            let o = replaced(&c);
            contract_view(c, o)
        })
        .collect();
    console.into_iter().map(|c| contract_view(c, false)).chain(config).collect()
}

pub fn contract_error(e: ContractError) -> AppError {
    match e {
        ContractError::Invalid(m) => AppError::Invalid(m),
        ContractError::Forbidden => AppError::Forbidden(e.to_string()),
        ContractError::NotFound(_) => AppError::NotFound(e.to_string()),
        ContractError::Db(e) => AppError::from(e),
    }
}
