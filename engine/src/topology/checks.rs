//! The reliability checks: pure functions from a topology snapshot, the contracts and the set
//! of DLQs Revenant watches to pass / warn / fail verdicts, each with a one-line reason and fix.
//!
//! Policy: a check that does not apply to a queue's level or role is left out rather than
//! shown as a pass (a disposable queue needs no DLX; a DLQ needs no DLX of its own; a retry
//! queue has no consumers by design). Missing statistics give `Unknown`, never a pass. The
//! stricter verdict (fail rather than warn) is kept for critical queues.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::{
    contract::{self, Contract, Level},
    dead_lettering::{self as dl, Role},
    fetch::{Exchange, Placement, Queue, Rates, Topology},
    routing,
};
pub use types::{Check, Verdict};

pub const DURABLE: &str = "durable";
pub const QUORUM: &str = "quorum";
pub const DEAD_LETTER_EXCHANGE: &str = "dead-letter-exchange";
pub const DEAD_LETTER_ROUTED: &str = "dead-letter-routed";
pub const DEAD_LETTER_WATCHED: &str = "dead-letter-watched";
pub const BOUNDED_REDELIVERY: &str = "bounded-redelivery";
pub const CONSUMERS: &str = "consumers";
pub const UNACKED: &str = "unacked";
pub const MANUAL_ACK: &str = "manual-ack";
pub const UNROUTABLE: &str = "unroutable";
pub const MEMORY_ALARM: &str = "memory-alarm";
pub const DISK_ALARM: &str = "disk-alarm";
pub const NODE_RUNNING: &str = "node-running";
pub const PARTITION: &str = "partition";
pub const REPLICAS: &str = "replicas";
pub const DEAD_LETTER_QUEUE_TYPE: &str = "dead-letter-queue-type";

/// Every check, with what it verifies: what an unreachable report says it could not do.
pub const ALL: &[(&str, &str)] = &[
    (DURABLE, "queue and the exchanges feeding it are durable"),
    (QUORUM, "critical queues are quorum queues"),
    (DEAD_LETTER_EXCHANGE, "a dead-letter exchange is set and exists"),
    (DEAD_LETTER_ROUTED, "the dead-letter exchange routes to a queue"),
    (DEAD_LETTER_WATCHED, "the DLQ is watched by Revenant"),
    (BOUNDED_REDELIVERY, "redelivery is bounded (delivery limit or retry queue)"),
    (CONSUMERS, "the queue has consumers"),
    (UNACKED, "messages are not piling up unacknowledged"),
    (MANUAL_ACK, "no auto-ack consumer on a critical queue"),
    (UNROUTABLE, "exchanges do not silently drop unroutable messages"),
    (MEMORY_ALARM, "no node has a memory alarm"),
    (DISK_ALARM, "no node has a disk alarm"),
    (NODE_RUNNING, "every cluster node is running"),
    (PARTITION, "no node is partitioned from another"),
    (REPLICAS, "quorum queues have three members, all online, and a quorum"),
    (DEAD_LETTER_QUEUE_TYPE, "a quorum queue's dead letters go to a quorum DLQ"),
];

/// Members a quorum queue needs to survive the loss of one node.
pub const MIN_MEMBERS: usize = 3;

