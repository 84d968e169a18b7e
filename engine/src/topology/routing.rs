//! Where would the broker route a message with this routing key? Answered from a snapshot.
//!
//! Policy: follow RabbitMQ's own rules for the built-in types (default, direct, fanout, topic),
//! exchange-to-exchange bindings and alternate exchanges; never guess for the others (headers,
//! plugins): they answer `Unknown`, so a check built on this says "cannot tell", not "fine".

use std::collections::{BTreeSet, HashSet};

use super::fetch::{Exchange, Topology};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// At least one queue receives it.
    Queues(BTreeSet<String>),
    /// The broker drops it (or returns it to a `mandatory` publisher).
    Nowhere,
    /// Routing depends on something the snapshot cannot say; the reason is for people.
    Unknown(String),
}

/// The exchange's alternate exchange, from its arguments or its policy.
pub fn alternate_exchange(x: &Exchange) -> Option<&str> {
    x.arguments
        .get("alternate-exchange")
        .or_else(|| x.policy_definition.get("alternate-exchange"))
        .and_then(|v| v.as_str())
}

/// Whether a topic binding key (`*` one word, `#` zero or more) matches a routing key.
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    fn go(p: &[&str], k: &[&str]) -> bool {
        match p.split_first() {
            None => k.is_empty(),
            Some((&"#", rest)) => (0..=k.len()).any(|i| go(rest, &k[i..])),
            Some((&w, rest)) => k.split_first().is_some_and(|(&kw, krest)| (w == "*" || w == kw) && go(rest, krest)),
        }
    }
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = if key.is_empty() { Vec::new() } else { key.split('.').collect() };
    // An empty binding key is one empty word, which matches only the empty routing key.
    if pattern.is_empty() {
        return key.is_empty();
    }
    go(&p, &k)
}

/// Where `exchange` sends a message published with `key`.
pub fn route(t: &Topology, exchange: &str, key: &str) -> Route {
    let mut visited = HashSet::new();
    route_from(t, exchange, key, &mut visited)
}

fn route_from<'a>(t: &'a Topology, exchange: &'a str, key: &str, visited: &mut HashSet<&'a str>) -> Route {
    // Exchange-to-exchange bindings can form cycles; the broker delivers once, so do we.
    if !visited.insert(exchange) {
        return Route::Nowhere;
    }
    if exchange.is_empty() {
        return if t.queues.iter().any(|q| q.name == key) {
            Route::Queues(BTreeSet::from([key.to_string()]))
        } else {
            Route::Nowhere
        };
    }
    let Some(x) = t.exchanges.iter().find(|x| x.name == exchange) else {
        return Route::Nowhere;
    };
    let matches: Box<dyn Fn(&str) -> bool> = match x.kind.as_str() {
        "direct" => Box::new(|b: &str| b == key),
        "fanout" => Box::new(|_: &str| true),
        "topic" => Box::new(|b: &str| topic_matches(b, key)),
        "headers" => {
            return Route::Unknown(format!(
                "`{exchange}` is a headers exchange: routing depends on each message's headers"
            ));
        }
        other => {
            return Route::Unknown(format!("`{exchange}` is of type `{other}`, whose routing Revenant cannot predict"));
        }
    };
    let mut queues = BTreeSet::new();
    let mut unknown = None;
    for b in t.bindings.iter().filter(|b| b.source == exchange && matches(&b.routing_key)) {
        if b.destination_type == "queue" {
            queues.insert(b.destination.clone());
        } else {
            match route_from(t, &b.destination, key, visited) {
                Route::Queues(q) => queues.extend(q),
                Route::Unknown(r) => unknown = Some(r),
                Route::Nowhere => {}
            }
        }
    }
    if !queues.is_empty() {
        return Route::Queues(queues);
    }
    // The alternate exchange gets what no binding took.
    if let Some(ae) = alternate_exchange(x) {
        match route_from(t, ae, key, visited) {
            Route::Nowhere => {}
            r => return r,
        }
    }
    unknown.map_or(Route::Nowhere, Route::Unknown)
}

