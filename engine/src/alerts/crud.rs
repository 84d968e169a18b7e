//! Creating, changing, deleting and silencing alert rules.
//!
//! Policy: only operators and admins change rules (checked here too, behind the page's own
//! check); every change and its audit entry commit in one transaction. The audit entry
//! records the webhook's host only, never its URL (it may carry a token). A changed rule is
//! due for evaluation at once, so the operator sees its effect within a tick.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgExecutor, PgPool, Postgres, Transaction};

use super::rule::{FieldError, RuleInput, RuleKind, ValidRule, WebhookFormat, url_host};
use crate::audit;
use crate::auth::{ClientIp, Principal, Role};

#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("the rule has {} invalid field(s)", .0.len())]
    Invalid(Vec<FieldError>),
    #[error("no such alert rule")]
    NotFound,
    #[error("a rule named `{0}` already exists")]
    Conflict(String),
    #[error("changing alert rules needs the operator role")]
    Forbidden,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// A stored rule, as the edit form and the evaluator see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub id: i64,
    pub name: String,
    pub kind: RuleKind,
    pub target: Option<String>,
    pub warn: f64,
    pub crit: f64,
    pub recover: f64,
    pub for_secs: i32,
    pub window_mins: Option<i32>,
    /// Whole URL, for the edit form only: it may carry a token. Lists show the host.
    pub webhook_url: Option<String>,
    pub webhook_format: WebhookFormat,
    pub enabled: bool,
    pub silenced_until: Option<DateTime<Utc>>,
    pub silence_reason: Option<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Rule {
    pub fn silenced_at(&self, now: DateTime<Utc>) -> bool {
        self.silenced_until.is_some_and(|u| u > now)
    }
    pub fn thresholds(&self) -> super::evaluate::Thresholds {
        super::evaluate::Thresholds { warn: self.warn, crit: self.crit, recover: self.recover }
    }
}

/// A rule as `alert_rules` stores it; the queries that read one name every column (checked
/// against the table by `sqlx::query_as!`).
pub(crate) struct RuleRow {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) target: Option<String>,
    pub(crate) warn_threshold: f64,
    pub(crate) crit_threshold: f64,
    pub(crate) recover_threshold: f64,
    pub(crate) for_secs: i32,
    pub(crate) window_mins: Option<i32>,
    pub(crate) webhook_url: Option<String>,
    pub(crate) webhook_format: String,
    pub(crate) enabled: bool,
    pub(crate) silenced_until: Option<DateTime<Utc>>,
    pub(crate) silence_reason: Option<String>,
    pub(crate) created_by: String,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
}

