//! Server functions of the Alerts pages, and what they return.
//!
//! Reads need a viewer, changes an admin. A rule that does not validate is not an error of
//! the call: it comes back as [`Outcome::Invalid`] with one message per field, so the form
//! can put each message next to its input. Webhook URLs may carry a token: only admins get
//! the whole URL (for the edit form), everyone else its host.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

pub use types::{AlertState, RuleKind, Severity};

use crate::error::AppError;

/// A rule as the form sends it: text, validated on the server (`engine::alerts::RuleInput`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RuleForm {
    pub name: String,
    pub kind: String,
    pub target: String,
    pub warn_threshold: String,
    pub crit_threshold: String,
    pub recover_threshold: String,
    pub for_secs: String,
    pub window_mins: String,
    pub webhook_url: String,
    pub webhook_format: String,
    /// An unticked checkbox sends nothing, hence `#[serde(default)]`.
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldErrorView {
    /// The form field it belongs to (`name`, `warn_threshold`, … or `until`, `reason`).
    pub field: String,
    pub message: String,
}

/// The result of a change that validates input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    Saved { id: i64, name: String },
    Invalid(Vec<FieldErrorView>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KindView {
    pub value: String,
    pub label: String,
    /// `queue`, `source` or empty (no target).
    pub target: String,
    pub uses_window: bool,
    /// A caution shown with the kind (e.g. why broker depth reads 0 on an ingested queue).
    #[serde(default)]
    pub note: Option<String>,
}

/// What the form offers: rule kinds, and the known targets (free text is allowed too).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormOptions {
    pub kinds: Vec<KindView>,
    pub queues: Vec<String>,
    pub sources: Vec<String>,
    /// Whether `public_url` is set: without it, webhook links are bare paths.
    #[serde(default)]
    pub public_url_set: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleRowView {
    pub id: i64,
    pub name: String,
    pub kind: RuleKind,
    pub target: Option<String>,
    pub enabled: bool,
    pub state: AlertState,
    pub severity: Option<Severity>,
    pub value: Option<f64>,
    pub warn: f64,
    pub crit: f64,
    pub recover: f64,
    pub since: chrono::DateTime<chrono::Utc>,
    pub since_secs: i64,
    /// Only while the silence lasts.
    pub silenced_until: Option<chrono::DateTime<chrono::Utc>>,
    /// The console page that shows the cause.
    pub link: String,
    pub webhook_host: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleDetailView {
    pub row: RuleRowView,
    pub for_secs: i32,
    pub window_mins: Option<i32>,
    pub webhook_format: String,
    pub silence_reason: Option<String>,
    pub last_eval_at: Option<chrono::DateTime<chrono::Utc>>,
    pub created_by: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
    /// The stored rule as the edit form shows it; `webhook_url` is empty unless the caller is an admin.
    pub form: RuleForm,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventView {
    pub id: i64,
    pub at: chrono::DateTime<chrono::Utc>,
    pub from_state: AlertState,
    pub to_state: AlertState,
    pub severity: Option<Severity>,
    pub value: f64,
    pub threshold: f64,
    pub message: String,
    pub link: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryPage {
    pub events: Vec<EventView>,
    /// The keyset cursor of the next (older) page.
    pub older: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryView {
    pub id: i64,
    pub event_id: i64,
    pub to_state: AlertState,
    pub attempt: i32,
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    pub delivered: bool,
    pub next_attempt_at: chrono::DateTime<chrono::Utc>,
}

#[cfg(feature = "ssr")]
mod server;

#[server(prefix = "/api", endpoint = "alerts/list")]
pub async fn alerts_list() -> Result<Vec<RuleRowView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let now = chrono::Utc::now();
    let rules = engine::alerts::list_rules(&state.pool).await?;
    Ok(rules.into_iter().map(|r| server::row(r, now)).collect())
}

#[server(prefix = "/api", endpoint = "alerts/get")]
pub async fn alerts_get(id: i64) -> Result<RuleDetailView, AppError> {
    let caller = crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    // The state lives beside the rule; rules number in the tens, so one listing is cheap.
    let r = engine::alerts::list_rules(&state.pool)
        .await?
        .into_iter()
        .find(|r| r.rule.id == id)
        .ok_or_else(|| AppError::NotFound(format!("no alert rule {id}")))?;
    let webhook_url = if caller.role >= engine::auth::Role::Admin {
        engine::alerts::get(&state.pool, id).await.map_err(server::error)?.webhook_url.unwrap_or_default()
    } else {
        String::new()
    };
    let rule = &r.rule;
    let form = RuleForm {
        name: rule.name.clone(),
        kind: rule.kind.as_str().into(),
        target: rule.target.clone().unwrap_or_default(),
        warn_threshold: rule.warn.to_string(),
        crit_threshold: rule.crit.to_string(),
        recover_threshold: rule.recover.to_string(),
        for_secs: rule.for_secs.to_string(),
        window_mins: rule.window_mins.map(|w| w.to_string()).unwrap_or_default(),
        webhook_url,
        webhook_format: rule.webhook_format.as_str().into(),
        enabled: rule.enabled,
    };
    Ok(RuleDetailView {
        for_secs: rule.for_secs,
        window_mins: rule.window_mins,
        webhook_format: rule.webhook_format.as_str().into(),
        silence_reason: rule.silence_reason.clone().filter(|_| r.silenced),
        last_eval_at: r.last_eval_at,
        created_by: rule.created_by.clone(),
        created_at: rule.created_at,
        updated_at: rule.updated_at,
        form,
        row: server::row(r, chrono::Utc::now()),
    })
}

#[server(prefix = "/api", endpoint = "alerts/targets")]
pub async fn alerts_targets() -> Result<FormOptions, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    use engine::alerts::rule::TargetKind;
    let kinds = engine::alerts::RuleKind::ALL
        .into_iter()
        .map(|k| KindView {
            value: k.as_str().into(),
            label: k.label().into(),
            target: match k.target() {
                Some(TargetKind::Queue) => "queue".into(),
                Some(TargetKind::Source) => "source".into(),
                None => String::new(),
            },
            uses_window: k.uses_window(),
            note: (k == engine::alerts::RuleKind::DlqDepth).then(|| {
                "Revenant's ingester drains the queues it ingests, so their broker depth stays near 0 and this \
                 rule would never fire on them: for an ingested queue pick dlq_awaiting (awaiting triage) or \
                 dlq_new. Broker depth suits a DLQ Revenant does not ingest, or an ingester that fell behind."
                    .to_string()
            }),
        })
        .collect();
    Ok(FormOptions {
        kinds,
        queues: engine::dead_letter::watch::watching(&state.pool).await?,
        sources: state.sources.iter().map(|s| s.name.clone()).collect(),
        public_url_set: state.settings.public_url.is_some(),
    })
}

/// Creates the rule when `id` is absent, replaces it otherwise.
#[server(prefix = "/api", endpoint = "alerts/save")]
pub async fn alerts_save(id: Option<i64>, input: RuleForm) -> Result<Outcome, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Admin)?;
    let state = crate::state::app_state()?;
    let ip = server::ip();
    let input = server::input(input);
    let private = state.settings.allow_private_webhooks;
    let saved = match id {
        None => engine::alerts::create(&state.pool, &principal, &ip, &input, private).await,
        Some(id) => engine::alerts::update(&state.pool, &principal, &ip, id, &input, private).await,
    };
    server::outcome(saved)
}

#[server(prefix = "/api", endpoint = "alerts/delete")]
pub async fn alerts_delete(id: i64) -> Result<(), AppError> {
    let principal = crate::guard::require(engine::auth::Role::Admin)?;
    let state = crate::state::app_state()?;
    engine::alerts::delete(&state.pool, &principal, &server::ip(), id).await.map_err(server::error)
}

/// Silences for `amount` minutes or hours (`unit`); mistakes come back as field errors.
#[server(prefix = "/api", endpoint = "alerts/silence")]
pub async fn alerts_silence(id: i64, amount: String, unit: String, reason: String) -> Result<Outcome, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Admin)?;
    let state = crate::state::app_state()?;
    let per: i64 = if unit == "hours" { 60 } else { 1 };
    let unit = if per == 60 { "hours" } else { "minutes" };
    // At most 30 days: a longer silence is a disabled rule, and should say so. Checked, so a
    // huge amount is a field error, not an overflow.
    let minutes = amount.trim().parse::<i64>().ok().filter(|n| *n >= 1).and_then(|n| n.checked_mul(per));
    let minutes = match minutes {
        Some(m) if m <= 43_200 => m,
        _ => {
            return Ok(Outcome::Invalid(vec![FieldErrorView {
                field: "until".into(),
                message: format!(
                    "until: `{}` is not a whole number of {unit} up to 30 days",
                    crate::format::clip(amount.trim(), 40)
                ),
            }]));
        }
    };
    let until = chrono::Utc::now() + chrono::Duration::minutes(minutes);
    server::outcome(engine::alerts::silence(&state.pool, &principal, &server::ip(), id, until, &reason).await)
}

