//! The banner of firing alerts that every console page shows.
//!
//! Policy: one cheap query on `alert_state`'s state index, critical first then oldest first,
//! so the page that renders it on every request does not notice it. Silenced rules are still
//! listed, marked as such: muted is not fixed.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgExecutor;

use super::{evaluate::Severity, rule::RuleKind};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FiringAlert {
    pub rule_id: i64,
    pub name: String,
    pub kind: RuleKind,
    pub target: Option<String>,
    pub severity: Severity,
    pub value: Option<f64>,
    /// When it started firing.
    pub since: DateTime<Utc>,
    /// Console path of the page that shows the cause.
    pub link: String,
    /// The last transition's one-line description.
    pub message: Option<String>,
    pub silenced: bool,
}

/// Enabled rules that are firing now.
pub async fn firing(db: impl PgExecutor<'_>) -> Result<Vec<FiringAlert>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT r.id, r.name, r.kind, r.target, s.severity, s.value, s.since, s.link, e.message AS "message?",
                coalesce(r.silenced_until > now(), false) AS "silenced!"
         FROM alert_state s
         JOIN alert_rules r ON r.id = s.rule_id
         LEFT JOIN LATERAL (SELECT message FROM alert_events WHERE rule_id = r.id ORDER BY at DESC, id DESC LIMIT 1) e
                ON true
         WHERE s.state = 'firing' AND r.enabled
         ORDER BY (s.severity = 'critical') DESC, s.since, r.id"#
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            Some(FiringAlert {
                rule_id: r.id,
                name: r.name,
                kind: RuleKind::parse(&r.kind)?,
                target: r.target,
                severity: r.severity.as_deref().and_then(Severity::parse).unwrap_or(Severity::Warning),
                value: r.value,
                since: r.since,
                link: r.link.unwrap_or_else(|| "/alerts".into()),
                message: r.message,
                silenced: r.silenced,
            })
        })
        .collect())
}
