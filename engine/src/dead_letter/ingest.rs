//! The ingest role: consume DLQs, store each dead letter, and only then ack it.
//!
//! Policy: manual acks, sent after the storing transaction has committed (invariant 1). A
//! store error nacks with requeue after a short delay, so the message stays in RabbitMQ and
//! nothing is ever dropped. Each queue has its own connection and task: a queue that does not
//! exist (RabbitMQ closes the channel with 404) or a broken connection is retried with backoff
//! without touching the others. Several ingesters on one queue compete for messages; the
//! natural key makes a message stored by one and redelivered to another a duplicate, not a
//! second row.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::StreamExt;
use lapin::{
    message::Delivery,
    options::{BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions},
    protocol::{AMQPErrorKind, AMQPSoftError},
    types::{FieldTable, ShortString},
};
use serde::Serialize;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{
    Received,
    store::{self, InsertOutcome},
};
use crate::settings::IngestSettings;

/// How long a delivery that could not be stored waits before it is requeued: long enough
/// not to spin on a database that is down, short enough to resume quickly.
pub const STORE_RETRY_DELAY: Duration = Duration::from_secs(1);
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
const HEARTBEAT_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub struct IngestStats {
    pub received: AtomicU64,
    pub stored: AtomicU64,
    pub duplicates: AtomicU64,
    pub store_errors: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IngestCounts {
    pub received: u64,
    pub stored: u64,
    pub duplicates: u64,
    pub store_errors: u64,
}

impl IngestStats {
    pub fn snapshot(&self) -> IngestCounts {
        IngestCounts {
            received: self.received.load(Ordering::Relaxed),
            stored: self.stored.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            store_errors: self.store_errors.load(Ordering::Relaxed),
        }
    }
}

/// Runs until `shutdown` is cancelled. Connection and store errors are retried, never fatal.
pub async fn run(
    pool: PgPool,
    amqp_url: String,
    cfg: IngestSettings,
    stats: Arc<IngestStats>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let instance = uuid::Uuid::new_v4();
    tracing::info!(%instance, queues = ?cfg.queues, prefetch = cfg.prefetch, "ingest starting");
    let mut tasks = tokio::task::JoinSet::new();
    for queue in cfg.queues.iter().cloned() {
        let (pool, url, stats, shutdown) = (pool.clone(), amqp_url.clone(), stats.clone(), shutdown.clone());
        let span = tracing::info_span!("ingest", %queue);
        tasks.spawn(consume_forever(pool, url, queue, cfg.prefetch, stats, shutdown).instrument(span));
    }
    tasks.spawn(heartbeat(pool, instance, cfg.queues.clone(), stats, shutdown.clone()));
    while let Some(res) = tasks.join_next().await {
        res.context("an ingest task panicked")?;
    }
    tracing::info!(%instance, "ingest stopped");
    Ok(())
}

async fn consume_forever(
    pool: PgPool,
    url: String,
    queue: String,
    prefetch: u16,
    stats: Arc<IngestStats>,
    shutdown: CancellationToken,
) {
    let mut delay = BACKOFF_MIN;
    while !shutdown.is_cancelled() {
        let started = Instant::now();
        match consume_once(&pool, &url, &queue, prefetch, &stats, &shutdown).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), retry_in_ms = delay.as_millis() as u64, "ingest interrupted")
            }
        }
        // A consumer that ran for a while was healthy: start the backoff over.
        if started.elapsed() > BACKOFF_MAX {
            delay = BACKOFF_MIN;
        }
        let jitter = Duration::from_millis((rand::random::<f64>() * 250.0) as u64);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay + jitter) => {}
        }
        delay = (delay * 2).min(BACKOFF_MAX);
    }
}

fn is_not_found(e: &lapin::Error) -> bool {
    matches!(e.kind(), lapin::ErrorKind::ProtocolError(p) if matches!(p.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)))
}

