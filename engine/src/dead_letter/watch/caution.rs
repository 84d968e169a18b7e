//! Why starting to ingest a queue may drain something that is not a dead-letter queue.
//!
//! Policy: ingesting consumes a queue and acks what it stores, so watching a live business
//! queue by mistake takes its messages from the service that works them. Before a queue is
//! started from the console or the CLI, the live topology (management API) is asked; a
//! queue with consumers other than Revenant's ingesters, one no queue dead-letters into (a
//! retry queue included), or one that cannot be checked at all needs a confirmation: the
//! queue's name typed out in the console, `--force` on the command line. The callers
//! enforce it; seeding from `ingest.queues` and `ingest.auto` are configuration, not asked.

use std::fmt;

use crate::topology::{Topology, dead_lettering, fetch};

/// The consumer tags Revenant's own ingesters use (`dead_letter::ingest`).
pub const INGEST_TAG_PREFIX: &str = "revenant-ingest-";

/// One reason to confirm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caution {
    /// Consumers other than Revenant's ingesters: someone works this queue.
    Consumers { queue: String, count: i64 },
    /// No queue in the vhost dead-letters into it.
    NotATarget { queue: String },
    /// A retry queue: what it holds goes back to `to` when its TTL passes.
    Retry { queue: String, to: Vec<String> },
    /// The vhost has no such queue.
    Missing { queue: String, vhost: String },
    /// The management API is off or did not answer: nothing could be checked.
    Unchecked { queue: String, reason: String },
}

impl fmt::Display for Caution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Consumers { queue, count: 1 } => write!(f, "queue `{queue}` has 1 consumer"),
            Self::Consumers { queue, count } => write!(f, "queue `{queue}` has {count} consumers"),
            Self::NotATarget { queue } => write!(f, "no queue dead-letters into `{queue}`"),
            Self::Retry { queue, to } => {
                write!(f, "`{queue}` is a retry queue: its messages go back to `{}` after their TTL", to.join("`, `"))
            }
            Self::Missing { queue, vhost } => write!(f, "there is no queue `{queue}` in vhost `{vhost}`"),
            Self::Unchecked { queue, reason } => {
                write!(f, "cannot check whether `{queue}` is a dead-letter queue or has consumers: {reason}")
            }
        }
    }
}

/// What needs confirming before `queue` is ingested, read from a snapshot; empty when it
/// is a dead-letter target that nothing but Revenant consumes.
pub fn assess(t: &Topology, queue: &str) -> Vec<Caution> {
    let Some(i) = t.queues.iter().position(|q| q.name == queue) else {
        return vec![Caution::Missing { queue: queue.to_string(), vhost: t.vhost.clone() }];
    };
    let mut out = Vec::new();
    let listed: Vec<&str> = t.consumers.iter().filter(|c| c.queue == queue).map(|c| c.consumer_tag.as_str()).collect();
    let ours = listed.iter().filter(|tag| tag.starts_with(INGEST_TAG_PREFIX)).count() as i64;
    // The consumer list is live, the queue's count comes with the statistics tick: either
    // may be the one that already sees a new consumer.
    let foreign = (listed.len() as i64 - ours).max(t.queues[i].consumers.unwrap_or(0) - ours);
    if foreign > 0 {
        out.push(Caution::Consumers { queue: queue.to_string(), count: foreign });
    }
    let roles = dead_lettering::roles(t);
    match roles[i] {
        dead_lettering::Role::DeadLetter => {}
        dead_lettering::Role::Retry => {
            let to =
                dead_lettering::targets(t, &t.queues[i]).map(|x| x.queues.into_iter().collect()).unwrap_or_default();
            out.push(Caution::Retry { queue: queue.to_string(), to });
        }
        dead_lettering::Role::Work => out.push(Caution::NotATarget { queue: queue.to_string() }),
    }
    out
}

/// What needs confirming before `queue` (in `vhost`) is ingested, asked of the management
/// API at `management_url` (None: it is off).
pub async fn check(management_url: Option<&str>, vhost: &str, queue: &str) -> Vec<Caution> {
    let unchecked = |reason: String| vec![Caution::Unchecked { queue: queue.to_string(), reason }];
    let Some(url) = management_url else {
        return unchecked("the RabbitMQ management API is off (management_url)".into());
    };
    let http = match crate::topology::http_client() {
        Ok(h) => h,
        Err(e) => return unchecked(format!("no HTTP client: {e}")),
    };
    match fetch::snapshot(&http, url, vhost).await {
        Ok(t) => assess(&t, queue),
        Err(e) => {
            tracing::warn!(queue, error = %e, "cannot check a queue before ingesting it");
            unchecked(e.to_string())
        }
    }
}

/// Whether starting `queue` may go ahead: nothing to confirm, or its name typed out.
pub fn confirmed(queue: &str, cautions: &[Caution], typed: Option<&str>) -> bool {
    cautions.is_empty() || typed.map(str::trim) == Some(queue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::fetch::{Consumer, Queue};
    use serde_json::json;

    fn queue(name: &str, args: serde_json::Value, consumers: i64) -> Queue {
        Queue {
            name: name.into(),
            arguments: args.as_object().cloned().unwrap_or_default(),
            consumers: Some(consumers),
            ..Default::default()
        }
    }

    fn topology() -> Topology {
        Topology {
            vhost: "/".into(),
            queues: vec![
                queue("orders", json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"}), 3),
                queue("orders.dlq", json!({}), 1),
                queue("loose", json!({}), 0),
            ],
            consumers: vec![Consumer {
                queue: "orders.dlq".into(),
                consumer_tag: format!("{INGEST_TAG_PREFIX}abc"),
                ack_required: true,
                prefetch_count: 500,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_dead_letter_target_consumed_only_by_revenant_needs_no_confirmation() {
        assert_eq!(assess(&topology(), "orders.dlq"), []);
    }

    #[test]
    fn a_business_queue_with_consumers_needs_one_and_says_why() {
        let why: Vec<String> = assess(&topology(), "orders").iter().map(|c| c.to_string()).collect();
        assert_eq!(why, ["queue `orders` has 3 consumers", "no queue dead-letters into `orders`"]);
        let loose: Vec<String> = assess(&topology(), "loose").iter().map(|c| c.to_string()).collect();
        assert_eq!(loose, ["no queue dead-letters into `loose`"]);
        assert_eq!(assess(&topology(), "gone")[0].to_string(), "there is no queue `gone` in vhost `/`");
    }

    #[test]
    fn only_the_queue_name_typed_out_confirms() {
        let c = assess(&topology(), "orders");
        assert!(!confirmed("orders", &c, None));
        assert!(!confirmed("orders", &c, Some("order")));
        assert!(confirmed("orders", &c, Some(" orders ")));
        assert!(confirmed("orders.dlq", &[], None));
    }

    #[tokio::test]
    async fn a_management_api_that_is_off_or_unreachable_asks_for_confirmation() {
        let off = check(None, "/", "orders.dlq").await;
        assert!(off[0].to_string().contains("management API is off"), "{}", off[0]);
        let down = check(Some("http://u:p@127.0.0.1:9"), "/", "orders.dlq").await;
        assert!(matches!(down[..], [Caution::Unchecked { .. }]), "{down:?}");
    }
}
