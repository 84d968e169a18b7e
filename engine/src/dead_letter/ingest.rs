//! The ingest role: consume DLQs, store dead letters in batches, and only then ack them.
//!
//! Policy: manual acks, sent after the storing transaction has committed (invariant 1). A
//! burst of deliveries (up to `ingest.batch`, or what arrived within `ingest.linger` of the
//! first) is stored in one transaction and acked with one `multiple` ack (group commit, see
//! `batch`): one commit per batch rather than per message. While one batch commits, the
//! next gathers and is parsed; it is flushed only after the first has acked, so acks go out
//! in tag order. A delivery the store refuses is
//! nacked with requeue after a short delay, alone, so the message stays in RabbitMQ, nothing
//! is ever dropped and the others go on. Each queue has its own connection and task: a queue
//! that does not exist (RabbitMQ closes the channel with 404) or a broken connection is
//! retried with backoff without touching the others. Several ingesters on one queue compete
//! for messages; the natural key makes a message stored by one and redelivered to another a
//! duplicate, not a second row. On shutdown a batch still gathering is not stored: closing
//! the connection requeues it, and its redelivery is stored then.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::{StreamExt, future::BoxFuture};
use lapin::{
    message::Delivery,
    options::{BasicConsumeOptions, BasicQosOptions},
    protocol::{AMQPErrorKind, AMQPSoftError},
    types::{FieldTable, ShortString},
};
use serde::Serialize;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Received, store_batch::NewDeadLetter};
use crate::{group_commit::Batch, settings::IngestSettings};

mod batch;

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
    /// Batches flushed: one transaction each (plus one per delivery when a batch is refused).
    pub batches: AtomicU64,
    /// Queues with a live consumer now (what readiness reads for the ingest role).
    pub consuming: AtomicU64,
}

/// Counts a live consumer for as long as it is held.
struct Consuming<'a>(&'a AtomicU64);

impl<'a> Consuming<'a> {
    fn start(n: &'a AtomicU64) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Self(n)
    }
}

impl Drop for Consuming<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IngestCounts {
    pub received: u64,
    pub stored: u64,
    pub duplicates: u64,
    pub store_errors: u64,
    pub batches: u64,
}