impl TryFrom<RuleRow> for Rule {
    type Error = sqlx::Error;
    fn try_from(r: RuleRow) -> Result<Self, sqlx::Error> {
        // The table's CHECK constraints make these unreachable unless the schema and code drift.
        let kind =
            RuleKind::parse(&r.kind).ok_or_else(|| sqlx::Error::Decode(format!("rule kind `{}`", r.kind).into()))?;
        let webhook_format = WebhookFormat::parse(&r.webhook_format)
            .ok_or_else(|| sqlx::Error::Decode(format!("webhook format `{}`", r.webhook_format).into()))?;
        Ok(Rule {
            id: r.id,
            name: r.name,
            kind,
            target: r.target,
            warn: r.warn_threshold,
            crit: r.crit_threshold,
            recover: r.recover_threshold,
            for_secs: r.for_secs,
            window_mins: r.window_mins,
            webhook_url: r.webhook_url,
            webhook_format,
            enabled: r.enabled,
            silenced_until: r.silenced_until,
            silence_reason: r.silence_reason,
            created_by: r.created_by,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

pub async fn get(db: impl PgExecutor<'_>, id: i64) -> Result<Rule, RuleError> {
    let row = sqlx::query_as!(
        RuleRow,
        "SELECT id, name, kind, target, warn_threshold, crit_threshold, recover_threshold, for_secs, window_mins,
                webhook_url, webhook_format, enabled, silenced_until, silence_reason, created_by, created_at, updated_at
         FROM alert_rules WHERE id = $1",
        id,
    )
    .fetch_optional(db)
    .await?;
    row.ok_or(RuleError::NotFound)?.try_into().map_err(RuleError::Db)
}

fn allowed(who: &Principal) -> Result<(), RuleError> {
    if who.role >= Role::Operator { Ok(()) } else { Err(RuleError::Forbidden) }
}

fn conflict(e: sqlx::Error, name: &str) -> RuleError {
    match &e {
        sqlx::Error::Database(d) if d.constraint() == Some("alert_rules_name_key") => RuleError::Conflict(name.into()),
        _ => RuleError::Db(e),
    }
}

fn detail(v: &ValidRule) -> serde_json::Value {
    serde_json::json!({
        "name": v.name, "kind": v.kind.as_str(), "target": v.target,
        "warn": v.warn, "crit": v.crit, "recover": v.recover,
        "for_secs": v.for_secs, "window_mins": v.window_mins,
        "webhook_host": v.webhook_url.as_deref().map(url_host), "webhook_format": v.webhook_format.as_str(),
        "enabled": v.enabled,
    })
}

async fn audit(
    tx: &mut Transaction<'_, Postgres>,
    who: &Principal,
    ip: &ClientIp,
    action: &str,
    name: &str,
    detail: serde_json::Value,
) -> Result<(), sqlx::Error> {
    let entry = audit::Entry {
        actor: who,
        source_ip: ip.0.as_deref(),
        action,
        target: Some(name.to_string()),
        filter: None,
        item_count: 1,
        outcome: "ok",
        detail: Some(detail),
    };
    audit::record(&mut **tx, entry).await.map(|_| ())
}

/// Validates `input`, and refuses a webhook the egress policy would never call (unless
/// `allow_private_webhooks`), with every mistake at once.
pub async fn checked(input: &RuleInput, allow_private_webhooks: bool) -> Result<ValidRule, RuleError> {
    let valid = input.validate();
    let url = input.webhook_url.trim();
    let refused =
        if url.is_empty() || allow_private_webhooks { None } else { super::egress::refused_at_save(url).await };
    let refused = refused.map(|why| FieldError { field: "webhook_url".into(), message: format!("webhook_url: {why}") });
    match (valid, refused) {
        (Ok(v), None) => Ok(v),
        (Ok(_), Some(e)) => Err(RuleError::Invalid(vec![e])),
        (Err(mut errs), refused) => {
            if !errs.iter().any(|e| e.field == "webhook_url") {
                errs.extend(refused);
            }
            Err(RuleError::Invalid(errs))
        }
    }
}

pub async fn create(
    pool: &PgPool,
    who: &Principal,
    ip: &ClientIp,
    input: &RuleInput,
    allow_private_webhooks: bool,
) -> Result<Rule, RuleError> {
    allowed(who)?;
    let v = checked(input, allow_private_webhooks).await?;
    let mut tx = pool.begin().await?;
    let id = sqlx::query_scalar!(
        "INSERT INTO alert_rules (name, kind, target, warn_threshold, crit_threshold, recover_threshold, for_secs,
                                  window_mins, webhook_url, webhook_format, enabled, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id",
        &v.name,
        v.kind.as_str(),
        v.target.as_deref(),
        v.warn,
        v.crit,
        v.recover,
        v.for_secs,
        v.window_mins,
        v.webhook_url.as_deref(),
        v.webhook_format.as_str(),
        v.enabled,
        &who.username,
    )
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| conflict(e, &v.name))?;
    sqlx::query!("INSERT INTO alert_state (rule_id) VALUES ($1)", id).execute(&mut *tx).await?;
    audit(&mut tx, who, ip, "alert_rule.create", &v.name, detail(&v)).await?;
    let rule = get(&mut *tx, id).await?;
    tx.commit().await?;
    tracing::info!(rule_id = id, kind = v.kind.as_str(), actor = %who.username, "alert rule created");
    Ok(rule)
}

/// Replaces every field of the rule. The state is kept (a firing rule whose new thresholds
/// clear it resolves, and says so) and the rule is due at once.
pub async fn update(
    pool: &PgPool,
    who: &Principal,
    ip: &ClientIp,
    id: i64,
    input: &RuleInput,
    allow_private_webhooks: bool,
) -> Result<Rule, RuleError> {
    allowed(who)?;
    let v = checked(input, allow_private_webhooks).await?;
    let mut tx = pool.begin().await?;
    let res = sqlx::query!(
        "UPDATE alert_rules SET name = $2, kind = $3, target = $4, warn_threshold = $5, crit_threshold = $6,
                recover_threshold = $7, for_secs = $8, window_mins = $9, webhook_url = $10, webhook_format = $11,
                enabled = $12, updated_at = now(), next_eval_at = now()
         WHERE id = $1",
        id,
        &v.name,
        v.kind.as_str(),
        v.target.as_deref(),
        v.warn,
        v.crit,
        v.recover,
        v.for_secs,
        v.window_mins,
        v.webhook_url.as_deref(),
        v.webhook_format.as_str(),
        v.enabled,
    )
    .execute(&mut *tx)
    .await
    .map_err(|e| conflict(e, &v.name))?;
    if res.rows_affected() == 0 {
        return Err(RuleError::NotFound);
    }
    audit(&mut tx, who, ip, "alert_rule.update", &v.name, detail(&v)).await?;
    let rule = get(&mut *tx, id).await?;
    tx.commit().await?;
    tracing::info!(rule_id = id, actor = %who.username, "alert rule updated");
    Ok(rule)
}

/// Deletes the rule with its state, history and delivery records.
pub async fn delete(pool: &PgPool, who: &Principal, ip: &ClientIp, id: i64) -> Result<(), RuleError> {
    allowed(who)?;
    let mut tx = pool.begin().await?;
    let name = sqlx::query_scalar!("DELETE FROM alert_rules WHERE id = $1 RETURNING name", id)
        .fetch_optional(&mut *tx)
        .await?;
    let name = name.ok_or(RuleError::NotFound)?;
    audit(&mut tx, who, ip, "alert_rule.delete", &name, serde_json::json!({ "id": id })).await?;
    tx.commit().await?;
    tracing::info!(rule_id = id, actor = %who.username, "alert rule deleted");
    Ok(())
}

/// Mutes the rule until `until`: it is still evaluated (its state and history stay true),
/// but nothing is delivered, including retries of deliveries already queued.
pub async fn silence(
    pool: &PgPool,
    who: &Principal,
    ip: &ClientIp,
    id: i64,
    until: DateTime<Utc>,
    reason: &str,
) -> Result<Rule, RuleError> {
    allowed(who)?;
    let mut errs = Vec::new();
    if until <= Utc::now() {
        errs.push(FieldError { field: "until".into(), message: "until: must be in the future".into() });
    }
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > 500 {
        errs.push(FieldError {
            field: "reason".into(),
            message: "reason: say why the rule is silenced (1 to 500 characters)".into(),
        });
    }
    if !errs.is_empty() {
        return Err(RuleError::Invalid(errs));
    }
    set_silence(pool, who, ip, id, Some((until, reason))).await
}

pub async fn unsilence(pool: &PgPool, who: &Principal, ip: &ClientIp, id: i64) -> Result<Rule, RuleError> {
    allowed(who)?;
    set_silence(pool, who, ip, id, None).await
}

async fn set_silence(
    pool: &PgPool,
    who: &Principal,
    ip: &ClientIp,
    id: i64,
    silence: Option<(DateTime<Utc>, &str)>,
) -> Result<Rule, RuleError> {
    let mut tx = pool.begin().await?;
    let name = sqlx::query_scalar!(
        "UPDATE alert_rules SET silenced_until = $2, silence_reason = $3, updated_at = now() WHERE id = $1 RETURNING name",
        id,
        silence.map(|s| s.0),
        silence.map(|s| s.1),
    )
    .fetch_optional(&mut *tx)
    .await?;
    let name = name.ok_or(RuleError::NotFound)?;
    let (action, detail) = match silence {
        Some((until, reason)) => ("alert_rule.silence", serde_json::json!({ "until": until, "reason": reason })),
        None => ("alert_rule.unsilence", serde_json::json!({})),
    };
    audit(&mut tx, who, ip, action, &name, detail).await?;
    let rule = get(&mut *tx, id).await?;
    tx.commit().await?;
    tracing::info!(rule_id = id, actor = %who.username, action, "alert rule silence changed");
    Ok(rule)
}
