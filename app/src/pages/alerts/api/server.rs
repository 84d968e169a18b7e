//! Server-side helpers of the alerts server functions (ssr only).

use engine::alerts::{RuleError, RuleWithState};

use super::*;

pub fn ip() -> engine::auth::ClientIp {
    engine::auth::ClientIp(crate::guard::client_ip())
}

pub fn input(f: RuleForm) -> engine::alerts::RuleInput {
    engine::alerts::RuleInput {
        name: f.name,
        kind: f.kind,
        target: f.target,
        warn_threshold: f.warn_threshold,
        crit_threshold: f.crit_threshold,
        recover_threshold: f.recover_threshold,
        for_secs: f.for_secs,
        window_mins: f.window_mins,
        webhook_url: f.webhook_url,
        webhook_format: f.webhook_format,
        enabled: f.enabled,
    }
}

/// Field errors become an `Outcome`; a taken name is a mistake in the name field too.
pub fn outcome(r: Result<engine::alerts::Rule, RuleError>) -> Result<Outcome, AppError> {
    match r {
        Ok(rule) => Ok(Outcome::Saved { id: rule.id, name: rule.name }),
        Err(RuleError::Invalid(errs)) => Ok(Outcome::Invalid(
            errs.into_iter().map(|e| FieldErrorView { field: e.field, message: e.message }).collect(),
        )),
        Err(RuleError::Conflict(name)) => Ok(Outcome::Invalid(vec![FieldErrorView {
            field: "name".into(),
            message: format!("name: a rule named `{name}` already exists"),
        }])),
        Err(e) => Err(error(e)),
    }
}

pub fn error(e: RuleError) -> AppError {
    match e {
        RuleError::Invalid(errs) => {
            AppError::Invalid(errs.into_iter().map(|e| e.message).collect::<Vec<_>>().join("; "))
        }
        RuleError::NotFound => AppError::NotFound("no such alert rule".into()),
        RuleError::Conflict(n) => AppError::Conflict(format!("a rule named `{n}` already exists")),
        RuleError::Forbidden => AppError::Forbidden("changing alert rules needs the admin role".into()),
        RuleError::Db(e) => AppError::from(e),
    }
}

pub fn row(r: RuleWithState, now: chrono::DateTime<chrono::Utc>) -> RuleRowView {
    let link =
        r.link.clone().unwrap_or_else(|| types::routes::alert_cause(r.rule.kind, r.rule.target.as_deref(), None));
    RuleRowView {
        id: r.rule.id,
        name: r.rule.name,
        kind: r.rule.kind,
        target: r.rule.target,
        enabled: r.rule.enabled,
        state: r.state,
        severity: r.severity,
        value: r.value,
        warn: r.rule.warn,
        crit: r.rule.crit,
        recover: r.rule.recover,
        since: r.since,
        since_secs: (now - r.since).num_seconds(),
        silenced_until: r.rule.silenced_until.filter(|_| r.silenced),
        link,
        webhook_host: r.webhook_host,
    }
}
