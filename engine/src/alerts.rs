//! Alerts: rules on DLQs, outbox sources and failure groups, evaluated by a role inside
//! `serve`, delivered to webhooks.
//!
//! Policy:
//! - Every rule is an "above" rule with a warning and a critical threshold, a `for` duration
//!   and a recovery threshold below the warning one: it fires once the value has stayed at or
//!   above a threshold for `for`, and resolves only when it falls to the recovery threshold,
//!   so a value hovering around the threshold does not flap.
//! - Several evaluator instances may run: each rule is claimed with `FOR UPDATE SKIP LOCKED`
//!   and its `next_eval_at` pushed one tick ahead in the same transaction as its new state,
//!   so each rule is evaluated once per tick between them.
//! - A transition to firing (or an escalation to critical) and to resolved enqueues one
//!   webhook delivery, in the transaction that records the transition, unless the rule is
//!   silenced. Every delivery attempt is a row; failures are retried with backoff.
//! - Rule changes are audited in the transaction that makes them. Webhook URLs may carry
//!   tokens: only their host is ever logged or audited.
//!
//! - `rule`: kinds, input and validation; `crud`: create/update/delete/silence, audited.
//! - `measure`: a rule's current value; `types::routes::alert_cause`: the console page that shows the cause.
//! - `evaluate`: the pure state machine; `evaluator`: the role; `webhook`: delivery;
//!   `test_send`: an admin's "send test" request.
//! - `banner`, `views`: what the console shows.

pub mod banner;
pub mod crud;
pub mod egress;
pub mod evaluate;
pub mod evaluator;
pub mod measure;
pub mod rule;
pub mod test_send;
pub mod views;
pub mod webhook;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use banner::{FiringAlert, firing};
pub use crud::{Rule, RuleError, create, delete, get, silence, unsilence, update};
pub use evaluate::{AlertState, Severity};
pub use evaluator::run;
pub use rule::{FieldError, RuleInput, RuleKind, ValidRule, WebhookFormat};
pub use views::{DeliveryRow, EventRow, RuleWithState, deliveries, history, list_rules};

/// What the evaluator role needs beyond the pool; the server builds it from its settings.
#[derive(Debug, Clone)]
pub struct AlertSettings {
    /// How often each rule is evaluated (and due webhooks sent).
    pub tick: Duration,
    /// The console's public base URL (e.g. `https://revenant.example.com`), for links in
    /// webhook bodies; `None` sends the bare path.
    pub public_url: Option<String>,
    /// Per webhook request, connect to response.
    pub webhook_timeout: Duration,
    /// Attempts per delivery, the first included.
    pub webhook_max_attempts: i32,
    pub webhook_backoff_base: Duration,
    pub webhook_backoff_max: Duration,
    /// Where `topology_critical` rules read the broker's topology; None: such rules keep
    /// their state and log why.
    pub topology: Option<TopologyProbe>,
    /// Let webhooks reach loopback, private and link-local addresses (see `egress`).
    pub allow_private_webhooks: bool,
}

/// What a `topology_critical` rule needs to build the Topology page's report.
#[derive(Debug, Clone)]
pub struct TopologyProbe {
    pub management_url: String,
    pub vhost: String,
    /// Contracts from the configuration file: (pattern, level).
    pub config_contracts: Vec<(String, crate::topology::contract::Level)>,
}

impl Default for AlertSettings {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(15),
            public_url: None,
            webhook_timeout: Duration::from_secs(5),
            webhook_max_attempts: 6,
            webhook_backoff_base: Duration::from_secs(5),
            webhook_backoff_max: Duration::from_secs(300),
            topology: None,
            allow_private_webhooks: false,
        }
    }
}

/// Counts of rules per state, for `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateCounts {
    pub ok: i64,
    pub pending: i64,
    pub firing: i64,
    pub resolved: i64,
}

/// How many enabled rules are in each state.
pub async fn state_counts(db: impl sqlx::PgExecutor<'_>) -> Result<StateCounts, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT s.state, count(*) AS "n!" FROM alert_state s JOIN alert_rules r ON r.id = s.rule_id
           WHERE r.enabled GROUP BY s.state"#,
    )
    .fetch_all(db)
    .await?;
    let mut c = StateCounts::default();
    for (state, n) in rows.into_iter().map(|r| (r.state, r.n)) {
        match state.as_str() {
            "ok" => c.ok = n,
            "pending" => c.pending = n,
            "firing" => c.firing = n,
            "resolved" => c.resolved = n,
            _ => {}
        }
    }
    Ok(c)
}