impl IngestStats {
    pub fn snapshot(&self) -> IngestCounts {
        IngestCounts {
            received: self.received.load(Ordering::Relaxed),
            stored: self.stored.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            store_errors: self.store_errors.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
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
    let shape = Shape::of(&cfg);
    tracing::info!(%instance, queues = ?cfg.queues, prefetch = cfg.prefetch, batch = shape.batch,
        linger_ms = cfg.linger.as_millis() as u64, "ingest starting");
    let mut tasks = tokio::task::JoinSet::new();
    for queue in cfg.queues.iter().cloned() {
        let (pool, url, stats, shutdown) = (pool.clone(), amqp_url.clone(), stats.clone(), shutdown.clone());
        let span = tracing::info_span!("ingest", %queue);
        tasks.spawn(consume_forever(pool, url, queue, shape, stats, shutdown).instrument(span));
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
    shape: Shape,
    stats: Arc<IngestStats>,
    shutdown: CancellationToken,
) {
    let mut delay = BACKOFF_MIN;
    while !shutdown.is_cancelled() {
        let started = Instant::now();
        match consume_once(&pool, &url, &queue, shape, &stats, &shutdown).await {
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
    shape: Shape,
    stats: &IngestStats,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let prefetch = shape.prefetch;
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
        let _live = Consuming::start(&stats.consuming);
        tracing::info!(prefetch, batch = shape.batch, "consuming");
        let mut gathering: Batch<batch::Pending> = Batch::new(shape.batch, shape.linger);
        // The parked deliveries travel with the flush in flight (it may park more) and come
        // back when it is done: `None` while a flush runs.
        let mut parked = Some(batch::Parked::default());
        // One batch commits while the next gathers and parses; acks stay in tag order because
        // a second flush starts only after the first has acked.
        let mut flushing: Option<BoxFuture<'_, anyhow::Result<batch::Parked>>> = None;
        loop {
            let due = gathering.is_full() || gathering.deadline().is_some_and(|d| d <= tokio::time::Instant::now());
            if flushing.is_none()
                && due
                && let Some(p) = parked.take()
            {
                let items = gathering.take();
                flushing = Some(Box::pin(async move {
                    let mut p = p;
                    batch::flush(pool, items, stats, &mut p).await?;
                    Ok(p)
                }));
            }
            // A full batch waits for the flush in flight rather than grow past `batch`
            // (the prefetch, not this loop, bounds what RabbitMQ has sent us).
            let take_more = !gathering.is_full();
            let gather_deadline = if flushing.is_none() { gathering.deadline() } else { None };
            let parked_due = parked.as_ref().and_then(batch::Parked::next_due);
            // Deliveries already received come first, so a batch takes in what is there
            // before its linger runs out; `is_full` bounds it.
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => {
                    // A flush in flight finishes its commit and acks; the rest goes back.
                    if let Some(f) = flushing.take() {
                        f.await?;
                    }
                    return Ok(());
                }
                done = async {
                    match flushing.as_mut() {
                        Some(f) => f.await,
                        None => std::future::pending().await,
                    }
                } => {
                    flushing = None;
                    parked = Some(done?);
                }
                _ = until(parked_due) => {
                    if let Some(p) = parked.as_mut() {
                        p.release_due().await?;
                    }
                }
                next = consumer.next(), if take_more => match next {
                    Some(Ok(delivery)) => {
                        stats.received.fetch_add(1, Ordering::Relaxed);
                        gathering.push(pending(queue, delivery));
                    }
                    Some(Err(e)) => return Err(e).context("consumer failed"),
                    None => anyhow::bail!("the broker cancelled the consumer (queue deleted?)"),
                },
                _ = until(gather_deadline) => {}
            }
        }
    }
    .await;
    // Closing returns any unacked deliveries (gathering or parked) to the queue at once.
    let _ = conn.close(200, "revenant ingest stopping".into()).await;
    result
}

/// Waits until `at`, or forever when there is nothing to wait for.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Parses a delivery as soon as it arrives, while the batch is still gathering.
fn pending(queue: &str, delivery: Delivery) -> batch::Pending {
    let tag = delivery.delivery_tag;
    tracing::trace!(tag, bytes = delivery.data.len(), redelivered = delivery.redelivered, "received");
    let started = std::time::Instant::now();
    let row = NewDeadLetter::new(Received::from_delivery(queue, &delivery));
    batch::Pending { acker: delivery.acker, tag, row, parse: started.elapsed() }
}

/// Prefetch, batch and linger as one consumer uses them.
#[derive(Debug, Clone, Copy)]
struct Shape {
    prefetch: u16,
    batch: usize,
    linger: Duration,
}

impl Shape {
    /// A batch larger than the prefetch could never fill (RabbitMQ sends no more until some
    /// are acked) and would wait its whole linger every time: it is cut to the prefetch.
    fn of(cfg: &IngestSettings) -> Self {
        let batch = cfg.batch.max(1);
        let prefetch = cfg.prefetch;
        if prefetch > 0 && usize::from(prefetch) < batch {
            tracing::warn!(
                prefetch,
                batch,
                "ingest.prefetch is below ingest.batch: batches are cut to the prefetch; raise ingest.prefetch \
                 (twice the batch lets RabbitMQ send the next batch while one commits)"
            );
            return Self { prefetch, batch: usize::from(prefetch), linger: cfg.linger };
        }
        Self { prefetch, batch, linger: cfg.linger }
    }
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
        let res = sqlx::query!(
            "INSERT INTO heartbeats (role, instance, host, detail) VALUES ('ingest', $1, $2, $3)
             ON CONFLICT (role, instance) DO UPDATE SET last_seen = now(), detail = EXCLUDED.detail",
            instance,
            host,
            detail
        )
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
