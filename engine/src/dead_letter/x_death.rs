//! RabbitMQ's `x-death` header: how, where and how often a message died.
//!
//! Policy: headers come from anyone who can publish, so nothing here trusts their shape.
//! A missing or malformed `x-death` gives `None`, a malformed entry is skipped, a missing
//! field takes its default; nothing panics. Integers and strings are read whatever AMQP type
//! carries them, since clients and broker versions differ.

use chrono::{DateTime, Utc};
use lapin::types::{AMQPValue, FieldTable};

use super::headers::{as_i64, as_text};

/// One `x-death` entry: RabbitMQ keeps one per (queue, reason), most recent first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Death {
    pub count: i64,
    pub reason: String,
    pub queue: String,
    pub exchange: String,
    pub routing_keys: Vec<String>,
    pub time: Option<DateTime<Utc>>,
    pub original_expiration: Option<String>,
}

/// Everything the dead-letter headers say.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Deaths {
    /// Most recent first, as RabbitMQ orders them.
    pub entries: Vec<Death>,
    pub first_death_reason: Option<String>,
    pub first_death_queue: Option<String>,
    pub first_death_exchange: Option<String>,
}

impl Deaths {
    /// The death that sent the message to the queue it was read from.
    pub fn latest(&self) -> Option<&Death> {
        self.entries.first()
    }

    /// Deaths over all entries: a message that cycled through a retry queue counts each one.
    pub fn total_count(&self) -> i64 {
        self.entries.iter().map(|d| d.count.max(0)).fold(0i64, i64::saturating_add)
    }

    pub fn first_death_at(&self) -> Option<DateTime<Utc>> {
        self.entries.iter().filter_map(|d| d.time).min()
    }

    /// The console's reason: one of rejected/expired/maxlen/delivery_limit, else unknown.
    pub fn reason(&self) -> &'static str {
        let raw = self.latest().map(|d| d.reason.as_str()).or(self.first_death_reason.as_deref());
        normalise_reason(raw.unwrap_or(""))
    }
}

pub fn normalise_reason(raw: &str) -> &'static str {
    match raw {
        "rejected" => "rejected",
        "expired" => "expired",
        "maxlen" => "maxlen",
        "delivery_limit" => "delivery_limit",
        _ => "unknown",
    }
}

/// Reads `x-death` and `x-first-death-*`; `None` when the message never died (or says
/// nothing usable about it).
pub fn parse(headers: Option<&FieldTable>) -> Option<Deaths> {
    let headers = headers?.inner();
    let text = |k: &str| headers.get(k).and_then(as_text);
    let entries: Vec<Death> = match headers.get("x-death") {
        Some(AMQPValue::FieldArray(a)) => a.as_slice().iter().filter_map(entry).collect(),
        _ => Vec::new(),
    };
    let deaths = Deaths {
        entries,
        first_death_reason: text("x-first-death-reason"),
        first_death_queue: text("x-first-death-queue"),
        first_death_exchange: text("x-first-death-exchange"),
    };
    if deaths.entries.is_empty() && deaths.first_death_reason.is_none() && deaths.first_death_queue.is_none() {
        return None;
    }
    Some(deaths)
}

