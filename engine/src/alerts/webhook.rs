//! Webhook delivery of alert transitions: a generic JSON body or a Slack-compatible one.
//!
//! Policy: each attempt is a `webhook_deliveries` row, claimed with `FOR UPDATE SKIP LOCKED`
//! and held while the request is made (bounded by the timeout), so two instances never send
//! the same attempt and a crash mid-request leaves it to be made again: at least once. A
//! non-2xx answer or a transport error is recorded on the row and, below the attempt limit,
//! the next attempt is queued after a backoff with full jitter; an attempt the egress policy
//! refused is not (every retry would be refused the same way). A rule silenced meanwhile
//! sends nothing more. The URL is read from the rule at send time, so fixing a wrong URL
//! rescues the retries; only its host is ever logged, and errors are recorded without it.
//! Targets are limited by `egress` (public addresses only, unless allowed) and redirects are
//! not followed.

use std::error::Error as _;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use tracing::Instrument;

use types::routes;

use super::{AlertSettings, rule::WebhookFormat, rule::url_host};
use crate::outbox::backoff::Backoff;

pub fn client(cfg: &AlertSettings) -> reqwest::Result<reqwest::Client> {
    let builder = reqwest::Client::builder()
        .timeout(cfg.webhook_timeout)
        .connect_timeout(cfg.webhook_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("revenant-alerts/", env!("CARGO_PKG_VERSION")));
    if cfg.allow_private_webhooks {
        builder.build()
    } else {
        builder.dns_resolver(std::sync::Arc::new(super::egress::PublicOnly)).build()
    }
}

/// The generic JSON body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Payload {
    pub rule: String,
    pub rule_id: i64,
    pub kind: String,
    pub target: Option<String>,
    pub state: String,
    pub previous_state: String,
    pub severity: Option<String>,
    pub value: f64,
    pub threshold: f64,
    pub message: String,
    pub link: String,
    pub at: DateTime<Utc>,
}

/// Slack's mrkdwn treats these three as markup.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

pub fn body(format: WebhookFormat, p: &Payload) -> serde_json::Value {
    match format {
        WebhookFormat::Json => serde_json::to_value(p).unwrap_or(serde_json::Value::Null),
        WebhookFormat::Slack => {
            let head = match (p.state.as_str(), p.severity.as_deref()) {
                ("resolved", _) => "RESOLVED".to_string(),
                (state, Some(sev)) => format!("{} {}", state.to_uppercase(), sev.to_uppercase()),
                (state, None) => state.to_uppercase(),
            };
            // A relative link is not clickable in Slack: send it as plain text then.
            let open = if p.link.starts_with("http") {
                format!(" <{}|Open in Revenant>", slack_escape(&p.link))
            } else {
                format!(" ({})", slack_escape(&p.link))
            };
            serde_json::json!({ "text": format!("[{head}] {}{open}", slack_escape(&p.message)) })
        }
    }
}

struct Due {
    id: i64,
    event_id: i64,
    attempt: i32,
    rule_id: i64,
    at: DateTime<Utc>,
    from_state: String,
    to_state: String,
    severity: Option<String>,
    value: f64,
    threshold: f64,
    message: String,
    link: Option<String>,
    name: String,
    kind: String,
    target: Option<String>,
    webhook_url: Option<String>,
    webhook_format: String,
    silenced: bool,
}

/// The error of a failed request, without the URL (it may carry a token) but with causes.
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut msg = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        msg.push_str(": ");
        msg.push_str(&c.to_string());
        cause = c.source();
    }
    msg
}

/// One request, as the delivery row records it.
async fn send(http: &reqwest::Client, cfg: &AlertSettings, d: &Due, url: &str) -> Posted {
    let format = WebhookFormat::parse(&d.webhook_format).unwrap_or_default();
    let payload = Payload {
        rule: d.name.clone(),
        rule_id: d.rule_id,
        kind: d.kind.clone(),
        target: d.target.clone(),
        state: d.to_state.clone(),
        previous_state: d.from_state.clone(),
        severity: d.severity.clone(),
        value: d.value,
        threshold: d.threshold,
        message: d.message.clone(),
        link: routes::absolute(cfg.public_url.as_deref(), d.link.as_deref().unwrap_or("/")),
        at: d.at,
    };
    let posted = post(http, cfg, url, format, &payload).await;
    tracing::debug!(attempt = d.attempt, delivered = posted.delivered(), "webhook attempt made");
    posted
}