/// Above this many unacknowledged messages a queue warns whatever the rates say.
pub const UNACKED_PILE: i64 = 10_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueReport {
    pub vhost: String,
    pub queue: String,
    pub level: Level,
    /// The pattern of the contract that set the level; `None` for the default (standard).
    pub contract: Option<String>,
    pub role: Role,
    pub checks: Vec<Check>,
    pub consumers: Option<i64>,
    pub messages_ready: Option<i64>,
    pub messages_unacknowledged: Option<i64>,
    pub rates: Rates,
    /// The queue's type, and where it lives.
    #[serde(default)]
    pub kind: String,
    #[serde(flatten)]
    pub placement: Placement,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExchangeReport {
    pub vhost: String,
    pub exchange: String,
    pub checks: Vec<Check>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    pub node: String,
    pub checks: Vec<Check>,
}

/// Fail for critical queues, warn otherwise.
fn strict(level: Level) -> Verdict {
    if level == Level::Critical { Verdict::Fail } else { Verdict::Warn }
}

fn list(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    names.into_iter().map(|n| format!("`{}`", n.as_ref())).collect::<Vec<_>>().join(", ")
}

pub fn node_reports(t: &Topology) -> Vec<NodeReport> {
    t.nodes
        .iter()
        .map(|n| {
            let mem = if n.mem_alarm {
                Check::new(
                    MEMORY_ALARM,
                    Verdict::Fail,
                    format!("memory alarm on {}: every publishing connection is blocked", n.name),
                    "drain the deepest queues or raise vm_memory_high_watermark",
                )
            } else {
                Check::pass(MEMORY_ALARM, format!("no memory alarm on {}", n.name))
            };
            let disk = if n.disk_free_alarm {
                Check::new(
                    DISK_ALARM,
                    Verdict::Fail,
                    format!("disk alarm on {}: every publishing connection is blocked", n.name),
                    "free disk space on the node or lower disk_free_limit",
                )
            } else {
                Check::pass(DISK_ALARM, format!("no disk alarm on {}", n.name))
            };
            let mut checks = vec![mem, disk];
            if t.nodes.len() > 1 {
                checks.push(if n.running {
                    Check::pass(NODE_RUNNING, format!("{} is running", n.name))
                } else {
                    Check::new(
                        NODE_RUNNING,
                        Verdict::Fail,
                        format!(
                            "{} is down: its quorum queue members are offline and queues that live only there are unavailable",
                            n.name
                        ),
                        format!("start it (`rabbitmqctl -n {} start_app`) or remove it from the cluster", n.name),
                    )
                });
                checks.push(if n.partitions.is_empty() {
                    Check::pass(PARTITION, format!("{} sees every other node", n.name))
                } else {
                    Check::new(
                        PARTITION,
                        Verdict::Fail,
                        format!("{} is partitioned from {}: the two sides may accept different writes", n.name, list(&n.partitions)),
                        "restore the network between the nodes, then restart the minority side",
                    )
                });
            }
            NodeReport { node: n.name.clone(), checks }
        })
        .collect()
}

/// Exchanges that can drop messages nobody is bound for. The default exchange and unused
/// built-in `amq.*` exchanges are left out: nobody chose them.
pub fn exchange_reports(t: &Topology) -> Vec<ExchangeReport> {
    let used = |x: &Exchange| t.bindings.iter().any(|b| b.source == x.name);
    t.exchanges
        .iter()
        .filter(|x| !x.name.is_empty() && (!x.name.starts_with("amq.") || used(x)))
        .map(|x| {
            let check = match (routing::alternate_exchange(x), routing::covers_every_key(t, x)) {
                (Some(ae), _) if !t.exchanges.iter().any(|y| y.name == ae) => Check::new(
                    UNROUTABLE,
                    Verdict::Warn,
                    format!("alternate exchange `{ae}` does not exist: unroutable messages are dropped"),
                    format!("declare exchange `{ae}` (fanout) and bind a watched queue to it"),
                ),
                (Some(ae), _) => Check::pass(UNROUTABLE, format!("unroutable messages go to `{ae}`")),
                (None, Some(true)) => Check::pass(UNROUTABLE, "every routing key reaches a binding"),
                (None, Some(false)) => Check::new(
                    UNROUTABLE,
                    Verdict::Warn,
                    format!("a `{}` exchange without an alternate exchange silently drops unmatched keys", x.kind),
                    "set alternate-exchange (argument or policy) to a fanout exchange bound to a watched queue",
                ),
                (None, None) => Check::new(
                    UNROUTABLE,
                    Verdict::Unknown,
                    format!("cannot tell which keys a `{}` exchange drops", x.kind),
                    "set an alternate exchange to be sure nothing is dropped",
                ),
            };
            ExchangeReport { vhost: t.vhost.clone(), exchange: x.name.clone(), checks: vec![check] }
        })
        .collect()
}

fn durability(t: &Topology, q: &Queue) -> Check {
    if !q.durable {
        return Check::new(
            DURABLE,
            Verdict::Fail,
            "the queue is not durable: a broker restart deletes it with its messages",
            "delete and redeclare it durable (durability cannot be changed in place)",
        );
    }
    let transient: Vec<&str> = t
        .bindings
        .iter()
        .filter(|b| b.destination_type == "queue" && b.destination == q.name && !b.source.is_empty())
        .filter_map(|b| t.exchanges.iter().find(|x| x.name == b.source))
        .filter(|x| !x.durable)
        .map(|x| x.name.as_str())
        .collect();
    if !transient.is_empty() {
        return Check::new(
            DURABLE,
            Verdict::Fail,
            format!("fed by non-durable exchange {}: a restart drops it and its bindings", list(&transient)),
            "redeclare those exchanges durable and re-create their bindings",
        );
    }
    if q.auto_delete || q.exclusive {
        return Check::new(
            DURABLE,
            Verdict::Warn,
            "the queue is auto-delete or exclusive: it disappears with its last consumer or connection",
            "redeclare it without auto_delete and exclusive",
        );
    }
    Check::pass(DURABLE, "durable queue fed by durable exchanges")
}

fn quorum(q: &Queue) -> Check {
    match q.kind.as_str() {
        "quorum" | "stream" => Check::pass(QUORUM, format!("replicated {} queue", q.kind)),
        other => Check::new(
            QUORUM,
            Verdict::Fail,
            match &q.placement.node {
                Some(n) => format!("a {other} queue lives on one node ({n}): losing that node loses or blocks it"),
                None => format!("a {other} queue lives on one node: losing that node loses or blocks it"),
            },
            "recreate it with x-queue-type = quorum and move consumers over",
        ),
    }
}

/// A quorum queue's members in a cluster: a quorum (a majority online) keeps it available,
/// three members let it lose one node. Left out on a single node and when the broker does
/// not report members.
fn replicas(t: &Topology, q: &Queue, level: Level) -> Option<Check> {
    let p = &q.placement;
    if q.kind != "quorum" || t.nodes.len() < 2 || p.members.is_empty() {
        return None;
    }
    let (m, on) = (p.members.len(), p.online.iter().filter(|n| p.members.contains(n)).count());
    let leader = p.leader.as_deref().unwrap_or("no leader");
    let offline: Vec<&String> = p.members.iter().filter(|n| !p.online.contains(n)).collect();
    Some(if on < m / 2 + 1 {
        Check::new(
            REPLICAS,
            Verdict::Fail,
            format!(
                "no quorum: {on} of {m} members online ({} offline); the queue accepts and delivers nothing",
                list(&offline)
            ),
            "start the offline nodes; a quorum queue needs a majority of its members",
        )
    } else if m < MIN_MEMBERS {
        Check::new(
            REPLICAS,
            strict(level),
            format!(
                "{m} member(s) ({}): losing {} loses the quorum",
                list(&p.members),
                if m == 1 { "its node" } else { "one node" }
            ),
            format!(
                "grow it to {MIN_MEMBERS} members: `rabbitmq-queues grow NODE all` or redeclare it on a cluster of {MIN_MEMBERS}"
            ),
        )
    } else if !offline.is_empty() {
        Check::new(
            REPLICAS,
            Verdict::Warn,
            format!(
                "{on} of {m} members online ({} offline, leader {leader}): one more loss stops the queue",
                list(&offline)
            ),
            "start the offline node; its member catches up on its own",
        )
    } else {
        Check::pass(REPLICAS, format!("leader {leader}, {m} members online"))
    })
}

fn consumers(q: &Queue, level: Level) -> Check {
    match q.consumers {
        None => Check::new(CONSUMERS, Verdict::Unknown, "no statistics yet", ""),
        Some(0) => Check::new(
            CONSUMERS,
            strict(level),
            format!("no consumers; {} messages ready", q.messages_ready.unwrap_or(0)),
            "start the consuming service, or check why it cannot connect",
        ),
        Some(n) => Check::pass(CONSUMERS, format!("{n} consumer(s)")),
    }
}

fn unacked(q: &Queue, level: Level) -> Check {
    let (Some(unacked), Some(ready)) = (q.messages_unacknowledged, q.messages_ready) else {
        return Check::new(UNACKED, Verdict::Unknown, "no statistics yet", "");
    };
    // Consumers holding messages while others wait and nothing was acked lately are stuck.
    let stuck = unacked > 0 && ready > 0 && q.rates.ack.unwrap_or(0.0) == 0.0;
    if stuck || unacked >= UNACKED_PILE {
        let verdict = if stuck { strict(level) } else { Verdict::Warn };
        return Check::new(
            UNACKED,
            verdict,
            format!("{unacked} delivered but unacknowledged, {ready} waiting, no acks lately"),
            "look for a stuck or slow consumer (it holds its prefetch); restart it or lower its prefetch",
        );
    }
    Check::pass(UNACKED, format!("{unacked} unacknowledged"))
}

fn manual_ack(t: &Topology, q: &Queue) -> Option<Check> {
    let mine: Vec<_> = t.consumers.iter().filter(|c| c.queue == q.name).collect();
    if mine.is_empty() {
        // The queue's consumer count is refreshed before the consumer list, or neither yet.
        return (q.consumers.unwrap_or(0) > 0)
            .then(|| Check::new(MANUAL_ACK, Verdict::Unknown, "consumer details not reported yet", ""));
    }
    let auto: Vec<&str> = mine.iter().filter(|c| !c.ack_required).map(|c| c.consumer_tag.as_str()).collect();
    Some(if auto.is_empty() {
        Check::pass(MANUAL_ACK, "every consumer acknowledges manually")
    } else {
        Check::new(
            MANUAL_ACK,
            Verdict::Fail,
            format!("consumer {} uses auto-ack: a crash loses what it was sent", list(&auto)),
            "consume with manual acknowledgements and ack after the work is committed",
        )
    })
}

fn dead_letter_checks(t: &Topology, q: &Queue, level: Level, roles: &[Role], watched: &HashSet<String>) -> Vec<Check> {
    let Some(x) = dl::targets(t, q) else {
        return vec![Check::new(
            DEAD_LETTER_EXCHANGE,
            Verdict::Fail,
            "no dead-letter exchange: rejected and expired messages are dropped",
            "set x-dead-letter-exchange, or a policy with dead-letter-exchange, to an exchange bound to a DLQ",
        )];
    };
    let ex = if x.exchange.is_empty() { "(default)".to_string() } else { x.exchange.clone() };
    if !x.exchange_exists {
        return vec![Check::new(
            DEAD_LETTER_EXCHANGE,
            Verdict::Fail,
            format!("dead-letter exchange `{ex}` does not exist: dead letters are dropped"),
            format!("declare exchange `{ex}` and bind a DLQ to it"),
        )];
    }
    let mut out = vec![Check::pass(DEAD_LETTER_EXCHANGE, format!("dead letters go to exchange `{ex}`"))];
    let keys = dl::dead_letter_keys(t, q);
    out.push(match (&x.unknown, x.queues.is_empty(), x.dropped_keys.is_empty()) {
        (_, true, false) => Check::new(
            DEAD_LETTER_ROUTED,
            Verdict::Fail,
            format!("no binding on `{ex}` matches dead-letter key {}: dead letters are dropped", list(&keys)),
            format!("bind a DLQ to `{ex}` with that key, or make `{ex}` a fanout exchange"),
        ),
        (Some(r), true, _) => Check::new(DEAD_LETTER_ROUTED, Verdict::Unknown, r.clone(), ""),
        (_, false, false) => Check::new(
            DEAD_LETTER_ROUTED,
            Verdict::Warn,
            format!("dead letters with key {} are dropped; others reach {}", list(&x.dropped_keys), list(&x.queues)),
            format!("bind a DLQ to `{ex}` for those keys, or set x-dead-letter-routing-key"),
        ),
        _ => Check::pass(DEAD_LETTER_ROUTED, format!("dead letters reach {}", list(&x.queues))),
    });
    if x.queues.is_empty() {
        return out;
    }
    if q.kind == "quorum" && t.nodes.len() > 1 {
        let classic: Vec<&String> =
            x.queues.iter().filter(|n| t.queues.iter().any(|d| &d.name == *n && d.kind == "classic")).collect();
        out.push(if classic.is_empty() {
            Check::pass(DEAD_LETTER_QUEUE_TYPE, format!("dead letters go to quorum queue(s) {}", list(&x.queues)))
        } else {
            Check::new(
                DEAD_LETTER_QUEUE_TYPE,
                strict(level),
                format!("a quorum queue dead-letters into classic {}: they live on one node, and losing it loses the dead letters", list(&classic)),
                "recreate the DLQ as a quorum queue, and set dead-letter-strategy at-least-once with overflow reject-publish on this queue",
            )
        });
    }
    let retry: HashSet<&str> =
        t.queues.iter().zip(roles).filter(|(_, r)| **r == Role::Retry).map(|(q, _)| q.name.as_str()).collect();
    let dlqs: Vec<&String> = x.queues.iter().filter(|n| !retry.contains(n.as_str())).collect();
    let unwatched: Vec<&&String> = dlqs.iter().filter(|n| !watched.contains(n.as_str())).collect();
    out.push(if dlqs.is_empty() {
        Check::new(
            DEAD_LETTER_WATCHED,
            Verdict::Warn,
            format!("dead letters only cycle through retry queue {}; nothing parks poison messages", list(&x.queues)),
            "after N attempts (x-death count) send messages to a parking DLQ that Revenant ingests",
        )
    } else if unwatched.is_empty() {
        Check::pass(DEAD_LETTER_WATCHED, format!("Revenant watches {}", list(&dlqs)))
    } else {
        Check::new(
            DEAD_LETTER_WATCHED,
            strict(level),
            format!("unwatched DLQ {}: dead letters pile up where nobody looks", list(&unwatched)),
            "start ingesting it (the button on this page, or `revenant dlq add QUEUE`), or set a depth alert on it",
        )
    });
    out
}

fn redelivery(t: &Topology, q: &Queue, level: Level, roles: &[Role]) -> Check {
    let limit = dl::delivery_limit(q).filter(|_| q.kind == "quorum");
    if let Some(n) = limit.filter(|&n| n > 0) {
        return Check::pass(
            BOUNDED_REDELIVERY,
            format!("delivery limit {n}: a poison message dead-letters after {n} redeliveries"),
        );
    }
    let retry_queue = dl::targets(t, q).and_then(|x| {
        x.queues.into_iter().find(|n| t.queues.iter().zip(roles).any(|(r, role)| &r.name == n && *role == Role::Retry))
    });
    if let Some(r) = retry_queue {
        return Check::pass(BOUNDED_REDELIVERY, format!("failed messages wait in retry queue `{r}` and come back"));
    }
    let unbounded =
        limit.map(|n| format!("x-delivery-limit {n} is unbounded: a message requeued on every failure loops forever"));
    let why = if let Some(u) = unbounded.as_deref() {
        u
    } else if q.kind == "quorum" {
        "quorum queue without x-delivery-limit: a message requeued on every failure loops forever"
    } else {
        "classic queues have no delivery limit: a message requeued on every failure loops forever"
    };
    Check::new(
        BOUNDED_REDELIVERY,
        strict(level),
        why,
        "use a quorum queue with x-delivery-limit, or a retry queue with a TTL that dead-letters back",
    )
}

/// One report per queue in the snapshot, in the broker's order.
pub fn queue_reports(t: &Topology, contracts: &[Contract], watched: &HashSet<String>) -> Vec<QueueReport> {
    let roles = dl::roles(t);
    t.queues
        .iter()
        .zip(&roles)
        .map(|(q, &role)| {
            // A queue Revenant drains is a dead-letter queue even when the broker shows
            // nothing dead-lettering into it (e.g. an error queue filled by publishers).
            let role = if role == Role::Work && watched.contains(&q.name) { Role::DeadLetter } else { role };
            let governing = contract::governing(contracts, &t.vhost, &q.name);
            let level = governing.map_or(Level::Standard, |c| c.level);
            let mut checks = Vec::new();
            let cares = level != Level::Disposable;
            let stream = q.kind == "stream";
            if cares {
                checks.push(durability(t, q));
            }
            if level == Level::Critical {
                checks.push(quorum(q));
            }
            if cares {
                checks.extend(replicas(t, q, level));
            }
            if cares && role == Role::Work && !stream {
                checks.extend(dead_letter_checks(t, q, level, &roles, watched));
                checks.push(redelivery(t, q, level, &roles));
            }
            if role == Role::Work {
                checks.push(consumers(q, level));
            }
            if cares {
                checks.push(unacked(q, level));
            }
            if level == Level::Critical {
                checks.extend(manual_ack(t, q));
            }
            QueueReport {
                vhost: t.vhost.clone(),
                queue: q.name.clone(),
                level,
                contract: governing.map(|c| c.pattern.clone()),
                role,
                checks,
                consumers: q.consumers,
                messages_ready: q.messages_ready,
                messages_unacknowledged: q.messages_unacknowledged,
                rates: q.rates,
                kind: q.kind.clone(),
                placement: q.placement.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
