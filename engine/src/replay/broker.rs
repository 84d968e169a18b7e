//! Passive checks on the broker: does an exchange exist, how many consumers has a queue.
//!
//! Policy: a passive declare of something missing makes RabbitMQ close the channel (404), so
//! each check runs on a throwaway channel and never on one that carries publishes or
//! confirms in flight.

use anyhow::Context;
use lapin::{
    Connection, ExchangeKind,
    options::{ExchangeDeclareOptions, QueueDeclareOptions},
    types::{FieldTable, ShortString},
};

fn name(v: &str) -> anyhow::Result<ShortString> {
    ShortString::try_new(v).map_err(|_| anyhow::anyhow!("name longer than 255 bytes"))
}

/// Whether `exchange` exists; the default exchange (`""`) always does.
pub async fn exchange_exists(conn: &Connection, exchange: &str) -> anyhow::Result<bool> {
    if exchange.is_empty() {
        return Ok(true);
    }
    let ch = conn.create_channel().await.context("cannot open a probe channel")?;
    let opts = ExchangeDeclareOptions { passive: true, ..Default::default() };
    let res = ch.exchange_declare(name(exchange)?, ExchangeKind::Direct, opts, FieldTable::default()).await;
    match res {
        Ok(()) => {
            let _ = ch.close(200, "probe done".into()).await;
            Ok(true)
        }
        Err(e) if crate::amqp::is_not_found(&e) => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("passive exchange declare failed")),
    }
}

/// The consumer count of `queue`, or None when it does not exist.
pub async fn queue_consumers(conn: &Connection, queue: &str) -> anyhow::Result<Option<u32>> {
    let ch = conn.create_channel().await.context("cannot open a probe channel")?;
    let opts = QueueDeclareOptions { passive: true, ..Default::default() };
    match ch.queue_declare(name(queue)?, opts, FieldTable::default()).await {
        Ok(q) => {
            let _ = ch.close(200, "probe done".into()).await;
            Ok(Some(q.consumer_count()))
        }
        Err(e) if crate::amqp::is_not_found(&e) => Ok(None),
        Err(e) => Err(anyhow::Error::new(e).context("passive queue declare failed")),
    }
}