/// What posting a webhook came to. Delivered when `error` is None.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Posted {
    pub status: Option<u16>,
    pub error: Option<String>,
    /// Not sent: the egress policy refused the address (not worth retrying).
    pub refused: bool,
}

impl Posted {
    pub fn delivered(&self) -> bool {
        self.error.is_none()
    }

    fn refused(why: String) -> Self {
        Self { status: None, error: Some(format!("{why}; not retried")), refused: true }
    }
}

/// Posts `payload` to `url` within the egress limits. Only the host is logged.
pub(crate) async fn post(
    http: &reqwest::Client,
    cfg: &AlertSettings,
    url: &str,
    format: WebhookFormat,
    payload: &Payload,
) -> Posted {
    let host = url_host(url);
    if !cfg.allow_private_webhooks
        && let Some(why) = super::egress::refuse_literal(url)
    {
        tracing::warn!(%host, "webhook target refused: not a public address");
        return Posted::refused(why);
    }
    match http.post(url).json(&body(format, payload)).send().await {
        Ok(resp) if resp.status().is_success() => {
            tracing::info!(%host, status = resp.status().as_u16(), "webhook delivered");
            Posted { status: Some(resp.status().as_u16()), ..Posted::default() }
        }
        Ok(resp) => {
            let code = resp.status().as_u16();
            tracing::warn!(%host, status = code, "webhook refused");
            Posted { status: Some(code), error: Some(format!("HTTP {code}")), refused: false }
        }
        Err(e) if super::egress::NotPublic::caused(&e) => {
            tracing::warn!(%host, "webhook target refused: resolves to no public address");
            Posted::refused(format!("not sent: {}", describe(e)))
        }
        Err(e) => {
            let msg = describe(e);
            tracing::warn!(%host, error = %msg, "webhook not sent");
            Posted { error: Some(msg), ..Posted::default() }
        }
    }
}

