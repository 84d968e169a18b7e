//! What the alerts pages show: rules with their state, a rule's history of transitions, and
//! its webhook delivery attempts.
//!
//! Policy: lists show a webhook's host, never its URL (it may carry a token); histories are
//! newest first with a keyset on id, never OFFSET.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgExecutor;

use super::{
    crud::{Rule, RuleRow},
    evaluate::{AlertState, Severity},
    rule::url_host,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleWithState {
    /// The rule, with `webhook_url` cleared: see `webhook_host`.
    pub rule: Rule,
    pub webhook_host: Option<String>,
    pub state: AlertState,
    pub severity: Option<Severity>,
    /// The last measured value; None before the first evaluation.
    pub value: Option<f64>,
    /// When the current state began.
    pub since: DateTime<Utc>,
    pub last_eval_at: Option<DateTime<Utc>>,
    pub link: Option<String>,
    pub silenced: bool,
}

/// Every rule, by name, with its state.
pub async fn list_rules(db: impl PgExecutor<'_>) -> Result<Vec<RuleWithState>, sqlx::Error> {
    // The state is a LEFT JOIN: every column of `s` may be NULL.
    let rows = sqlx::query!(
        r#"SELECT r.id, r.name, r.kind, r.target, r.warn_threshold, r.crit_threshold, r.recover_threshold, r.for_secs,
                r.window_mins, r.webhook_url, r.webhook_format, r.enabled, r.silenced_until, r.silence_reason,
                r.created_by, r.created_at, r.updated_at,
                s.state AS "state?", s.severity AS "severity?", s.value AS "value?", s.since AS "since?",
                s.last_eval_at AS "last_eval_at?", s.link AS "link?"
         FROM alert_rules r LEFT JOIN alert_state s ON s.rule_id = r.id ORDER BY r.name"#
    )
    .fetch_all(db)
    .await?;
    let now = Utc::now();
    rows.into_iter()
        .map(|j| {
            let mut rule = Rule::try_from(RuleRow {
                id: j.id,
                name: j.name,
                kind: j.kind,
                target: j.target,
                warn_threshold: j.warn_threshold,
                crit_threshold: j.crit_threshold,
                recover_threshold: j.recover_threshold,
                for_secs: j.for_secs,
                window_mins: j.window_mins,
                webhook_url: j.webhook_url,
                webhook_format: j.webhook_format,
                enabled: j.enabled,
                silenced_until: j.silenced_until,
                silence_reason: j.silence_reason,
                created_by: j.created_by,
                created_at: j.created_at,
                updated_at: j.updated_at,
            })?;
            let webhook_host = rule.webhook_url.take().map(|u| url_host(&u).to_string());
            Ok(RuleWithState {
                silenced: rule.silenced_at(now),
                since: j.since.unwrap_or(rule.created_at),
                rule,
                webhook_host,
                state: j.state.as_deref().and_then(AlertState::parse).unwrap_or(AlertState::Ok),
                severity: j.severity.as_deref().and_then(Severity::parse),
                value: j.value,
                last_eval_at: j.last_eval_at,
                link: j.link,
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct EventRow {
    pub id: i64,
    pub rule_id: i64,
    pub at: DateTime<Utc>,
    pub from_state: AlertState,
    pub to_state: AlertState,
    pub severity: Option<Severity>,
    pub value: f64,
    pub threshold: f64,
    pub message: String,
    pub link: Option<String>,
}

/// A rule's transitions, newest first; `before_id` is the keyset cursor (the last id seen).
pub async fn history(
    db: impl PgExecutor<'_>,
    rule_id: i64,
    before_id: Option<i64>,
    limit: i64,
) -> Result<Vec<EventRow>, sqlx::Error> {
    sqlx::query_as!(
        EventRow,
        r#"SELECT id, rule_id, at, from_state AS "from_state: AlertState", to_state AS "to_state: AlertState",
                severity AS "severity: Severity", value, threshold, message, link
         FROM alert_events WHERE rule_id = $1 AND id < coalesce($2, 9223372036854775807)
         ORDER BY id DESC LIMIT $3"#,
        rule_id,
        before_id,
        limit,
    )
    .fetch_all(db)
    .await
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct DeliveryRow {
    pub id: i64,
    pub event_id: i64,
    /// The transition delivered: firing or resolved.
    pub to_state: AlertState,
    pub attempt: i32,
    /// When the attempt was made; None while it waits for `next_attempt_at`.
    pub at: Option<DateTime<Utc>>,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    pub delivered: bool,
    pub next_attempt_at: DateTime<Utc>,
}

/// A rule's delivery attempts, newest first.
pub async fn deliveries(db: impl PgExecutor<'_>, rule_id: i64, limit: i64) -> Result<Vec<DeliveryRow>, sqlx::Error> {
    sqlx::query_as!(
        DeliveryRow,
        r#"SELECT d.id, d.event_id, e.to_state AS "to_state: AlertState", d.attempt, d.at, d.status_code, d.error,
                d.delivered, d.next_attempt_at
         FROM webhook_deliveries d JOIN alert_events e ON e.id = d.event_id
         WHERE e.rule_id = $1 ORDER BY d.id DESC LIMIT $2"#,
        rule_id,
        limit,
    )
    .fetch_all(db)
    .await
}
