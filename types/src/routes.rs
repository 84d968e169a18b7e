//! Links into the console, built in one place: the pages link to each other with them, and
//! the alert evaluator puts them in webhooks (absolute, from the public URL).
//!
//! Policy: every name in a query string is percent-encoded, so a queue called `a&b` links
//! to itself and not to a filter the operator did not ask for.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::{Bucket, RuleKind};

/// The path segments of the console's pages: the router is built from these, and so is
/// every link below, so a renamed page cannot leave a link behind.
pub mod seg {
    pub const LOGIN: &str = "login";
    pub const AUDIT: &str = "audit";
    pub const ALERTS: &str = "alerts";
    pub const OUTBOX: &str = "outbox";
    pub const TOPOLOGY: &str = "topology";
    pub const REPLAYS: &str = "replays";
    pub const USERS: &str = "users";
    pub const DEAD_LETTERS: &str = "dead-letters";
    /// Under `DEAD_LETTERS`.
    pub const GROUPS: &str = "groups";
    /// Under `DEAD_LETTERS` (the filtered list) and under one dead letter: an NDJSON download.
    pub const EXPORT: &str = "export.ndjson";
    /// Under one failure group: its replay to the origin queue as a page and a form, usable
    /// before the page's script has loaded.
    pub const REPLAY: &str = "replay";
}

use seg::*;

/// Everything but RFC 3986's unreserved characters.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// Percent-encodes one path segment or query value (a `/` vhost is `%2F`).
pub fn encode(s: &str) -> String {
    utf8_percent_encode(s, COMPONENT).to_string()
}

/// The failure groups, of one DLQ when given: largest first.
pub fn failure_groups(dlq: Option<&str>) -> String {
    match dlq.filter(|q| !q.is_empty()) {
        Some(q) => format!("/{DEAD_LETTERS}/{GROUPS}?dlq={}", encode(q)),
        None => format!("/{DEAD_LETTERS}/{GROUPS}"),
    }
}

/// A failure group's own page.
pub fn failure_group(id: i64) -> String {
    format!("/{DEAD_LETTERS}/{GROUPS}/{id}")
}

/// A failure group's replay to its origin queue, previewed on a page of its own.
pub fn group_replay(id: i64) -> String {
    format!("/{DEAD_LETTERS}/{GROUPS}/{id}/{REPLAY}")
}

/// A DLQ's dead letters awaiting triage.
pub fn dead_letters_in(queue: &str) -> String {
    format!("/{DEAD_LETTERS}?queue={}", encode(queue))
}

/// A failure group's dead letters awaiting triage.
pub fn group_awaiting(id: i64) -> String {
    format!("/{DEAD_LETTERS}?group={id}")
}

/// Every dead letter of a failure group, whatever its status.
pub fn group_messages(id: i64) -> String {
    format!("/{DEAD_LETTERS}?group={id}&status=all")
}

/// One dead letter.
pub fn dead_letter(id: i64) -> String {
    format!("/{DEAD_LETTERS}/{id}")
}

/// One dead letter as an NDJSON download (one line).
pub fn dead_letter_export(id: i64) -> String {
    format!("/{DEAD_LETTERS}/{id}/{EXPORT}")
}

/// The dead letters a list filter selects, as an NDJSON download; `query` is the list's own
/// query string (`?queue=…`, or empty), so the download holds what the list shows.
pub fn dead_letters_export(query: &str) -> String {
    format!("/{DEAD_LETTERS}/{EXPORT}{query}")
}

/// One replay plan.
pub fn replay_plan(id: i64) -> String {
    format!("/{REPLAYS}/{id}")
}

/// An alert rule's page.
pub fn alert_rule(id: i64) -> String {
    format!("/{ALERTS}/{id}")
}

/// An outbox source's rows, pending first.
pub fn outbox_source(source: &str) -> String {
    format!("/{OUTBOX}?source={}", encode(source))
}

/// One outbox row of a source.
pub fn outbox_row(source: &str, id: &str) -> String {
    format!("/{OUTBOX}/{}/{}", encode(source), encode(id))
}

/// An outbox source's rows in one bucket.
pub fn outbox(source: &str, bucket: Bucket) -> String {
    format!("/{OUTBOX}?source={}&bucket={}", encode(source), bucket.as_str())
}

