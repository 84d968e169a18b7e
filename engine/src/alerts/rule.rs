//! What an alert rule is, and the validation of a rule as typed in a form.
//!
//! Policy: the input is text, as a form sends it, so "not a number" is reported like any
//! other mistake; validation collects every bad field with a message naming it (never just
//! the first), and only a [`ValidRule`] can be stored. Fields a kind does not use (a target
//! on `new_failure_group`, a window on non-rate kinds) are dropped rather than refused, so a
//! form that keeps hidden inputs still saves. One threshold is enough: the critical threshold
//! defaults to it and the recovery threshold to [`RECOVER_SHARE`] of it.

use serde::{Deserialize, Serialize};
pub use types::alert::{RECOVER_SHARE, default_recovery};
pub use types::{RuleKind, TargetKind, WebhookFormat};

pub const MAX_NAME: usize = 100;
pub const MAX_FOR_SECS: i64 = 86_400;
pub const MAX_WINDOW_MINS: i64 = 10_080;

/// A rule as a form submits it: text fields, empty meaning "not given".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RuleInput {
    pub name: String,
    pub kind: String,
    pub target: String,
    pub warn_threshold: String,
    pub crit_threshold: String,
    pub recover_threshold: String,
    pub for_secs: String,
    pub window_mins: String,
    pub webhook_url: String,
    /// `json` (the default when empty) or `slack`.
    pub webhook_format: String,
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// The `RuleInput` field name, so a form can put the message next to its input.
    pub field: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidRule {
    pub name: String,
    pub kind: RuleKind,
    pub target: Option<String>,
    pub warn: f64,
    pub crit: f64,
    pub recover: f64,
    pub for_secs: i32,
    pub window_mins: Option<i32>,
    pub webhook_url: Option<String>,
    pub webhook_format: WebhookFormat,
    pub enabled: bool,
}

/// The host of a URL, for logs and audit entries: the path and query may hold a token.
pub fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.rsplit('@').next().unwrap_or("")
}

impl RuleInput {
    pub fn validate(&self) -> Result<ValidRule, Vec<FieldError>> {
        let mut errs = Vec::new();
        let mut bad = |field: &str, message: String| errs.push(FieldError { field: field.into(), message });

        let name = self.name.trim().to_string();
        if name.is_empty() {
            bad("name", "name: give the rule a name".into());
        } else if name.chars().count() > MAX_NAME {
            bad("name", format!("name: at most {MAX_NAME} characters"));
        } else if name.chars().any(char::is_control) {
            bad("name", "name: no control characters (tabs, line breaks)".into());
        }

        let kind = RuleKind::parse(self.kind.trim());
        if kind.is_none() {
            let known: Vec<_> = RuleKind::ALL.iter().map(|k| k.as_str()).collect();
            bad("kind", format!("kind: `{}` is not a rule kind; use one of {}", self.kind.trim(), known.join(", ")));
        }

        let target = Some(self.target.trim().to_string()).filter(|t| !t.is_empty());
        let target = match kind.and_then(RuleKind::target) {
            None => None,
            Some(tk) => {
                let what = if tk == TargetKind::Queue { "a queue name" } else { "an outbox source name" };
                match &target {
                    None => bad("target", format!("target: a {} rule needs {what}", self.kind.trim())),
                    Some(t) if t.len() > 255 => bad("target", format!("target: {what} is at most 255 bytes")),
                    Some(_) => {}
                }
                target
            }
        };

        let mut number = |field: &'static str, text: &str| -> Option<f64> {
            let t = text.trim();
            if t.is_empty() {
                bad(field, format!("{field}: required"));
                return None;
            }
            match t.parse::<f64>() {
                Ok(v) if !v.is_finite() => {
                    bad(field, format!("{field}: `{t}` is not a finite number"));
                    None
                }
                Ok(v) if v < 0.0 => {
                    bad(field, format!("{field}: must not be negative"));
                    None
                }
                Ok(v) => Some(v),
                Err(_) => {
                    bad(field, format!("{field}: `{t}` is not a number"));
                    None
                }
            }
        };
        // One threshold is a rule: critical defaults to it, recovery to RECOVER_SHARE of it.
        let warn = number("warn_threshold", &self.warn_threshold);
        let crit =
            if self.crit_threshold.trim().is_empty() { warn } else { number("crit_threshold", &self.crit_threshold) };
        let recover_given = !self.recover_threshold.trim().is_empty();
        let recover = if recover_given {
            number("recover_threshold", &self.recover_threshold)
        } else {
            warn.map(default_recovery)
        };
        if let (Some(w), Some(c)) = (warn, crit)
            && w > c
        {
            bad("warn_threshold", format!("warn_threshold: {w} is above the critical threshold {c}"));
        }
        match (recover, warn) {
            (Some(r), Some(w)) if r >= w && recover_given => bad(
                "recover_threshold",
                format!("recover_threshold: must be below the threshold {w}, or the alert would flap"),
            ),
            (Some(r), Some(w)) if r >= w => bad(
                "warn_threshold",
                "warn_threshold: 0 would fire on every value (it fires at or above the threshold); give a \
                 threshold above 0"
                    .into(),
            ),
            _ => {}
        }