/// One connection's life: Ok when shutdown was asked for, Err on anything to retry.
async fn consume_once(
    pool: &PgPool,
    url: &str,
    queue: &str,
    prefetch: u16,
    stats: &IngestStats,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let name = ShortString::try_new(queue).map_err(|_| anyhow::anyhow!("queue name longer than 255 bytes"))?;
    let conn = crate::amqp::connect(url, &format!("revenant-ingest {queue}")).await?;
    let result = async {
        let ch = conn.create_channel().await.context("cannot open a channel")?;
        ch.basic_qos(prefetch, BasicQosOptions::default()).await.context("basic.qos refused")?;
        let tag = ShortString::from(format!("revenant-ingest-{}", uuid::Uuid::new_v4().simple()));
        let mut consumer =
            match ch.basic_consume(name, tag, BasicConsumeOptions::default(), FieldTable::default()).await {
                Ok(c) => c,
                Err(e) if is_not_found(&e) => {
                    anyhow::bail!(
                        "queue `{queue}` does not exist on the broker: declare it, or remove it from ingest.queues"
                    )
                }
                Err(e) => return Err(e).context("basic.consume refused"),
            };
        tracing::info!(prefetch, "consuming");
        loop {
            let next = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                d = consumer.next() => d,
            };
            match next {
                Some(Ok(delivery)) => handle(pool, queue, delivery, stats, shutdown).await?,
                Some(Err(e)) => return Err(e).context("consumer failed"),
                None => anyhow::bail!("the broker cancelled the consumer (queue deleted?)"),
            }
        }
    }
    .await;
    // Closing returns any unacked deliveries to the queue at once.
    let _ = conn.close(200, "revenant ingest stopping".into()).await;
    result
}

async fn handle(
    pool: &PgPool,
    queue: &str,
    delivery: Delivery,
    stats: &IngestStats,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    stats.received.fetch_add(1, Ordering::Relaxed);
    let span = tracing::info_span!(
        "delivery",
        tag = delivery.delivery_tag,
        bytes = delivery.data.len(),
        message_id = delivery.properties.message_id().as_ref().map(|m| m.as_str()).unwrap_or(""),
        redelivered = delivery.redelivered,
    );
    async {
        let received = Received::from_delivery(queue, &delivery);
        match store::insert_committed(pool, &received).await {
            Ok(outcome) => {
                match outcome {
                    InsertOutcome::Inserted(id) => {
                        stats.stored.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(id, "stored");
                    }
                    InsertOutcome::Duplicate(id) => {
                        stats.duplicates.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(id, "already stored; acking the redelivery");
                    }
                }
                // Only now, with the row committed, may RabbitMQ forget the message.
                delivery.acker.ack(BasicAckOptions::default()).await.context("ack failed")?;
            }
            Err(e) => {
                stats.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "cannot store the dead letter; requeueing it");
                tokio::select! {
                    // On shutdown, closing the connection requeues it anyway.
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(STORE_RETRY_DELAY) => {}
                }
                let nack = BasicNackOptions { requeue: true, multiple: false };
                delivery.acker.nack(nack).await.context("nack failed")?;
            }
        }
        Ok(())
    }
    .instrument(span)
    .await
}

async fn heartbeat(
    pool: PgPool,
    instance: uuid::Uuid,
    queues: Vec<String>,
    stats: Arc<IngestStats>,
    shutdown: CancellationToken,
) {
    let host = crate::host::name();
    loop {
        let detail = serde_json::json!({"queues": queues, "counts": stats.snapshot()});
        let res = sqlx::query(
            "INSERT INTO heartbeats (role, instance, host, detail) VALUES ('ingest', $1, $2, $3)
             ON CONFLICT (role, instance) DO UPDATE SET last_seen = now(), detail = EXCLUDED.detail",
        )
        .bind(instance)
        .bind(&host)
        .bind(detail)
        .execute(&pool)
        .await;
        if let Err(e) = res {
            tracing::warn!(error = %e, "cannot write the ingest heartbeat");
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(HEARTBEAT_EVERY) => {}
        }
    }
}
