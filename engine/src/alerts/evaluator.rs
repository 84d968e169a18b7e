//! The alert evaluator role: every tick, evaluate each due rule once, then send due webhooks.
//!
//! Policy: each rule is claimed in a transaction of its own with `FOR UPDATE SKIP LOCKED`;
//! in that transaction its value is measured, its state and any transition are written, a
//! webhook delivery is queued when the transition notifies (and the rule is not silenced),
//! and `next_eval_at` moves one tick ahead. So with several instances a rule is evaluated
//! once per tick between them, and a transition and its delivery commit together or not at
//! all. A rule that cannot be measured keeps its state (logged) and is tried next tick.

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{
    AlertSettings,
    crud::{Rule, RuleRow},
    evaluate::{self, AlertState, Severity, Snapshot, Transition},
    measure, webhook,
};
use crate::sources::Source;

/// Runs until `shutdown`; database errors are logged and retried next tick, never fatal.
pub async fn run(
    pool: PgPool,
    sources: Vec<Source>,
    cfg: AlertSettings,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let http = webhook::client(&cfg).context("cannot build the webhook HTTP client")?;
    let instance = Uuid::new_v4();
    tracing::info!(%instance, tick_ms = cfg.tick.as_millis() as u64, "alert evaluator starting");
    // A zero tick (tests) must not spin a core.
    let pause = cfg.tick.max(Duration::from_millis(10));
    loop {
        let evaluated = evaluate_due(&pool, &sources, &cfg).await.unwrap_or_else(|e| {
            tracing::warn!(error = format!("{e:#}"), "alert evaluation failed");
            0
        });
        let sent = webhook::deliver_due(&pool, &http, &cfg).await.unwrap_or_else(|e| {
            tracing::warn!(error = format!("{e:#}"), "webhook delivery failed");
            0
        });
        heartbeat(&pool, instance, evaluated, sent, false).await;
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    heartbeat(&pool, instance, 0, 0, true).await;
    tracing::info!(%instance, "alert evaluator stopped");
    Ok(())
}

async fn heartbeat(pool: &PgPool, instance: Uuid, evaluated: usize, sent: usize, stopped: bool) {
    let host = crate::host::name();
    let detail = serde_json::json!({ "evaluated": evaluated, "webhooks_sent": sent, "stopped": stopped });
    let res = sqlx::query!(
        "INSERT INTO heartbeats (role, instance, host, detail) VALUES ('alerts', $1, $2, $3)
         ON CONFLICT (role, instance) DO UPDATE SET last_seen = now(), detail = EXCLUDED.detail",
        instance,
        host,
        detail,
    )
    .execute(pool)
    .await;
    if let Err(e) = res {
        tracing::warn!(error = %e, "cannot write the alerts heartbeat");
    }
}

/// Evaluates every rule that is due, each once; returns how many were evaluated.
pub async fn evaluate_due(pool: &PgPool, sources: &[Source], cfg: &AlertSettings) -> anyhow::Result<usize> {
    // Rules done in this sweep are excluded, so a tick shorter than a sweep cannot loop.
    let mut done: Vec<i64> = Vec::new();
    loop {
        let mut tx = pool.begin().await.context("cannot begin an evaluation transaction")?;
        let row = sqlx::query_as!(
            RuleRow,
            "SELECT id, name, kind, target, warn_threshold, crit_threshold, recover_threshold, for_secs, window_mins,
                    webhook_url, webhook_format, enabled, silenced_until, silence_reason, created_by, created_at,
                    updated_at
             FROM alert_rules
             WHERE enabled AND next_eval_at <= now() AND id <> ALL($1)
             ORDER BY next_eval_at, id LIMIT 1 FOR UPDATE SKIP LOCKED",
            &done,
        )
        .fetch_optional(&mut *tx)
        .await
        .context("cannot claim a due alert rule")?;
        let Some(row) = row else {
            return Ok(done.len());
        };
        let rule: Rule = row.try_into().context("cannot read an alert rule")?;
        match measure::measure(pool, sources, cfg.topology.as_ref(), &rule).await {
            Ok(Some(m)) => apply(&mut tx, &rule, m).await.with_context(|| format!("alert rule {}", rule.id))?,
            Ok(None) => tracing::debug!(rule_id = rule.id, "no value yet; state kept"),
            Err(e) => tracing::warn!(rule_id = rule.id, error = %e, "cannot measure the alert rule; state kept"),
        }
        sqlx::query!(
            "UPDATE alert_rules SET next_eval_at = now() + make_interval(secs => $2) WHERE id = $1",
            rule.id,
            cfg.tick.as_secs_f64(),
        )
        .execute(&mut *tx)
        .await
        .context("cannot schedule the next evaluation")?;
        tx.commit().await.context("cannot commit an evaluation")?;
        done.push(rule.id);
    }
}

/// Steps the rule's state machine and writes the result, in the claim's transaction.
async fn apply(tx: &mut Transaction<'_, Postgres>, rule: &Rule, m: measure::Measurement) -> anyhow::Result<()> {
    // now() is the transaction's clock: the same instant for the state, event and delivery.
    let row = sqlx::query!(
        r#"SELECT state, severity, since, pending_since, now() AS "now!" FROM alert_state WHERE rule_id = $1 FOR UPDATE"#,
        rule.id,
    )
    .fetch_optional(&mut **tx)
    .await?;
    let (prev, now) = match row {
        Some(r) => {
            let state = AlertState::parse(&r.state).unwrap_or(AlertState::Ok);
            let severity = r.severity.as_deref().and_then(Severity::parse);
            (Snapshot { state, severity, since: r.since, pending_since: r.pending_since }, r.now)
        }
        None => {
            let now: DateTime<Utc> = sqlx::query_scalar!(
                r#"INSERT INTO alert_state (rule_id) VALUES ($1) RETURNING now() AS "now!""#,
                rule.id
            )
            .fetch_one(&mut **tx)
            .await?;
            (Snapshot::initial(now), now)
        }
    };
    let hold = chrono::Duration::seconds(i64::from(rule.for_secs));
    let out = evaluate::step(prev, m.value, rule.thresholds(), hold, now);
    let path = types::routes::alert_cause(rule.kind, rule.target.as_deref(), m.group_id);
    sqlx::query!(
        "UPDATE alert_state SET state = $2, severity = $3, value = $4, since = $5, pending_since = $6,
                last_eval_at = now(), evals = evals + 1, link = $7
         WHERE rule_id = $1",
        rule.id,
        out.next.state.as_str(),
        out.next.severity.map(Severity::as_str),
        m.value,
        out.next.since,
        out.next.pending_since,
        &path,
    )
    .execute(&mut **tx)
    .await?;
    let Some(tr) = out.transition else {
        return Ok(());
    };
    let event_id: i64 = sqlx::query_scalar!(
        "INSERT INTO alert_events (rule_id, from_state, to_state, severity, value, threshold, message, link)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        rule.id,
        tr.from.as_str(),
        tr.to.as_str(),
        tr.severity.map(Severity::as_str),
        m.value,
        tr.threshold,
        message(rule, &tr, m.value),
        &path,
    )
    .fetch_one(&mut **tx)
    .await?;
    let silenced = rule.silenced_at(now);
    let queued = tr.notifies() && rule.webhook_url.is_some() && !silenced;
    if queued {
        sqlx::query!("INSERT INTO webhook_deliveries (event_id, attempt) VALUES ($1, 1)", event_id)
            .execute(&mut **tx)
            .await?;
    }
    tracing::info!(
        rule_id = rule.id,
        event_id,
        from = tr.from.as_str(),
        to = tr.to.as_str(),
        severity = tr.severity.map(Severity::as_str),
        value = m.value,
        silenced,
        queued,
        "alert transition"
    );
    Ok(())
}

/// A number as people write it: no trailing `.0` on counts.
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v:.1}") }
}

