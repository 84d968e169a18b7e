//! A delivery as read from a DLQ, exactly, and what the console derives from it.
//!
//! Policy: nothing of the message is dropped or reinterpreted on the way in: every property,
//! the header table (typed), and the body bytes. The natural key hashes all of that with the
//! queue, so the same message read twice (a redelivery after a crash between commit and ack)
//! is recognised, while a message that died again carries a new `x-death` and is a new row.
//! Two byte-identical messages published straight to a DLQ without id, timestamp or x-death
//! collapse into one row; they are indistinguishable to an operator anyway. Where a message
//! came from is `x-death`'s account when it has one (the broker's own record), else what the
//! failure headers of a recognised framework convention name (see `conventions`).

use chrono::{DateTime, Utc};
use lapin::{BasicProperties, message::Delivery};
use sha2::{Digest, Sha256};

use super::{conventions, fingerprint, headers, kind, reason, x_death};

#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// The DLQ it was read from.
    pub queue: String,
    /// The exchange and routing key of this delivery (the dead-letter exchange's, usually).
    pub exchange: String,
    pub routing_key: String,
    pub properties: BasicProperties,
    pub body: Vec<u8>,
}

/// What the console derives from the headers, for lists, filters and groups.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    pub reason: &'static str,
    pub original_queue: Option<String>,
    pub original_exchange: Option<String>,
    pub original_routing_keys: Vec<String>,
    pub death_count: i64,
    pub first_death_at: Option<DateTime<Utc>>,
    pub error_type: Option<String>,
    pub error_message: Option<String>,
    /// The failure group's key: the failure fingerprint extended with the message's kind
    /// (see `kind`).
    pub fingerprint: String,
    /// What the body is (see `kind::body_shape`).
    pub body_shape: String,
    /// The failure-header convention the headers follow (`Convention::as_str`), whether or
    /// not the message also has `x-death`.
    pub convention: Option<&'static str>,
}

impl Received {
    pub fn from_delivery(queue: &str, d: &Delivery) -> Self {
        Self {
            queue: queue.to_string(),
            exchange: d.exchange.as_str().to_string(),
            routing_key: d.routing_key.as_str().to_string(),
            properties: d.properties.clone(),
            body: d.data.clone(),
        }
    }

    /// The typed JSON of the header table; None when the message has no headers at all
    /// (distinct from an empty table, which a replay must reproduce too).
    pub fn headers_json(&self) -> Option<serde_json::Value> {
        self.properties.headers().as_ref().map(headers::table_to_json)
    }

    pub fn derive(&self) -> Derived {
        let h = self.properties.headers().as_ref();
        let deaths = x_death::parse(h);
        let app = reason::from_headers(h);
        let recognised = conventions::recognise(h);
        let convention = recognised.as_ref().map(|(c, _)| c.as_str());
        let (reason, original_queue, original_exchange, original_routing_keys, death_count, first_death_at) =
            match &deaths {
                // Republished by the application: only its framework's headers say where from.
                None => {
                    let origin = recognised.map(|(_, o)| o).unwrap_or_default();
                    ("none", origin.queue, origin.exchange, origin.routing_key.into_iter().collect(), 0, None)
                }
                Some(d) => {
                    let latest = d.latest();
                    let nonempty = |s: &str| (!s.is_empty()).then(|| s.to_string());
                    (
                        d.reason(),
                        latest.and_then(|l| nonempty(&l.queue)).or_else(|| d.first_death_queue.clone()),
                        latest.map(|l| l.exchange.clone()).or_else(|| d.first_death_exchange.clone()),
                        latest.map(|l| l.routing_keys.clone()).unwrap_or_default(),
                        d.total_count(),
                        d.first_death_at(),
                    )
                }
            };
        let base = fingerprint::fingerprint(
            original_queue.as_deref().or(Some(self.queue.as_str())),
            reason,
            app.error_type.as_deref(),
            app.message.as_deref(),
        );
        // As stored (PostgreSQL text holds no NUL), so migration 0024's SQL gives the same key.
        let stored = |v: &str| v.replace('\0', "\u{FFFD}");
        let msg_type = self.properties.kind().as_ref().map(|t| stored(t.as_str()));
        let body_shape =
            stored(&kind::body_shape(&self.body, self.properties.content_encoding().as_ref().map(|e| e.as_str())));
        let shape =
            kind::shape_counts(app.error_type.as_deref(), app.message.as_deref()).then_some(body_shape.as_str());
        let fingerprint = kind::fingerprint(base, msg_type.as_deref(), shape);
        Derived {
            reason,
            original_queue,
            original_exchange,
            original_routing_keys,
            death_count,
            first_death_at,
            error_type: app.error_type,
            error_message: app.message,
            fingerprint,
            body_shape,
            convention,
        }
    }