/// Whether every message published to the exchange reaches some binding, whatever its key:
/// `None` when the type does not let us tell.
pub fn covers_every_key(t: &Topology, x: &Exchange) -> Option<bool> {
    let mut bindings = t.bindings.iter().filter(|b| b.source == x.name);
    match x.kind.as_str() {
        "fanout" => Some(bindings.next().is_some()),
        "topic" => Some(bindings.any(|b| b.routing_key == "#")),
        // A direct exchange only routes the keys it has bindings for.
        "direct" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::fetch::{Binding, Queue};

    fn x(name: &str, kind: &str) -> Exchange {
        Exchange { name: name.into(), kind: kind.into(), durable: true, ..Exchange::default() }
    }

    fn bind(source: &str, dest: &str, key: &str) -> Binding {
        Binding {
            source: source.into(),
            destination: dest.into(),
            destination_type: "queue".into(),
            routing_key: key.into(),
            ..Binding::default()
        }
    }

    fn q(name: &str) -> Queue {
        Queue { name: name.into(), durable: true, ..Queue::default() }
    }

    fn queues(names: &[&str]) -> Route {
        Route::Queues(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn topic_star_matches_exactly_one_word_and_hash_any_number() {
        assert!(topic_matches("orders.*", "orders.created"));
        assert!(!topic_matches("orders.*", "orders.eu.created"));
        assert!(!topic_matches("orders.*", "orders"));
        assert!(topic_matches("orders.#", "orders"));
        assert!(topic_matches("orders.#", "orders.eu.created"));
        assert!(topic_matches("#", ""));
        assert!(topic_matches("#.dead", "a.b.dead"));
        assert!(!topic_matches("#.dead", "a.b.alive"));
        assert!(topic_matches("*.*.x", "a.b.x"));
        assert!(!topic_matches("", "a"));
    }

    #[test]
    fn a_direct_exchange_routes_only_the_exact_key() {
        let t = Topology {
            exchanges: vec![x("dlx", "direct")],
            bindings: vec![bind("dlx", "dlq", "orders")],
            ..Topology::default()
        };
        assert_eq!(route(&t, "dlx", "orders"), queues(&["dlq"]));
        assert_eq!(route(&t, "dlx", "payments"), Route::Nowhere);
    }

    #[test]
    fn a_fanout_exchange_routes_any_key_when_bound_and_nothing_when_not() {
        let bound = Topology {
            exchanges: vec![x("f", "fanout")],
            bindings: vec![bind("f", "a", "ignored")],
            ..Topology::default()
        };
        assert_eq!(route(&bound, "f", "anything"), queues(&["a"]));
        let unbound = Topology { exchanges: vec![x("f", "fanout")], ..Topology::default() };
        assert_eq!(route(&unbound, "f", "anything"), Route::Nowhere);
    }

    #[test]
    fn the_default_exchange_routes_to_the_queue_named_by_the_key() {
        let t = Topology { queues: vec![q("work")], ..Topology::default() };
        assert_eq!(route(&t, "", "work"), queues(&["work"]));
        assert_eq!(route(&t, "", "missing"), Route::Nowhere);
    }

    #[test]
    fn exchange_to_exchange_bindings_and_alternate_exchanges_are_followed() {
        let mut front = x("front", "direct");
        front.arguments.insert("alternate-exchange".into(), "ae".into());
        let mut e2e = bind("front", "topic", "k.1");
        e2e.destination_type = "exchange".into();
        let t = Topology {
            exchanges: vec![front, x("topic", "topic"), x("ae", "fanout")],
            bindings: vec![e2e, bind("topic", "t", "k.*"), bind("ae", "unrouted", "")],
            ..Topology::default()
        };
        assert_eq!(route(&t, "front", "k.1"), queues(&["t"]));
        assert_eq!(route(&t, "front", "other"), queues(&["unrouted"]));
    }

    #[test]
    fn a_cycle_of_exchange_bindings_terminates() {
        let mut ab = bind("a", "b", "k");
        ab.destination_type = "exchange".into();
        let mut ba = bind("b", "a", "k");
        ba.destination_type = "exchange".into();
        let t = Topology {
            exchanges: vec![x("a", "direct"), x("b", "direct")],
            bindings: vec![ab, ba],
            ..Topology::default()
        };
        assert_eq!(route(&t, "a", "k"), Route::Nowhere);
    }

    #[test]
    fn headers_exchanges_are_unknown_rather_than_guessed() {
        let t =
            Topology { exchanges: vec![x("h", "headers")], bindings: vec![bind("h", "q", "")], ..Topology::default() };
        assert!(matches!(route(&t, "h", "k"), Route::Unknown(_)));
        assert_eq!(covers_every_key(&t, &t.exchanges[0]), None);
    }

    #[test]
    fn only_a_bound_fanout_or_a_hash_topic_binding_covers_every_key() {
        let t = Topology {
            exchanges: vec![x("f", "fanout"), x("t", "topic"), x("d", "direct"), x("t2", "topic")],
            bindings: vec![bind("f", "q", ""), bind("t", "q", "#"), bind("d", "q", "k"), bind("t2", "q", "a.#")],
            ..Topology::default()
        };
        let cover: Vec<_> = t.exchanges.iter().map(|e| covers_every_key(&t, e)).collect();
        assert_eq!(cover, vec![Some(true), Some(true), Some(false), Some(false)]);
    }
}