/// One line for the history and the notification, e.g.
/// "orders backlog: dead letters awaiting triage on orders.dlq is 120 (critical at 100)".
pub fn message(rule: &Rule, tr: &Transition, value: f64) -> String {
    let on = rule.target.as_deref().map(|t| format!(" on {t}")).unwrap_or_default();
    let what = format!("{}: {}{on} is {}", rule.name, rule.kind.label(), number(value));
    match (tr.to, tr.severity) {
        (AlertState::Resolved, _) => format!("{what}, back to {} or below (resolved)", number(rule.recover)),
        (AlertState::Ok, _) => format!("{what}, below {} again before {} s", number(rule.warn), rule.for_secs),
        (AlertState::Pending, s) => format!(
            "{what} ({} at {}), firing if it lasts {} s",
            s.map_or("warning", Severity::as_str),
            number(tr.threshold),
            rule.for_secs
        ),
        (AlertState::Firing, s) => {
            format!("{what} ({} at {})", s.map_or("warning", Severity::as_str), number(tr.threshold))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::rule::{RuleKind, WebhookFormat};

    #[test]
    fn messages_name_the_rule_the_target_the_value_and_the_crossed_threshold() {
        let now = Utc::now();
        let rule = Rule {
            id: 1,
            name: "orders backlog".into(),
            kind: RuleKind::DlqAwaiting,
            target: Some("orders.dlq".into()),
            warn: 10.0,
            crit: 100.0,
            recover: 2.0,
            for_secs: 0,
            window_mins: None,
            webhook_url: None,
            webhook_format: WebhookFormat::Json,
            enabled: true,
            silenced_until: None,
            silence_reason: None,
            created_by: "olga".into(),
            created_at: now,
            updated_at: now,
        };
        let fire = Transition {
            from: AlertState::Ok,
            to: AlertState::Firing,
            severity: Some(Severity::Critical),
            threshold: 100.0,
        };
        assert_eq!(
            message(&rule, &fire, 120.0),
            "orders backlog: dead letters awaiting triage on orders.dlq is 120 (critical at 100)"
        );
        let resolved =
            Transition { from: AlertState::Firing, to: AlertState::Resolved, severity: None, threshold: 2.0 };
        assert!(message(&rule, &resolved, 1.5).ends_with("is 1.5, back to 2 or below (resolved)"));
    }
}
