//! The console page that shows an alert's cause, as a path (for the banner) or an absolute
//! URL (for webhooks, from the public base URL).
//!
//! Policy: names in query strings are percent-encoded, so a queue called `a&b` links to
//! itself and not to a filter the operator did not ask for.

use super::rule::RuleKind;
use crate::management::encode;

/// The path for a rule; `group_id` is the newest new failure group, when one is known.
pub fn path(kind: RuleKind, target: Option<&str>, group_id: Option<i64>) -> String {
    let t = encode(target.unwrap_or(""));
    match kind {
        // A DLQ alert opens that DLQ's failure groups, largest first: one click from the cause.
        RuleKind::DlqDepth | RuleKind::DlqAwaiting | RuleKind::DlqNew if t.is_empty() => "/dead-letters/groups".into(),
        RuleKind::DlqDepth | RuleKind::DlqAwaiting | RuleKind::DlqNew => format!("/dead-letters/groups?dlq={t}"),
        RuleKind::OutboxOldestAge => format!("/outbox?source={t}&bucket=pending"),
        RuleKind::OutboxStuck => format!("/outbox?source={t}&bucket=stuck"),
        RuleKind::OutboxFailed => format!("/outbox?source={t}&bucket=failed"),
        RuleKind::NewFailureGroup => match group_id {
            Some(id) => format!("/dead-letters?group={id}&status=all"),
            None => "/dead-letters/groups".to_string(),
        },
        RuleKind::TopologyCritical => "/topology".to_string(),
    }
}

/// `base` + `path`, without a doubled slash; the bare path when there is no base.
pub fn absolute(base: Option<&str>, path: &str) -> String {
    match base.map(|b| b.trim_end_matches('/')).filter(|b| !b.is_empty()) {
        Some(b) => format!("{b}{path}"),
        None => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_are_encoded_in_links() {
        assert_eq!(path(RuleKind::DlqDepth, Some("orders dlq&x"), None), "/dead-letters/groups?dlq=orders%20dlq%26x");
    }

    #[test]
    fn each_kind_links_to_the_page_with_its_cause() {
        assert_eq!(path(RuleKind::OutboxStuck, Some("billing"), None), "/outbox?source=billing&bucket=stuck");
        assert_eq!(path(RuleKind::NewFailureGroup, None, Some(42)), "/dead-letters?group=42&status=all");
        assert_eq!(path(RuleKind::TopologyCritical, None, None), "/topology");
        assert_eq!(absolute(Some("https://r.example/"), "/outbox?source=a"), "https://r.example/outbox?source=a");
        assert_eq!(absolute(None, "/x"), "/x");
    }
}