    /// SHA-256 over the queue, every property (absent and empty told apart), the canonical
    /// header encoding (a BTreeMap, so key order is fixed) and the body.
    /// One key per message, whatever delivery of it this is (see [`PER_DELIVERY_HEADERS`]).
    pub fn natural_key(&self) -> String {
        let p = &self.properties;
        let mut h = Sha256::new();
        let mut field = |v: Option<&[u8]>| match v {
            Some(b) => {
                h.update([1u8]);
                h.update((b.len() as u64).to_be_bytes());
                h.update(b);
            }
            None => h.update([0u8]),
        };
        let s = |v: &Option<lapin::types::ShortString>| v.as_ref().map(|x| x.as_str().as_bytes().to_vec());
        field(Some(self.queue.as_bytes()));
        for v in [
            s(p.content_type()),
            s(p.content_encoding()),
            s(p.correlation_id()),
            s(p.reply_to()),
            s(p.expiration()),
            s(p.message_id()),
            s(p.kind()),
            s(p.user_id()),
            s(p.app_id()),
            s(p.cluster_id()),
            p.delivery_mode().map(|m| vec![m]),
            p.priority().map(|m| vec![m]),
            p.timestamp().map(|t| t.to_be_bytes().to_vec()),
        ] {
            field(v.as_deref());
        }
        // A quorum queue adds `x-delivery-count` each time it redelivers a message (after a
        // consumer's connection is lost, say): the same dead letter, so not part of its key.
        // Without it, no headers and an empty table are the same message.
        let headers = self.headers_json().and_then(|mut j| {
            let map = j.as_object_mut()?;
            for k in PER_DELIVERY_HEADERS {
                map.remove(*k);
            }
            (!map.is_empty()).then(|| j.to_string().into_bytes())
        });
        field(headers.as_deref());
        field(Some(&self.body));
        hex::encode(h.finalize())
    }
}

