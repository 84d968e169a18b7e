//! The demo's RabbitMQ topology: an orders exchange, work queues that dead-letter into a
//! topic DLX, one DLQ per dead-lettering queue, a TTL queue and a length-limited queue.
//!
//! Policy: every name derives from a prefix (`demo` unless a test asks for its own), so a
//! test never touches the topology of a demo a developer runs on the same broker. Each
//! queue dead-letters with `x-dead-letter-routing-key` = its own name and its DLQ is bound on
//! the DLX with exactly that key: a message routed to several queues (the audit trail sees
//! everything) still lands in the DLQ of the queue it died in. Declaring is idempotent; a
//! queue that exists with other arguments is a 406 from the broker, which `--reset` cures.

use anyhow::Context;
use lapin::{
    Channel, Connection, ExchangeKind,
    options::{
        ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
    },
    types::{AMQPValue, FieldTable, ShortString},
};

use super::DemoError;

pub const DEFAULT_PREFIX: &str = "demo";

/// The DLQs of the default topology: what `REVENANT_INGEST_QUEUES` lists for the demo.
pub const DEMO_DLQS: &[&str] = &[
    "demo.orders.created.dlq",
    "demo.orders.paid.dlq",
    "demo.shipping.dlq",
    "demo.notifications.dlq",
    "demo.audit-trail.dlq",
];

/// How long a notification may wait for the mailer before it expires into its DLQ.
pub const NOTIFICATION_TTL_MS: i32 = 5_000;
/// Ready messages the audit trail keeps; beyond that the oldest is dead-lettered (drop-head).
pub const AUDIT_TRAIL_MAX_LENGTH: i32 = 20;

/// The demo's queues, each with the consumer behaviour of `super::consumers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DemoQueue {
    /// Inventory reserves stock for new orders.
    OrdersCreated,
    /// Billing books payments.
    OrdersPaid,
    /// Shipping books a carrier for paid orders; the carrier's API goes down now and then.
    Shipping,
    /// The mailer tells customers their order shipped; messages expire when it is away.
    Notifications,
    /// An audit sink that sees every event and sometimes stalls; the queue overflows then.
    AuditTrail,
}

impl DemoQueue {
    pub const ALL: [DemoQueue; 5] =
        [Self::OrdersCreated, Self::OrdersPaid, Self::Shipping, Self::Notifications, Self::AuditTrail];

    fn suffix(self) -> &'static str {
        match self {
            Self::OrdersCreated => "orders.created",
            Self::OrdersPaid => "orders.paid",
            Self::Shipping => "shipping",
            Self::Notifications => "notifications",
            Self::AuditTrail => "audit-trail",
        }
    }

    /// Topic patterns binding the queue to the orders exchange. Nothing binds
    /// `order.refunded`, so refunds come back unroutable and the relay's failure path shows.
    pub fn bindings(self) -> &'static [&'static str] {
        match self {
            Self::OrdersCreated => &["order.created"],
            Self::OrdersPaid | Self::Shipping => &["order.paid"],
            Self::Notifications => &["order.shipped"],
            Self::AuditTrail => &["order.created", "order.paid", "order.shipped"],
        }
    }

    fn extra_args(self) -> Vec<(&'static str, AMQPValue)> {
        match self {
            Self::Notifications => vec![("x-message-ttl", AMQPValue::LongInt(NOTIFICATION_TTL_MS))],
            // drop-head (the default overflow) dead-letters the oldest message with reason
            // `maxlen`; reject-publish would refuse the newest without dead-lettering it.
            Self::AuditTrail => vec![
                ("x-max-length", AMQPValue::LongInt(AUDIT_TRAIL_MAX_LENGTH)),
                ("x-overflow", AMQPValue::LongString("drop-head".into())),
            ],
            _ => Vec::new(),
        }
    }
}

/// Every demo name, derived from one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    prefix: String,
}

impl Default for Names {
    fn default() -> Self {
        Self { prefix: DEFAULT_PREFIX.into() }
    }
}

