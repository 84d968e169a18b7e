//! Where a queue's dead letters go, and what that makes each queue: a work queue, a DLQ, or
//! a retry queue (TTL + dead-letter back to the work queue).
//!
//! Policy: a queue argument overrides the policy for the same setting, as in RabbitMQ. With no
//! dead-letter routing key, messages keep the key they were published with, which only the
//! publisher knows; the keys of the queue's own bindings stand in for them (the queue's name
//! when it is only reachable through the default exchange).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    fetch::{Queue, Topology},
    routing::{Route, route},
};
pub use types::QueueRole as Role;

/// A queue setting from its arguments (`x-…`) or, failing that, its effective policy.
pub fn setting<'a>(q: &'a Queue, argument: &str, policy_key: &str) -> Option<(&'a Value, &'static str)> {
    q.arguments.get(argument).map(|v| (v, "argument")).or_else(|| q.policy.get(policy_key).map(|v| (v, "policy")))
}

pub fn dead_letter_exchange(q: &Queue) -> Option<(&str, &'static str)> {
    setting(q, "x-dead-letter-exchange", "dead-letter-exchange").and_then(|(v, src)| v.as_str().map(|s| (s, src)))
}

pub fn delivery_limit(q: &Queue) -> Option<i64> {
    setting(q, "x-delivery-limit", "delivery-limit").and_then(|(v, _)| v.as_i64())
}

pub fn message_ttl(q: &Queue) -> Option<i64> {
    setting(q, "x-message-ttl", "message-ttl").and_then(|(v, _)| v.as_i64())
}

/// Where a queue's dead letters end up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets {
    pub exchange: String,
    pub exchange_exists: bool,
    /// Queues that receive at least one of the candidate keys.
    pub queues: BTreeSet<String>,
    /// Candidate keys that no binding takes: those dead letters are dropped.
    pub dropped_keys: Vec<String>,
    /// Set when routing depends on something the snapshot cannot say.
    pub unknown: Option<String>,
}

/// The routing keys dead letters from `q` carry (see the module policy).
pub fn dead_letter_keys(t: &Topology, q: &Queue) -> Vec<String> {
    if let Some(k) = setting(q, "x-dead-letter-routing-key", "dead-letter-routing-key").and_then(|(v, _)| v.as_str()) {
        return vec![k.to_string()];
    }
    let bound: BTreeSet<String> = t
        .bindings
        .iter()
        .filter(|b| b.destination_type == "queue" && b.destination == q.name && !b.source.is_empty())
        .map(|b| b.routing_key.clone())
        .collect();
    if bound.is_empty() { vec![q.name.clone()] } else { bound.into_iter().collect() }
}

/// `None` when the queue has no dead-letter exchange.
pub fn targets(t: &Topology, q: &Queue) -> Option<Targets> {
    let (exchange, _) = dead_letter_exchange(q)?;
    // The default exchange ("") is a valid DLX: the key then names the DLQ.
    let exchange_exists = exchange.is_empty() || t.exchanges.iter().any(|x| x.name == exchange);
    let mut out = Targets {
        exchange: exchange.to_string(),
        exchange_exists,
        queues: BTreeSet::new(),
        dropped_keys: Vec::new(),
        unknown: None,
    };
    if !exchange_exists {
        return Some(out);
    }
    for key in dead_letter_keys(t, q) {
        match route(t, exchange, &key) {
            Route::Queues(qs) => out.queues.extend(qs),
            Route::Nowhere => out.dropped_keys.push(key),
            Route::Unknown(r) => out.unknown = Some(r),
        }
    }
    Some(out)
}

/// Each queue's role, in the snapshot's queue order.
pub fn roles(t: &Topology) -> Vec<Role> {
    let all: Vec<BTreeSet<String>> =
        t.queues.iter().map(|q| targets(t, q).map(|x| x.queues).unwrap_or_default()).collect();
    let index = |name: &str| t.queues.iter().position(|q| q.name == name);
    // A retry queue has a TTL, no consumers (they would take messages before the TTL), and
    // dead-letters to a queue that dead-letters back to it.
    let is_retry = |i: usize| {
        message_ttl(&t.queues[i]).is_some()
            && t.queues[i].consumers.unwrap_or(0) == 0
            && all[i].iter().filter_map(|n| index(n)).any(|w| w != i && all[w].contains(&t.queues[i].name))
    };
    let retry: Vec<bool> = (0..t.queues.len()).map(is_retry).collect();
    t.queues
        .iter()
        .enumerate()
        .map(|(i, q)| {
            if retry[i] {
                Role::Retry
            } else if (0..t.queues.len()).any(|j| j != i && !retry[j] && all[j].contains(&q.name)) {
                Role::DeadLetter
            } else {
                Role::Work
            }
        })
        .collect()
}