fn entry(v: &AMQPValue) -> Option<Death> {
    let AMQPValue::FieldTable(t) = v else {
        return None;
    };
    let t = t.inner();
    let text = |k: &str| t.get(k).and_then(as_text);
    let routing_keys = match t.get("routing-keys") {
        Some(AMQPValue::FieldArray(a)) => a.as_slice().iter().filter_map(as_text).collect(),
        Some(other) => as_text(other).into_iter().collect(),
        None => Vec::new(),
    };
    let time = t.get("time").and_then(as_i64).and_then(|secs| DateTime::<Utc>::from_timestamp(secs, 0));
    Some(Death {
        count: t.get("count").and_then(as_i64).unwrap_or(1),
        reason: text("reason").unwrap_or_default(),
        queue: text("queue").unwrap_or_default(),
        exchange: text("exchange").unwrap_or_default(),
        routing_keys,
        time,
        original_expiration: text("original-expiration"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::{FieldArray, LongString};

    fn death(reason: &str, queue: &str, count: i64, time: u64) -> AMQPValue {
        let mut t = FieldTable::default();
        t.insert("count".into(), AMQPValue::LongLongInt(count));
        t.insert("reason".into(), AMQPValue::LongString(reason.into()));
        t.insert("queue".into(), AMQPValue::LongString(queue.into()));
        t.insert("exchange".into(), AMQPValue::LongString("orders".into()));
        t.insert(
            "routing-keys".into(),
            AMQPValue::FieldArray(vec![AMQPValue::LongString(LongString::from("order.created"))].into()),
        );
        t.insert("time".into(), AMQPValue::Timestamp(time));
        AMQPValue::FieldTable(t)
    }

    fn headers(entries: Vec<AMQPValue>) -> FieldTable {
        let mut h = FieldTable::default();
        h.insert("x-death".into(), AMQPValue::FieldArray(FieldArray::from(entries)));
        h.insert("x-first-death-reason".into(), AMQPValue::LongString("expired".into()));
        h.insert("x-first-death-queue".into(), AMQPValue::LongString("orders.retry".into()));
        h
    }

    #[test]
    fn a_rejection_is_read_with_its_queue_exchange_keys_and_time() {
        let h = headers(vec![death("rejected", "orders.work", 2, 1_700_000_000)]);
        let d = parse(Some(&h)).unwrap();
        assert_eq!(d.reason(), "rejected");
        let latest = d.latest().unwrap();
        assert_eq!(latest.queue, "orders.work");
        assert_eq!(latest.exchange, "orders");
        assert_eq!(latest.routing_keys, vec!["order.created".to_string()]);
        assert_eq!(latest.count, 2);
        assert_eq!(d.first_death_at().unwrap().timestamp(), 1_700_000_000);
        assert_eq!(d.first_death_queue.as_deref(), Some("orders.retry"));
    }

    #[test]
    fn the_latest_entry_gives_the_reason_and_counts_add_up() {
        let h = headers(vec![death("maxlen", "b", 1, 20), death("expired", "a", 3, 10)]);
        let d = parse(Some(&h)).unwrap();
        assert_eq!(d.reason(), "maxlen");
        assert_eq!(d.total_count(), 4);
        assert_eq!(d.first_death_at().unwrap().timestamp(), 10);
    }

    #[test]
    fn no_headers_or_no_x_death_means_none() {
        assert_eq!(parse(None), None);
        assert_eq!(parse(Some(&FieldTable::default())), None);
        let mut h = FieldTable::default();
        h.insert("x-death".into(), AMQPValue::LongString("garbage".into()));
        assert_eq!(parse(Some(&h)), None);
    }

    #[test]
    fn malformed_entries_are_skipped_and_missing_fields_default() {
        let mut bare = FieldTable::default();
        bare.insert("reason".into(), AMQPValue::ShortString("delivery_limit".into()));
        bare.insert("count".into(), AMQPValue::Boolean(true));
        bare.insert("time".into(), AMQPValue::LongString("yesterday".into()));
        let mut h = FieldTable::default();
        h.insert(
            "x-death".into(),
            AMQPValue::FieldArray(vec![AMQPValue::LongInt(7), AMQPValue::FieldTable(bare)].into()),
        );
        let d = parse(Some(&h)).unwrap();
        assert_eq!(d.entries.len(), 1);
        assert_eq!(d.reason(), "delivery_limit");
        assert_eq!(d.latest().unwrap().count, 1);
        assert_eq!(d.latest().unwrap().time, None);
        assert_eq!(d.latest().unwrap().queue, "");
    }

    #[test]
    fn an_unheard_of_reason_is_unknown() {
        let h = headers(vec![death("cosmic-ray", "q", 1, 1)]);
        assert_eq!(parse(Some(&h)).unwrap().reason(), "unknown");
    }
}