/// Headers the broker sets per delivery rather than per message; left out of the natural key.
pub const PER_DELIVERY_HEADERS: &[&str] = &["x-delivery-count"];

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::{AMQPValue, FieldTable, ShortString};

    fn msg(id: &str, body: &[u8]) -> Received {
        Received {
            queue: "dlq".into(),
            exchange: "dlx".into(),
            routing_key: "k".into(),
            properties: BasicProperties::default().with_message_id(ShortString::from(id)),
            body: body.to_vec(),
        }
    }

    #[test]
    fn the_natural_key_is_stable_and_sensitive_to_every_part() {
        let a = msg("1", b"x");
        assert_eq!(a.natural_key(), msg("1", b"x").natural_key());
        assert_ne!(a.natural_key(), msg("2", b"x").natural_key());
        assert_ne!(a.natural_key(), msg("1", b"y").natural_key());
        let mut other_queue = msg("1", b"x");
        other_queue.queue = "dlq2".into();
        assert_ne!(a.natural_key(), other_queue.natural_key());
        let mut with_header = msg("1", b"x");
        let mut h = FieldTable::default();
        h.insert("x-tenant".into(), AMQPValue::LongString("a".into()));
        with_header.properties = with_header.properties.with_headers(h);
        assert_ne!(a.natural_key(), with_header.natural_key());
    }

    #[test]
    fn a_quorum_queue_redelivery_has_the_key_of_its_first_delivery() {
        let mut first = msg("1", b"x");
        let mut h = FieldTable::default();
        h.insert("x-tenant".into(), AMQPValue::LongString("a".into()));
        first.properties = first.properties.with_headers(h.clone());
        let mut again = msg("1", b"x");
        h.insert("x-delivery-count".into(), AMQPValue::LongLongInt(2));
        again.properties = again.properties.with_headers(h);
        assert_eq!(first.natural_key(), again.natural_key());
        // A message published without headers comes back with only x-delivery-count.
        let mut bare_again = msg("1", b"x");
        let mut only = FieldTable::default();
        only.insert("x-delivery-count".into(), AMQPValue::LongLongInt(1));
        bare_again.properties = bare_again.properties.with_headers(only);
        assert_eq!(msg("1", b"x").natural_key(), bare_again.natural_key());
    }

    #[test]
    fn a_message_without_x_death_has_reason_none_and_falls_back_to_its_queue() {
        let d = msg("1", b"x").derive();
        assert_eq!((d.reason, d.original_queue, d.death_count), ("none", None, 0));
        assert_eq!(d.fingerprint.len(), 64);
    }

    #[test]
    fn derived_fields_come_from_x_death_and_error_headers() {
        let mut death = FieldTable::default();
        death.insert("reason".into(), AMQPValue::LongString("expired".into()));
        death.insert("queue".into(), AMQPValue::LongString("work".into()));
        death.insert("count".into(), AMQPValue::LongLongInt(3));
        let mut h = FieldTable::default();
        h.insert("x-death".into(), AMQPValue::FieldArray(vec![AMQPValue::FieldTable(death)].into()));
        h.insert("x-error".into(), AMQPValue::LongString("Timeout: after 30s".into()));
        let mut r = msg("1", b"x");
        r.properties = r.properties.with_headers(h);
        let d = r.derive();
        assert_eq!((d.reason, d.original_queue.as_deref(), d.death_count), ("expired", Some("work"), 3));
        assert_eq!((d.error_type.as_deref(), d.error_message.as_deref()), (Some("Timeout"), Some("after 30s")));
    }

    fn with_headers(pairs: &[(&str, &str)]) -> Received {
        let mut h = FieldTable::default();
        for (k, v) in pairs {
            h.insert((*k).into(), AMQPValue::LongString((*v).into()));
        }
        let mut r = msg("1", b"x");
        r.properties = r.properties.with_headers(h);
        r
    }

    #[test]
    fn a_spring_republished_message_takes_its_origin_from_the_headers() {
        let r = with_headers(&[
            ("x-original-exchange", "orders"),
            ("x-original-routingKey", "order.created"),
            ("x-original-queue", "orders.billing"),
            ("x-exception-message", "Listener threw exception"),
        ]);
        let d = r.derive();
        assert_eq!((d.reason, d.death_count, d.convention), ("none", 0, Some("spring")));
        assert_eq!(d.original_queue.as_deref(), Some("orders.billing"));
        assert_eq!(d.original_exchange.as_deref(), Some("orders"));
        assert_eq!(d.original_routing_keys, vec!["order.created".to_string()]);
        assert_eq!(d.error_message.as_deref(), Some("Listener threw exception"));
        // Grouped by the queue the headers name, not by the DLQ it was read from.
        let expected = fingerprint::fingerprint(Some("orders.billing"), "none", None, Some("Listener threw exception"));
        assert_eq!(d.fingerprint, expected);
    }

    #[test]
    fn a_masstransit_fault_takes_its_queue_from_the_input_address() {
        let r = with_headers(&[
            ("MT-Fault-ExceptionType", "System.InvalidOperationException"),
            ("MT-Fault-Message", "Order 5 not found"),
            ("MT-Fault-InputAddress", "rabbitmq://broker/sales/submit-order?bind=true"),
            ("MT-Reason", "fault"),
        ]);
        let d = r.derive();
        assert_eq!(d.convention, Some("masstransit"));
        assert_eq!(d.original_queue.as_deref(), Some("submit-order"));
        assert_eq!((d.original_exchange, d.original_routing_keys), (None, vec![]));
        assert_eq!(d.error_type.as_deref(), Some("System.InvalidOperationException"));
        assert_eq!(d.error_message.as_deref(), Some("Order 5 not found"));
    }

    #[test]
    fn x_death_outranks_the_convention_headers_for_the_origin() {
        let mut death = FieldTable::default();
        death.insert("reason".into(), AMQPValue::LongString("rejected".into()));
        death.insert("queue".into(), AMQPValue::LongString("work".into()));
        death.insert("exchange".into(), AMQPValue::LongString("ex".into()));
        death.insert("count".into(), AMQPValue::LongLongInt(1));
        let mut r = with_headers(&[
            ("x-original-exchange", "orders"),
            ("x-original-routing-key", "order.created"),
            ("x-original-queue", "orders.billing"),
        ]);
        let mut h = r.properties.headers().clone().unwrap();
        h.insert("x-death".into(), AMQPValue::FieldArray(vec![AMQPValue::FieldTable(death)].into()));
        r.properties = r.properties.with_headers(h);
        let d = r.derive();
        assert_eq!((d.reason, d.convention), ("rejected", Some("x-original")));
        assert_eq!((d.original_queue.as_deref(), d.original_exchange.as_deref()), (Some("work"), Some("ex")));
    }

    #[test]
    fn a_plain_message_has_no_convention() {
        let d = msg("1", b"x").derive();
        assert_eq!((d.convention, d.original_exchange, d.original_routing_keys), (None, None, vec![]));
    }
}
