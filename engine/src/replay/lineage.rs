//! A message's story: dead-lettered, replayed by whom and when, died again, replayed again…
//!
//! Policy: a replayed message carries `x-revenant-replay-id` (`"<plan>:<dead letter>"`); when
//! it dies again, ingest links the new dead letter to the one that was replayed
//! (`dead_letters.replay_of`). The story of any dead letter is the whole chain it belongs to,
//! walked both ways (up to the first death, down to every later one), with the replay items
//! of each link, as one time-ordered list.

use chrono::{DateTime, Utc};
use lapin::types::FieldTable;
use serde::Serialize;
use sqlx::PgPool;

use super::{REPLAY_ID_HEADER, ReplayError};
use crate::dead_letter::headers;

/// Links followed in either direction; a longer chain is cut (and the cut is visible).
pub const MAX_CHAIN: i64 = 500;

/// `(plan id, dead letter id)` from a replayed message's headers.
pub fn replay_origin(h: Option<&FieldTable>) -> Option<(i64, i64)> {
    let text = headers::as_text(h?.inner().get(REPLAY_ID_HEADER)?)?;
    let (plan, dl) = text.split_once(':')?;
    Some((plan.trim().parse().ok()?, dl.trim().parse().ok()?))
}

/// The header value naming a replay item.
pub fn replay_id(plan_id: i64, dead_letter_id: i64) -> String {
    format!("{plan_id}:{dead_letter_id}")
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// Stored from a DLQ; `replay_of` set when it is a replay that died again.
    DeadLettered {
        queue: String,
        reason: String,
        error_type: Option<String>,
        error_message: Option<String>,
        death_count: i64,
        replay_of: Option<i64>,
    },
    /// Put in a replay plan (frozen) by an operator.
    ReplayPlanned {
        plan_id: i64,
        by: String,
        exchange: String,
        routing_key: String,
    },
    /// Confirmed by the broker.
    Replayed {
        plan_id: i64,
        by: String,
        exchange: String,
        routing_key: String,
    },
    /// Returned, nacked or refused; the message awaits triage again.
    ReplayFailed {
        plan_id: i64,
        by: String,
        error: Option<String>,
    },
    ReplayCancelled {
        plan_id: i64,
        by: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineEvent {
    pub at: DateTime<Utc>,
    pub dead_letter_id: i64,
    #[serde(flatten)]
    pub event: Event,
}

/// The story of the chain `dead_letter_id` belongs to, oldest first.
pub async fn story(pool: &PgPool, dead_letter_id: i64) -> Result<Vec<TimelineEvent>, ReplayError> {
    let letters = sqlx::query!(
        "WITH RECURSIVE up AS (
            SELECT id, replay_of, 0 AS depth FROM dead_letters WHERE id = $1
            UNION ALL
            SELECT d.id, d.replay_of, up.depth + 1 FROM dead_letters d JOIN up ON d.id = up.replay_of
            WHERE up.depth < $2::bigint),
         root AS (SELECT id FROM up ORDER BY depth DESC LIMIT 1),
         down AS (
            SELECT id, 0 AS depth FROM root
            UNION ALL
            SELECT d.id, down.depth + 1 FROM dead_letters d JOIN down ON d.replay_of = down.id
            WHERE down.depth < $2::bigint)
         SELECT d.id, d.ingested_at, d.queue, d.reason, d.error_type, d.error_message, d.death_count, d.replay_of
         FROM dead_letters d WHERE d.id IN (SELECT id FROM down UNION SELECT id FROM up)",
        dead_letter_id,
        MAX_CHAIN
    )
    .fetch_all(pool)
    .await?;
    if letters.is_empty() {
        return Err(ReplayError::DeadLetterNotFound(dead_letter_id));
    }
    let ids: Vec<i64> = letters.iter().map(|l| l.id).collect();
    let items = sqlx::query!(
        "SELECT i.dead_letter_id, i.plan_id, i.exchange, i.routing_key, i.status, i.error, i.sent_at, i.settled_at,
                p.created_by, p.created_at
         FROM replay_items i JOIN replay_plans p ON p.id = i.plan_id WHERE i.dead_letter_id = ANY($1)",
        &ids
    )
    .fetch_all(pool)
    .await?;
    let mut events = Vec::with_capacity(letters.len() + items.len() * 2);
    for l in letters {
        let event = Event::DeadLettered {
            queue: l.queue,
            reason: l.reason,
            error_type: l.error_type,
            error_message: l.error_message,
            death_count: l.death_count,
            replay_of: l.replay_of,
        };
        events.push(TimelineEvent { at: l.ingested_at, dead_letter_id: l.id, event });
    }
    for i in items {
        let (id, plan_id, by) = (i.dead_letter_id, i.plan_id, i.created_by);
        let planned = Event::ReplayPlanned {
            plan_id,
            by: by.clone(),
            exchange: i.exchange.clone(),
            routing_key: i.routing_key.clone(),
        };
        events.push(TimelineEvent { at: i.created_at, dead_letter_id: id, event: planned });
        let outcome = match i.status.as_str() {
            "sent" => i
                .sent_at
                .map(|at| (at, Event::Replayed { plan_id, by, exchange: i.exchange, routing_key: i.routing_key })),
            "failed" => i.settled_at.map(|at| (at, Event::ReplayFailed { plan_id, by, error: i.error })),
            "cancelled" => i.settled_at.map(|at| (at, Event::ReplayCancelled { plan_id, by })),
            _ => None,
        };
        if let Some((at, event)) = outcome {
            events.push(TimelineEvent { at, dead_letter_id: id, event });
        }
    }
    // Ties (same instant) keep the causal order: dead-lettered, planned, then the outcome.
    let rank = |e: &Event| match e {
        Event::DeadLettered { .. } => 0,
        Event::ReplayPlanned { .. } => 1,
        _ => 2,
    };
    events.sort_by_key(|e| (e.at, e.dead_letter_id, rank(&e.event)));
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::{AMQPValue, ShortString};

    #[test]
    fn the_replay_id_header_round_trips_in_any_string_type() {
        let mut h = FieldTable::default();
        h.insert(REPLAY_ID_HEADER.into(), AMQPValue::LongString(replay_id(12, 345).into()));
        assert_eq!(replay_origin(Some(&h)), Some((12, 345)));
        h.insert(REPLAY_ID_HEADER.into(), AMQPValue::ShortString(ShortString::from("7:8")));
        assert_eq!(replay_origin(Some(&h)), Some((7, 8)));
    }

    #[test]
    fn a_missing_or_malformed_replay_id_links_nothing() {
        assert_eq!(replay_origin(None), None);
        let mut h = FieldTable::default();
        assert_eq!(replay_origin(Some(&h)), None);
        h.insert(REPLAY_ID_HEADER.into(), AMQPValue::LongString("12".into()));
        assert_eq!(replay_origin(Some(&h)), None);
        h.insert(REPLAY_ID_HEADER.into(), AMQPValue::LongInt(12));
        assert_eq!(replay_origin(Some(&h)), None);
    }
}