#[server(prefix = "/api", endpoint = "alerts/unsilence")]
pub async fn alerts_unsilence(id: i64) -> Result<(), AppError> {
    let principal = crate::guard::require(engine::auth::Role::Admin)?;
    let state = crate::state::app_state()?;
    engine::alerts::unsilence(&state.pool, &principal, &server::ip(), id).await.map(|_| ()).map_err(server::error)
}

/// Sends one test request to the rule's webhook now; says what came back (audited).
#[server(prefix = "/api", endpoint = "alerts/test")]
pub async fn alerts_test(id: i64) -> Result<String, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Admin)?;
    let state = crate::state::app_state()?;
    let cfg = engine::alerts::AlertSettings {
        public_url: state.settings.public_url.clone(),
        allow_private_webhooks: state.settings.allow_private_webhooks,
        ..Default::default()
    };
    let http = engine::alerts::webhook::client(&cfg).map_err(AppError::internal)?;
    let ip = crate::guard::client_ip();
    use engine::alerts::test_send::{TestError, send_test};
    match send_test(&state.pool, &http, &cfg, &principal, ip.as_deref(), id).await {
        Ok(o) if o.delivered => Ok(format!(
            "Test delivered (HTTP {}); its link: {}",
            o.status.map(|s| s.to_string()).unwrap_or_default(),
            o.link
        )),
        Ok(o) => Ok(format!("Test not delivered: {}", o.error.unwrap_or_default())),
        Err(TestError::NoWebhook) => Err(AppError::Invalid(TestError::NoWebhook.to_string())),
        Err(TestError::Rule(e)) => Err(server::error(e)),
        Err(TestError::Db(e)) => Err(AppError::from(e)),
    }
}

