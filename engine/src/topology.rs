//! Queue reliability contracts: read the live topology through the RabbitMQ management API,
//! and say for each queue, exchange and node whether it keeps the promises its contract
//! (critical, standard, disposable) asks for — pass / warn / fail, with a reason and a fix.
//!
//! Policy: read-only towards the broker. When the management API cannot be read the report
//! says so and lists every check it could not make; it never shows stale or guessed passes.

pub mod checks;
pub mod contract;
pub mod dead_lettering;
pub mod fetch;
pub mod routing;

use std::collections::HashSet;
use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgExecutor;

pub use checks::{Check, ExchangeReport, NodeReport, QueueReport, Verdict};
pub use contract::{Contract, Level};
pub use fetch::Topology;

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("the RabbitMQ management API at {base} did not answer: {reason}")]
    Unreachable { base: String, reason: String },
    #[error("the RabbitMQ management API refused user `{user}` (HTTP {status}); it needs the monitoring tag")]
    Unauthorized { user: String, status: u16 },
    #[error("the RabbitMQ management API has nothing at {0} (unknown vhost?)")]
    NotFound(String),
    #[error("the RabbitMQ management API answered HTTP {status} for {path}")]
    Status { status: u16, path: String },
    #[error("the RabbitMQ management API answered {path} with something unreadable: {reason}")]
    Decode { path: String, reason: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopologyReport {
    pub vhost: String,
    pub taken_at: DateTime<Utc>,
    /// False when the management API could not be read; then only `unreachable` and
    /// `not_checked` say anything.
    pub reachable: bool,
    pub unreachable: Option<String>,
    /// Descriptions of the checks that could not be made.
    pub not_checked: Vec<String>,
    pub rabbitmq_version: Option<String>,
    pub nodes: Vec<NodeReport>,
    pub queues: Vec<QueueReport>,
    pub exchanges: Vec<ExchangeReport>,
}

/// What a failing critical check is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "name")]
pub enum Subject {
    Queue(String),
    Node(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailingCheck {
    pub vhost: String,
    pub subject: Subject,
    pub check: Check,
}

/// The checks over an already-taken snapshot: what the UI shows, without any I/O.
pub fn evaluate(t: &Topology, contracts: &[Contract], watched: &HashSet<String>) -> TopologyReport {
    TopologyReport {
        vhost: t.vhost.clone(),
        taken_at: Utc::now(),
        reachable: true,
        unreachable: None,
        not_checked: Vec::new(),
        rabbitmq_version: t.rabbitmq_version.clone(),
        nodes: checks::node_reports(t),
        queues: checks::queue_reports(t, contracts, watched),
        exchanges: checks::exchange_reports(t),
    }
}

/// Reads `vhost`'s topology and checks it. `watched` holds the DLQ names Revenant ingests or
/// alerts on; `contracts` are console and config contracts together (see `contract::merged`).
pub async fn report(
    http: &reqwest::Client,
    management_url: &str,
    vhost: &str,
    contracts: &[Contract],
    watched: &HashSet<String>,
) -> Result<TopologyReport, TopologyError> {
    let t = fetch::snapshot(http, management_url, vhost).await?;
    Ok(evaluate(&t, contracts, watched))
}

/// Like `report`, but a failure to read the API becomes an unreachable report (and a log line).
pub async fn report_or_unreachable(
    http: &reqwest::Client,
    management_url: &str,
    vhost: &str,
    contracts: &[Contract],
    watched: &HashSet<String>,
) -> TopologyReport {
    match report(http, management_url, vhost, contracts, watched).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(vhost, error = %e, "cannot read the topology");
            unreachable_report(vhost, e.to_string())
        }
    }
}

/// The report when the management API cannot be read: it names every check not made.
pub fn unreachable_report(vhost: &str, reason: impl Into<String>) -> TopologyReport {
    TopologyReport {
        vhost: vhost.to_string(),
        taken_at: Utc::now(),
        reachable: false,
        unreachable: Some(reason.into()),
        not_checked: checks::ALL.iter().map(|(name, what)| format!("{name}: {what}")).collect(),
        rabbitmq_version: None,
        nodes: Vec::new(),
        queues: Vec::new(),
        exchanges: Vec::new(),
    }
}

/// The failing checks that should page someone: any on a critical queue, and node alarms
/// (a blocked publisher is an outage for every queue). An unreachable report returns none;
/// alert on `reachable == false` separately.
pub fn failing_critical(r: &TopologyReport) -> Vec<FailingCheck> {
    let queues = r.queues.iter().filter(|q| q.level == Level::Critical).flat_map(|q| {
        q.checks.iter().filter(|c| c.verdict == Verdict::Fail).map(|c| FailingCheck {
            vhost: q.vhost.clone(),
            subject: Subject::Queue(q.queue.clone()),
            check: c.clone(),
        })
    });
    let nodes = r.nodes.iter().flat_map(|n| {
        n.checks.iter().filter(|c| c.verdict == Verdict::Fail).map(|c| FailingCheck {
            vhost: r.vhost.clone(),
            subject: Subject::Node(n.node.clone()),
            check: c.clone(),
        })
    });
    queues.chain(nodes).collect()
}

/// The HTTP client for management API calls, built once and shared (it pools connections).
/// Each request also carries `fetch::REQUEST_TIMEOUT`; the client's own timeout bounds
/// anything that does not.
pub fn http_client() -> reqwest::Result<reqwest::Client> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(c) = CLIENT.get() {
        return Ok(c.clone());
    }
    let built = reqwest::Client::builder()
        .timeout(fetch::REQUEST_TIMEOUT)
        .connect_timeout(fetch::REQUEST_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    Ok(CLIENT.get_or_init(|| built).clone())
}

/// The DLQs Revenant watches: the queues it ingests (the watched set, `dead_letter::watch`),
/// and every queue a DLQ alert rule targets (someone looks at those even when not ingested).
pub async fn watched(db: impl PgExecutor<'_>) -> Result<HashSet<String>, sqlx::Error> {
    let rows: Vec<String> = sqlx::query_scalar!(
        r#"SELECT queue AS "queue!" FROM watched_queues WHERE watching
           UNION SELECT target FROM alert_rules WHERE kind LIKE 'dlq_%' AND target IS NOT NULL"#
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().collect())
}

/// The vhosts the management user can see, for a picker.
pub async fn vhosts(http: &reqwest::Client, management_url: &str) -> Result<Vec<String>, TopologyError> {
    fetch::vhosts(http, management_url).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_api_that_does_not_answer_gives_an_unreachable_report_listing_every_check() {
        let http = http_client().unwrap();
        // Port 9 (discard) is closed on test machines: the connection is refused at once.
        let r = report_or_unreachable(&http, "http://u:secret@127.0.0.1:9", "/", &[], &HashSet::new()).await;
        assert!(!r.reachable);
        assert!(r.queues.is_empty() && r.nodes.is_empty());
        assert_eq!(r.not_checked.len(), checks::ALL.len());
        let why = r.unreachable.unwrap();
        assert!(why.contains("127.0.0.1:9"), "{why}");
        assert!(!why.contains("secret"), "credentials leaked into {why}");
    }
}