        let mut whole = |field: &'static str, text: &str, range: std::ops::RangeInclusive<i64>| -> Option<i32> {
            match text.trim().parse::<i64>() {
                Ok(v) if range.contains(&v) => Some(v as i32),
                Ok(v) => {
                    bad(field, format!("{field}: {v} is outside {}..={}", range.start(), range.end()));
                    None
                }
                Err(_) => {
                    bad(field, format!("{field}: `{}` is not a whole number", text.trim()));
                    None
                }
            }
        };
        let for_secs =
            if self.for_secs.trim().is_empty() { Some(0) } else { whole("for_secs", &self.for_secs, 0..=MAX_FOR_SECS) };
        let window_mins = match kind {
            Some(k) if k.uses_window() => {
                if self.window_mins.trim().is_empty() {
                    bad("window_mins", format!("window_mins: a {} rule needs a window in minutes", k.as_str()));
                    None
                } else {
                    whole("window_mins", &self.window_mins, 1..=MAX_WINDOW_MINS)
                }
            }
            _ => None,
        };

        let webhook_url = Some(self.webhook_url.trim().to_string()).filter(|u| !u.is_empty());
        if let Some(u) = &webhook_url {
            let scheme_ok = u.starts_with("http://") || u.starts_with("https://");
            if !scheme_ok {
                bad("webhook_url", "webhook_url: must start with http:// or https://".into());
            } else if url_host(u).is_empty() || u.chars().any(|c| c.is_whitespace() || c.is_control()) {
                bad("webhook_url", "webhook_url: not a valid URL (a host, no spaces)".into());
            } else if u.len() > 2000 {
                bad("webhook_url", "webhook_url: at most 2000 characters".into());
            }
        }
        let format_text = self.webhook_format.trim();
        let webhook_format =
            if format_text.is_empty() { Some(WebhookFormat::Json) } else { WebhookFormat::parse(format_text) };
        if webhook_format.is_none() {
            bad("webhook_format", format!("webhook_format: `{format_text}` is neither json nor slack"));
        }

        match (kind, warn, crit, recover, for_secs, webhook_format) {
            (Some(kind), Some(warn), Some(crit), Some(recover), Some(for_secs), Some(webhook_format))
                if errs.is_empty() =>
            {
                Ok(ValidRule {
                    name,
                    kind,
                    target,
                    warn,
                    crit,
                    recover,
                    for_secs,
                    window_mins,
                    webhook_url,
                    webhook_format,
                    enabled: self.enabled,
                })
            }
            _ => Err(errs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> RuleInput {
        RuleInput {
            name: "orders DLQ backlog".into(),
            kind: "dlq_awaiting".into(),
            target: "orders.dlq".into(),
            warn_threshold: "10".into(),
            crit_threshold: "100".into(),
            recover_threshold: "2".into(),
            for_secs: "60".into(),
            webhook_url: "https://hooks.example.com/T000/B000/secret".into(),
            enabled: true,
            ..RuleInput::default()
        }
    }

    fn fields(input: RuleInput) -> Vec<String> {
        input.validate().unwrap_err().into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn a_complete_rule_is_valid_with_json_as_the_default_format() {
        let v = good().validate().unwrap();
        assert_eq!(v.kind, RuleKind::DlqAwaiting);
        assert_eq!(v.webhook_format, WebhookFormat::Json);
        assert_eq!((v.warn, v.crit, v.recover, v.for_secs), (10.0, 100.0, 2.0, 60));
        assert_eq!(v.window_mins, None);
    }

    #[test]
    fn every_bad_field_is_reported_at_once() {
        let input = RuleInput {
            name: "  ".into(),
            kind: "dlq_new".into(),
            target: "".into(),
            warn_threshold: "ten".into(),
            crit_threshold: "-1".into(),
            recover_threshold: "inf".into(),
            for_secs: "999999".into(),
            window_mins: "".into(),
            webhook_url: "ftp://x".into(),
            webhook_format: "xml".into(),
            enabled: true,
        };
        let f = fields(input);
        for want in [
            "name",
            "target",
            "warn_threshold",
            "crit_threshold",
            "recover_threshold",
            "for_secs",
            "window_mins",
            "webhook_url",
            "webhook_format",
        ] {
            assert!(f.iter().any(|x| x == want), "{want} missing from {f:?}");
        }
    }

    #[test]
    fn warn_above_crit_and_recovery_not_below_warn_are_refused() {
        let f = fields(RuleInput { warn_threshold: "200".into(), ..good() });
        assert_eq!(f, ["warn_threshold"]);
        let e = RuleInput { recover_threshold: "10".into(), ..good() }.validate().unwrap_err();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].field, "recover_threshold");
        assert!(e[0].message.contains("below the threshold"), "{}", e[0].message);
    }

    #[test]
    fn one_threshold_is_a_rule_with_critical_at_it_and_recovery_a_little_below() {
        let one = RuleInput { crit_threshold: " ".into(), recover_threshold: "".into(), ..good() };
        let v = one.clone().validate().unwrap();
        assert_eq!((v.warn, v.crit, v.recover), (10.0, 10.0, 9.0));
        // A recovery given is kept, and one of the two optional thresholds given alone too.
        let v = RuleInput { recover_threshold: "3".into(), ..one.clone() }.validate().unwrap();
        assert_eq!((v.crit, v.recover), (10.0, 3.0));
        let v = RuleInput { crit_threshold: "50".into(), ..one.clone() }.validate().unwrap();
        assert_eq!((v.crit, v.recover), (50.0, 9.0));
        // A threshold of 0 would always fire: said on the threshold, not on a field left empty.
        let e = RuleInput { warn_threshold: "0".into(), ..one.clone() }.validate().unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].field, "warn_threshold");
        assert!(e[0].message.contains("every value"), "{}", e[0].message);
        // The threshold itself stays required.
        assert_eq!(fields(RuleInput { warn_threshold: "".into(), ..one }), ["warn_threshold"]);
    }

    #[test]
    fn an_unknown_kind_lists_the_known_ones() {
        let e = RuleInput { kind: "cpu".into(), ..good() }.validate().unwrap_err();
        assert_eq!(e[0].field, "kind");
        assert!(e[0].message.contains("dlq_depth") && e[0].message.contains("`cpu`"), "{}", e[0].message);
    }

    #[test]
    fn a_new_group_rule_needs_a_window_and_drops_a_target() {
        let base = RuleInput { kind: "new_failure_group".into(), ..good() };
        assert_eq!(fields(base.clone()), ["window_mins"]);
        let v = RuleInput { window_mins: "60".into(), ..base }.validate().unwrap();
        assert_eq!((v.target, v.window_mins), (None, Some(60)));
    }

    #[test]
    fn the_host_of_a_webhook_url_hides_its_path_and_credentials() {
        assert_eq!(url_host("https://hooks.slack.com/services/T/B/secret"), "hooks.slack.com");
        assert_eq!(url_host("http://user:pw@127.0.0.1:9000/x?token=1"), "127.0.0.1:9000");
    }
}