#[server(prefix = "/api", endpoint = "alerts/history")]
pub async fn alerts_history(id: i64, before: Option<i64>) -> Result<HistoryPage, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    const PAGE: usize = 50;
    let mut rows = engine::alerts::history(&state.pool, id, before, PAGE as i64 + 1).await?;
    let older = if rows.len() > PAGE {
        rows.truncate(PAGE);
        rows.last().map(|e| e.id)
    } else {
        None
    };
    let events = rows
        .into_iter()
        .map(|e| EventView {
            id: e.id,
            at: e.at,
            from_state: e.from_state,
            to_state: e.to_state,
            severity: e.severity,
            value: e.value,
            threshold: e.threshold,
            message: e.message,
            link: e.link,
        })
        .collect();
    Ok(HistoryPage { events, older })
}

#[server(prefix = "/api", endpoint = "alerts/deliveries")]
pub async fn alerts_deliveries(id: i64) -> Result<Vec<DeliveryView>, AppError> {
    let me = crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let rows = engine::alerts::deliveries(&state.pool, id, 50).await?;
    // Only admins (who set webhook URLs) see HTTP codes and transport errors: to anyone else
    // they would map what the server can reach. Others see sent / failed / scheduled.
    let detail = me.role >= engine::auth::Role::Admin;
    Ok(rows
        .into_iter()
        .map(|d| DeliveryView {
            id: d.id,
            event_id: d.event_id,
            to_state: d.to_state,
            attempt: d.attempt,
            at: d.at,
            status_code: d.status_code.filter(|_| detail),
            error: d.error.filter(|_| detail),
            delivered: d.delivered,
            next_attempt_at: d.next_attempt_at,
        })
        .collect())
}
