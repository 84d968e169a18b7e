//! "Send test": one webhook request for a rule, now, so an admin sees the chat message (and
//! that the link opens the console) before a real incident sends one.
//!
//! Policy: the same body, client and egress limits as a real delivery (`webhook`), state
//! `test`, a message that says it is a test, the rule's own link made absolute. Nothing is
//! queued or retried; the outcome (HTTP code or error, never the URL) is returned and audited
//! as `alert.test` with the rule.

use chrono::Utc;
use serde_json::json;
use sqlx::PgPool;

use types::routes;

use super::{AlertSettings, crud, webhook};
use crate::{
    audit::{self, Entry},
    auth::Principal,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestOutcome {
    pub delivered: bool,
    pub status: Option<u16>,
    /// Why it was not delivered (without the URL, which may carry a token).
    pub error: Option<String>,
    /// The link the payload carried: absolute when `public_url` is set.
    pub link: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TestError {
    #[error("this rule has no webhook URL: set one first")]
    NoWebhook,
    #[error(transparent)]
    Rule(#[from] crud::RuleError),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

pub async fn send_test(
    pool: &PgPool,
    http: &reqwest::Client,
    cfg: &AlertSettings,
    by: &Principal,
    client_ip: Option<&str>,
    id: i64,
) -> Result<TestOutcome, TestError> {
    let rule = crud::get(pool, id).await?;
    let url = rule.webhook_url.clone().filter(|u| !u.trim().is_empty()).ok_or(TestError::NoWebhook)?;
    let path = routes::alert_cause(rule.kind, rule.target.as_deref(), None);
    let payload = webhook::Payload {
        rule: rule.name.clone(),
        rule_id: rule.id,
        kind: rule.kind.as_str().to_string(),
        target: rule.target.clone(),
        state: "test".into(),
        previous_state: "test".into(),
        severity: None,
        value: 0.0,
        threshold: rule.warn,
        message: format!("Test from Revenant by {}: rule \"{}\" will send its alerts here.", by.username, rule.name),
        link: routes::absolute(cfg.public_url.as_deref(), &path),
        at: Utc::now(),
    };
    let webhook::Posted { status, error, .. } = webhook::post(http, cfg, &url, rule.webhook_format, &payload).await;
    let delivered = error.is_none();
    audit::record(
        pool,
        Entry {
            actor: by,
            source_ip: client_ip,
            action: "alert.test",
            target: Some(format!("alert_rule:{id}")),
            filter: None,
            item_count: 1,
            outcome: if delivered { "ok" } else { "failed" },
            detail: Some(json!({"status": status, "error": error, "host": super::rule::url_host(&url)})),
        },
    )
    .await?;
    Ok(TestOutcome { delivered, status, error, link: payload.link })
}