impl Names {
    /// Letters, digits, `-`, `_` and `.` only: the names end up in topic bindings, where
    /// `*` and `#` would be wildcards.
    pub fn new(prefix: &str) -> Result<Self, DemoError> {
        let ok = !prefix.is_empty()
            && prefix.len() <= 100
            && prefix.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok {
            return Err(DemoError::InvalidPrefix(prefix.into()));
        }
        Ok(Self { prefix: prefix.into() })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The topic exchange the demo service's outbox events are published to.
    pub fn exchange(&self) -> String {
        format!("{}.orders", self.prefix)
    }

    /// The topic dead-letter exchange every demo queue dead-letters into.
    pub fn dlx(&self) -> String {
        format!("{}.dlx", self.prefix)
    }

    pub fn queue(&self, q: DemoQueue) -> String {
        format!("{}.{}", self.prefix, q.suffix())
    }

    pub fn dlq(&self, q: DemoQueue) -> String {
        format!("{}.dlq", self.queue(q))
    }

    pub fn dlqs(&self) -> Vec<String> {
        DemoQueue::ALL.iter().map(|q| self.dlq(*q)).collect()
    }

    /// Work queues and DLQs: everything `reset` deletes on the broker.
    pub fn all_queues(&self) -> Vec<String> {
        DemoQueue::ALL.iter().flat_map(|q| [self.queue(*q), self.dlq(*q)]).collect()
    }
}

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(s.into())
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions { durable: true, ..Default::default() }
}

/// Declares (or re-declares, unchanged) the whole topology.
pub async fn declare(ch: &Channel, names: &Names) -> anyhow::Result<()> {
    let exchange_opts = ExchangeDeclareOptions { durable: true, ..Default::default() };
    for x in [names.exchange(), names.dlx()] {
        ch.exchange_declare(x.as_str().into(), ExchangeKind::Topic, exchange_opts, FieldTable::default())
            .await
            .with_context(|| format!("cannot declare exchange {x}"))?;
    }
    let hint = "it exists with other arguments? `revenant demo --reset` removes the demo topology";
    for q in DemoQueue::ALL {
        let (queue, dlq) = (names.queue(q), names.dlq(q));
        ch.queue_declare(dlq.as_str().into(), durable(), FieldTable::default())
            .await
            .with_context(|| format!("cannot declare queue {dlq} ({hint})"))?;
        ch.queue_bind(
            dlq.as_str().into(),
            names.dlx().into(),
            queue.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("cannot bind {dlq} to {}", names.dlx()))?;

        let mut args = FieldTable::default();
        args.insert("x-dead-letter-exchange".into(), long(&names.dlx()));
        args.insert("x-dead-letter-routing-key".into(), long(&queue));
        for (k, v) in q.extra_args() {
            args.insert(k.into(), v);
        }
        ch.queue_declare(queue.as_str().into(), durable(), args)
            .await
            .with_context(|| format!("cannot declare queue {queue} ({hint})"))?;
        for key in q.bindings() {
            ch.queue_bind(
                queue.as_str().into(),
                names.exchange().into(),
                ShortString::from(*key),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("cannot bind {queue} to {} with {key}", names.exchange()))?;
        }
    }
    tracing::info!(prefix = names.prefix(), "demo topology declared");
    Ok(())
}

/// Deletes the demo's queues (with any messages in them) and exchanges. Each delete gets a
/// channel of its own: a broker that answers "not found" closes the channel it was asked on.
/// Returns how many messages the deleted queues held.
pub async fn delete(conn: &Connection, names: &Names) -> anyhow::Result<u64> {
    let mut dropped = 0u64;
    for queue in names.all_queues() {
        let ch = conn.create_channel().await.context("cannot open a channel")?;
        match ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await {
            Ok(n) => {
                dropped += u64::from(n);
                tracing::info!(%queue, messages = n, "demo queue deleted");
            }
            Err(e) if engine::amqp::is_not_found(&e) => tracing::debug!(%queue, "demo queue already gone"),
            Err(e) => return Err(e).with_context(|| format!("cannot delete queue {queue}")),
        }
        let _ = ch.close(200, "demo reset".into()).await;
    }
    for exchange in [names.exchange(), names.dlx()] {
        let ch = conn.create_channel().await.context("cannot open a channel")?;
        match ch.exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default()).await {
            Ok(()) => tracing::info!(%exchange, "demo exchange deleted"),
            Err(e) if engine::amqp::is_not_found(&e) => tracing::debug!(%exchange, "demo exchange already gone"),
            Err(e) => return Err(e).with_context(|| format!("cannot delete exchange {exchange}")),
        }
        let _ = ch.close(200, "demo reset".into()).await;
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_names_match_the_published_dlq_list() {
        assert_eq!(Names::default().dlqs(), DEMO_DLQS.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    }

    #[test]
    fn a_prefix_with_topic_wildcards_is_refused() {
        assert!(Names::new("demo.#").is_err());
        assert!(Names::new("de*mo").is_err());
        assert!(Names::new("").is_err());
        assert_eq!(Names::new("demo-t.1_a").map(|n| n.exchange()).ok().as_deref(), Some("demo-t.1_a.orders"));
    }

    #[test]
    fn nothing_binds_the_refund_routing_key() {
        assert!(DemoQueue::ALL.iter().all(|q| !q.bindings().contains(&"order.refunded")));
    }
}
