//! A selection → the SQL that resolves it to (dead letter, exchange, routing key) rows.
//!
//! Policy: the set is resolved inside PostgreSQL (`INSERT … SELECT` at creation, aggregates
//! for a preview), never loaded into memory, so a plan of 100 000 messages costs the server
//! what a plan of ten does. Only dead letters `awaiting` triage are taken: one being replayed
//! or already replayed or archived must be moved back by an operator first.
//!
//! The filter predicate mirrors `dead_letter::store::list` (which builds its SQL inline); the
//! test `a_filter_selects_exactly_what_the_list_shows` keeps the two in step.

use sqlx::{Postgres, QueryBuilder};

use super::{
    ReplayError,
    model::{Order, Selection, Target},
};
use crate::dead_letter::store::{ListFilter, Status};

/// Most ids one plan may name by hand; beyond that, select by group or filter.
pub const MAX_IDS: usize = 10_000;

/// Refuses selections that cannot mean what the operator wants.
pub fn validate(sel: &Selection, target: &Target) -> Result<(), ReplayError> {
    if let Selection::Ids(ids) = sel {
        if ids.is_empty() {
            return Err(ReplayError::Invalid("select at least one message".into()));
        }
        if ids.len() > MAX_IDS {
            return Err(ReplayError::Invalid(format!(
                "{} messages picked by hand; at most {MAX_IDS} (select by group or filter instead)",
                ids.len()
            )));
        }
    }
    let short = |what: &str, v: &str| {
        if v.len() > 255 {
            Err(ReplayError::Invalid(format!("{what} is {} bytes; AMQP allows 255", v.len())))
        } else {
            Ok(())
        }
    };
    match target {
        Target::Origin | Target::Original => Ok(()),
        Target::Exchange { exchange, routing_key } => {
            if exchange.is_empty() {
                return Err(ReplayError::Invalid("pick an exchange, or choose the queue target".into()));
            }
            short("exchange", exchange)?;
            short("routing key", routing_key)
        }
        Target::Queue { queue } => {
            if queue.is_empty() {
                return Err(ReplayError::Invalid("pick a queue".into()));
            }
            short("queue", queue)
        }
    }
}

/// Pushes `SELECT dead_letter_id, exchange, routing_key, origin_queue, failed_at, replayed_before FROM …`
/// for the awaiting dead letters of `sel`. Rows without a destination (original target, no
/// `x-death`) come out with a NULL exchange; callers count or exclude them.
pub(crate) fn push_resolved(q: &mut QueryBuilder<Postgres>, sel: &Selection, target: &Target, order: &Order) {
    q.push("SELECT d.id AS dead_letter_id, ");
    // What a per-key ordered plan keeps order within: the key it was first published with,
    // or a header's value (typed JSON: a string or number in `v`, bytes as `hex`).
    match order {
        Order::RoutingKey => {
            q.push("coalesce(d.original_routing_keys[1], d.routing_key) AS order_key, ");
        }
        Order::Header(h) => {
            q.push("coalesce(d.headers -> ").push_bind(h.clone()).push(" ->> 'v', d.headers -> ");
            q.push_bind(h.clone()).push(" ->> 'hex') AS order_key, ");
        }
        Order::None | Order::Plan => {
            q.push("NULL::text AS order_key, ");
        }
    }
    match target.fixed() {
        Some((exchange, routing_key)) => {
            q.push_bind(exchange.to_string()).push("::text AS exchange, ");
            q.push_bind(routing_key.to_string()).push("::text AS routing_key, ");
        }
        // The queue it died in, through the default exchange (the key names the queue).
        None if *target == Target::Origin => {
            q.push("CASE WHEN d.original_queue IS NULL THEN NULL ELSE '' END AS exchange, ");
            q.push("d.original_queue AS routing_key, ");
        }
        // A message published to several keys (CC/BCC) is replayed to the first one.
        None => {
            q.push("CASE WHEN d.original_routing_keys[1] IS NULL THEN NULL ELSE d.original_exchange END AS exchange, ");
            q.push("d.original_routing_keys[1] AS routing_key, ");
        }
    }
    q.push(
        "d.original_queue AS origin_queue, d.msg_type, d.body_shape, coalesce(d.first_death_at, d.ingested_at) AS failed_at,
         (d.replay_of IS NOT NULL OR EXISTS (SELECT 1 FROM replay_items ri
            WHERE ri.dead_letter_id = d.id AND ri.status = 'sent')) AS replayed_before
         FROM dead_letters d WHERE d.status = 'awaiting'",
    );
    match sel {
        Selection::Ids(ids) => {
            q.push(" AND d.id = ANY(").push_bind(ids.clone()).push(")");
        }
        Selection::Group(g) => {
            q.push(" AND d.group_id = ").push_bind(*g);
        }
        Selection::Filter(f) => push_filter(q, f),
    }
}

/// The console list's own filter (`store::push_conditions`), so a plan takes exactly what the
/// list showed; only awaiting rows are ever taken, so a filter on another status selects nothing.
fn push_filter(q: &mut QueryBuilder<Postgres>, f: &ListFilter) {
    if f.status.is_some_and(|s| s != Status::Awaiting) {
        q.push(" AND false");
        return;
    }
    crate::dead_letter::store::push_conditions(q, &ListFilter { status: None, ..f.clone() });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_or_oversized_hand_pick_is_refused() {
        assert!(validate(&Selection::Ids(vec![]), &Target::Original).is_err());
        assert!(validate(&Selection::Ids(vec![1; MAX_IDS + 1]), &Target::Original).is_err());
        assert!(validate(&Selection::Ids(vec![1]), &Target::Original).is_ok());
    }

    #[test]
    fn a_target_must_name_something_amqp_can_carry() {
        let sel = Selection::Group(1);
        assert!(validate(&sel, &Target::Queue { queue: String::new() }).is_err());
        assert!(validate(&sel, &Target::Exchange { exchange: String::new(), routing_key: "k".into() }).is_err());
        assert!(validate(&sel, &Target::Exchange { exchange: "x".into(), routing_key: "k".repeat(256) }).is_err());
        assert!(validate(&sel, &Target::Queue { queue: "q".into() }).is_ok());
    }

    #[test]
    fn a_filter_on_another_status_selects_nothing() {
        let mut q = QueryBuilder::<Postgres>::new("");
        let f = ListFilter { status: Some(Status::Archived), ..Default::default() };
        push_resolved(&mut q, &Selection::Filter(f), &Target::Original, &Order::None);
        assert!(q.sql().as_str().contains("AND false"));
    }
}