/// Makes every due attempt, one at a time; returns how many attempts were made.
pub async fn deliver_due(pool: &PgPool, http: &reqwest::Client, cfg: &AlertSettings) -> anyhow::Result<usize> {
    let backoff = Backoff::new(cfg.webhook_backoff_base, cfg.webhook_backoff_max);
    let mut made = 0;
    loop {
        let mut tx = pool.begin().await.context("cannot begin a delivery transaction")?;
        let due = sqlx::query_as!(
            Due,
            r#"SELECT d.id, d.event_id, d.attempt, e.rule_id, e.at, e.from_state, e.to_state, e.severity, e.value,
                    e.threshold, e.message, e.link, r.name, r.kind, r.target, r.webhook_url, r.webhook_format,
                    coalesce(r.silenced_until > now(), false) AS "silenced!"
             FROM webhook_deliveries d
             JOIN alert_events e ON e.id = d.event_id
             JOIN alert_rules r ON r.id = e.rule_id
             WHERE d.at IS NULL AND d.next_attempt_at <= now()
             ORDER BY d.next_attempt_at, d.id LIMIT 1
             FOR UPDATE OF d SKIP LOCKED"#
        )
        .fetch_optional(&mut *tx)
        .await
        .context("cannot claim a webhook delivery")?;
        let Some(d) = due else {
            return Ok(made);
        };
        let span = tracing::info_span!("webhook", delivery_id = d.id, event_id = d.event_id, rule_id = d.rule_id);
        let posted = match (&d.webhook_url, d.silenced) {
            (_, true) => Posted { error: Some("not sent: the rule is silenced".into()), ..Posted::default() },
            (None, _) => Posted { error: Some("not sent: the rule has no webhook URL".into()), ..Posted::default() },
            (Some(url), false) => {
                made += 1;
                send(http, cfg, &d, url).instrument(span).await
            }
        };
        let delivered = posted.delivered();
        sqlx::query!(
            "UPDATE webhook_deliveries SET at = now(), status_code = $2, error = $3, delivered = $4 WHERE id = $1",
            d.id,
            posted.status.map(i32::from),
            posted.error.as_deref(),
            delivered,
        )
        .execute(&mut *tx)
        .await
        .context("cannot record a delivery attempt")?;
        let retry = !delivered
            && !posted.refused
            && !d.silenced
            && d.webhook_url.is_some()
            && d.attempt < cfg.webhook_max_attempts;
        if retry {
            let wait = backoff.delay(d.attempt as u32);
            sqlx::query!(
                "INSERT INTO webhook_deliveries (event_id, attempt, next_attempt_at)
                 VALUES ($1, $2, now() + make_interval(secs => $3))",
                d.event_id,
                d.attempt + 1,
                wait.as_secs_f64(),
            )
            .execute(&mut *tx)
            .await
            .context("cannot queue the next delivery attempt")?;
        }
        tx.commit().await.context("cannot commit a delivery attempt")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(state: &str, link: &str) -> Payload {
        Payload {
            rule: "orders <backlog>".into(),
            rule_id: 7,
            kind: "dlq_awaiting".into(),
            target: Some("orders.dlq".into()),
            state: state.into(),
            previous_state: "ok".into(),
            severity: Some("critical".into()),
            value: 120.0,
            threshold: 100.0,
            message: "orders <backlog>: dead letters awaiting triage on orders.dlq is 120 (critical at 100)".into(),
            link: link.into(),
            at: DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap(),
        }
    }

    #[tokio::test]
    async fn an_address_the_policy_refuses_is_marked_refused_by_literal_and_by_resolution() {
        let cfg = AlertSettings { webhook_timeout: std::time::Duration::from_secs(2), ..AlertSettings::default() };
        let http = client(&cfg).unwrap();
        let p = payload("firing", "/x");
        for url in ["http://127.0.0.1:9/hook", "http://localhost:9/hook"] {
            let posted = post(&http, &cfg, url, WebhookFormat::Json, &p).await;
            assert!(posted.refused && !posted.delivered(), "{url}: {posted:?}");
            let error = posted.error.unwrap();
            assert!(error.contains("allow_private_webhooks") && error.ends_with("not retried"), "{error}");
        }
        // A transport failure to an address the policy allows is an ordinary, retried failure.
        let allowed = AlertSettings { allow_private_webhooks: true, ..cfg };
        let posted =
            post(&client(&allowed).unwrap(), &allowed, "http://127.0.0.1:9/hook", WebhookFormat::Json, &p).await;
        assert!(!posted.refused && !posted.delivered(), "{posted:?}");
    }

    #[test]
    fn the_json_body_carries_rule_state_value_threshold_and_link() {
        let v = body(WebhookFormat::Json, &payload("firing", "https://r.example/dead-letters?queue=orders.dlq"));
        assert_eq!(v["rule"], "orders <backlog>");
        assert_eq!(v["state"], "firing");
        assert_eq!(v["severity"], "critical");
        assert_eq!(v["value"], 120.0);
        assert_eq!(v["threshold"], 100.0);
        assert_eq!(v["link"], "https://r.example/dead-letters?queue=orders.dlq");
        assert_eq!(v["at"], "2023-11-14T22:13:20Z");
    }

    #[test]
    fn the_slack_body_is_one_escaped_text_with_a_clickable_link() {
        let v = body(WebhookFormat::Slack, &payload("firing", "https://r.example/dead-letters?queue=a&b"));
        let text = v["text"].as_str().unwrap();
        assert_eq!(v.as_object().unwrap().len(), 1);
        assert!(text.starts_with("[FIRING CRITICAL] orders &lt;backlog&gt;"), "{text}");
        assert!(text.ends_with("<https://r.example/dead-letters?queue=a&amp;b|Open in Revenant>"), "{text}");
        let resolved = body(WebhookFormat::Slack, &payload("resolved", "/x"));
        assert!(resolved["text"].as_str().unwrap().starts_with("[RESOLVED]"));
    }
}