/// The page that shows an alert's cause; `group_id` is the newest new failure group, when
/// one is known.
pub fn alert_cause(kind: RuleKind, target: Option<&str>, group_id: Option<i64>) -> String {
    let target = target.unwrap_or("");
    match kind {
        // A DLQ alert opens that DLQ's failure groups, largest first: one click from the cause.
        RuleKind::DlqDepth | RuleKind::DlqAwaiting | RuleKind::DlqNew => failure_groups(Some(target)),
        RuleKind::OutboxOldestAge => outbox(target, Bucket::Pending),
        RuleKind::OutboxStuck => outbox(target, Bucket::Stuck),
        RuleKind::OutboxFailed => outbox(target, Bucket::Failed),
        RuleKind::NewFailureGroup => match group_id {
            Some(id) => group_messages(id),
            None => failure_groups(None),
        },
        RuleKind::TopologyCritical => format!("/{TOPOLOGY}"),
        // The Overview: the banner names the alarm, the heartbeats who waits.
        RuleKind::PublishersBlocked => "/".to_string(),
        // The Outbox page lists the source database's slots, and an admin drops one there.
        RuleKind::SlotRetainedMb => outbox_source(target),
    }
}

/// `base` + `path`, without a doubled slash; the bare path when there is no base.
pub fn absolute(base: Option<&str>, path: &str) -> String {
    match base.map(|b| b.trim_end_matches('/')).filter(|b| !b.is_empty()) {
        Some(b) => format!("{b}{path}"),
        None => path.to_string(),
    }
}

/// Where the RabbitMQ management UI is (its base URL, never with credentials) and the vhost
/// whose queues a page names: what a link to a queue's page there needs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ManagementUi {
    pub base: String,
    pub vhost: String,
}

impl ManagementUi {
    /// This queue's page in the management UI.
    pub fn queue(&self, queue: &str) -> String {
        management_queue(&self.base, &self.vhost, queue)
    }
}

/// A queue's page in the RabbitMQ management UI at `base`: `base/#/queues/<vhost>/<queue>`,
/// both names percent-encoded (the default vhost `/` is `%2F`).
pub fn management_queue(base: &str, vhost: &str, queue: &str) -> String {
    format!("{}/#/queues/{}/{}", base.trim_end_matches('/'), encode(vhost), encode(queue))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_are_encoded_in_links() {
        assert_eq!(
            alert_cause(RuleKind::DlqDepth, Some("orders dlq&x"), None),
            "/dead-letters/groups?dlq=orders%20dlq%26x"
        );
        assert_eq!(encode("/"), "%2F");
    }

    #[test]
    fn each_kind_links_to_the_page_with_its_cause() {
        assert_eq!(alert_cause(RuleKind::DlqAwaiting, None, None), "/dead-letters/groups");
        assert_eq!(alert_cause(RuleKind::OutboxStuck, Some("billing"), None), "/outbox?source=billing&bucket=stuck");
        assert_eq!(alert_cause(RuleKind::SlotRetainedMb, Some("billing"), None), "/outbox?source=billing");
        assert_eq!(alert_cause(RuleKind::NewFailureGroup, None, Some(42)), "/dead-letters?group=42&status=all");
        assert_eq!(alert_cause(RuleKind::TopologyCritical, None, None), "/topology");
        assert_eq!(absolute(Some("https://r.example/"), "/outbox?source=a"), "https://r.example/outbox?source=a");
        assert_eq!(absolute(None, "/x"), "/x");
    }

    #[test]
    fn a_queue_links_to_its_page_in_the_management_ui_with_both_names_encoded() {
        assert_eq!(
            management_queue("http://mq.local:15672", "/", "orders.dlq"),
            "http://mq.local:15672/#/queues/%2F/orders.dlq"
        );
        assert_eq!(
            management_queue("https://mq.example/rabbit/", "team a", "orders dlq/#1?x&y"),
            "https://mq.example/rabbit/#/queues/team%20a/orders%20dlq%2F%231%3Fx%26y"
        );
        let ui = ManagementUi { base: "http://mq:15672".into(), vhost: "revenant-e2e".into() };
        assert_eq!(ui.queue("q"), "http://mq:15672/#/queues/revenant-e2e/q");
    }

    #[test]
    fn downloads_sit_under_the_dead_letter_pages() {
        assert_eq!(dead_letter_export(42), "/dead-letters/42/export.ndjson");
        assert_eq!(dead_letters_export(""), "/dead-letters/export.ndjson");
        assert_eq!(
            dead_letters_export("?queue=a%26b&status=all"),
            "/dead-letters/export.ndjson?queue=a%26b&status=all"
        );
    }
}
