//! The ingest role: consume DLQs, store dead letters in batches, and only then ack them.
//!
//! Policy: manual acks, sent after the storing transaction has committed (invariant 1). A
//! burst of deliveries (up to `ingest.batch`, or what arrived within `ingest.linger` of the
//! first) is stored in one transaction and acked with one `multiple` ack (group commit, see
//! `batch`): one commit per batch rather than per message. Up to `ingest.commits` batches
//! commit at once (each on its own pooled connection) while the next gathers and is parsed;
//! a batch's rows are written after the previous batch's (ids keep the queue's order) and its
//! statements overlap the previous commit; they are acked in the order they were gathered, so acks go out in tag order and a
//! `multiple` ack never covers a batch that has not committed. A delivery the store refuses is
//! nacked with requeue after a short delay, alone, so the message stays in RabbitMQ, nothing
//! is ever dropped and the others go on. Each queue has its own connection and task: a queue
//! that does not exist (RabbitMQ closes the channel with 404) or a broken connection is
//! retried with backoff without touching the others. Several ingesters on one queue compete
//! for messages; the natural key makes a message stored by one and redelivered to another a
//! duplicate, not a second row. Which queues are consumed follows the watched set in
//! PostgreSQL (`watch`), re-read every few seconds, so queues start and stop without a
//! restart; stopping one closes its consumer like a shutdown does. On shutdown a batch still gathering is not stored: closing
//! the connection requeues it, and its redelivery is stored then.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::{StreamExt, future::BoxFuture, stream::FuturesOrdered};
use lapin::{
    message::Delivery,
    options::{BasicConsumeOptions, BasicQosOptions},
    types::{FieldTable, ShortString},
};
use serde::Serialize;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Received, store_batch::NewDeadLetter, watch};
use crate::{group_commit::Batch, settings::IngestSettings};

mod batch;
mod timings;

pub use batch::QUARANTINE_AFTER;

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
    /// Messages the store refused `QUARANTINE_AFTER` times, then stored raw as unreadable.
    pub quarantined: AtomicU64,
    /// Batches flushed: one transaction each (plus one per delivery when a batch is refused).
    pub batches: AtomicU64,
    /// Queues with a live consumer now (what readiness reads for the ingest role).
    pub consuming: AtomicU64,
    /// Which: the console's "not ingested" hint reads them from the heartbeat.
    consuming_queues: Mutex<BTreeSet<String>>,
    /// The watched queues this instance runs a consumer task for (connected or retrying).
    watched: Mutex<Vec<String>>,
    /// Queues that are not moving: a delivery requeued because the store failed, or a consumer
    /// that keeps losing its connection; with when that began and the latest reason. Cleared
    /// when a batch of the queue is stored. /readyz, /metrics and the DLQ cards report them.
    stuck: Mutex<BTreeMap<String, (chrono::DateTime<chrono::Utc>, String)>>,
    /// Woken when a consumer starts or stops, so the heartbeat tells the console at once.
    changed: tokio::sync::Notify,
}

/// A queue that is not moving, as /readyz and the heartbeat report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Stuck {
    pub queue: String,
    pub since: chrono::DateTime<chrono::Utc>,
    pub reason: String,
}

/// Counts a live consumer (and names its queue) for as long as it is held.
struct Consuming<'a> {
    stats: &'a IngestStats,
    queue: String,
}

impl<'a> Consuming<'a> {
    fn start(stats: &'a IngestStats, queue: &str) -> Self {
        stats.consuming.fetch_add(1, Ordering::Relaxed);
        stats.consuming_queues.lock().unwrap_or_else(|p| p.into_inner()).insert(queue.to_string());
        stats.changed.notify_one();
        Self { stats, queue: queue.to_string() }
    }
}

impl Drop for Consuming<'_> {
    fn drop(&mut self) {
        self.stats.consuming.fetch_sub(1, Ordering::Relaxed);
        self.stats.consuming_queues.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.queue);
        self.stats.changed.notify_one();
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IngestCounts {
    pub received: u64,
    pub stored: u64,
    pub duplicates: u64,
    pub store_errors: u64,
    pub batches: u64,
    pub quarantined: u64,
    /// Queues not moving now (see `IngestStats::stuck`).
    pub stuck_queues: u64,
}

impl IngestStats {
    /// Queues with a live consumer in this process now.
    pub fn consuming_queues(&self) -> Vec<String> {
        self.consuming_queues.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    pub fn watched(&self) -> Vec<String> {
        self.watched.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_watched(&self, mut queues: Vec<String>) {
        queues.sort();
        *self.watched.lock().unwrap_or_else(|p| p.into_inner()) = queues;
    }

    pub fn snapshot(&self) -> IngestCounts {
        IngestCounts {
            received: self.received.load(Ordering::Relaxed),
            stored: self.stored.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            store_errors: self.store_errors.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            quarantined: self.quarantined.load(Ordering::Relaxed),
            stuck_queues: self.stuck.lock().unwrap_or_else(|p| p.into_inner()).len() as u64,
        }
    }

    /// `queue` is not moving, because of `reason` (kept since the first time, reason updated).
    pub fn note_stuck(&self, queue: &str, reason: &str) {
        let mut stuck = self.stuck.lock().unwrap_or_else(|p| p.into_inner());
        let reason: String = reason.chars().take(300).collect();
        let first = !stuck.contains_key(queue);
        stuck.entry(queue.to_string()).or_insert_with(|| (chrono::Utc::now(), String::new())).1 = reason;
        drop(stuck);
        if first {
            self.changed.notify_one();
        }
    }

    /// `queue` moves again (a batch was stored) or is no longer consumed here.
    pub fn note_flowing(&self, queue: &str) {
        if self.stuck.lock().unwrap_or_else(|p| p.into_inner()).remove(queue).is_some() {
            self.changed.notify_one();
        }
    }

    /// The queues not moving now, oldest first.
    pub fn stuck(&self) -> Vec<Stuck> {
        let stuck = self.stuck.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<Stuck> = stuck
            .iter()
            .map(|(q, (since, reason))| Stuck { queue: q.clone(), since: *since, reason: reason.clone() })
            .collect();
        out.sort_by_key(|s| s.since);
        out
    }
}

/// Where `ingest.auto` finds dead-letter queues: the management API.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub management_url: String,
    pub vhost: String,
}

/// Runs until `shutdown` is cancelled. Connection and store errors are retried, never fatal.
///
/// The queues consumed follow the watched set in PostgreSQL (`watch`), read every
/// `WATCH_REFRESH`: a queue added gets a consumer, a queue removed has its consumer closed
/// (what it held goes back to the queue). `cfg.queues` seeds the set at start-up; with
/// `cfg.auto`, every dead-letter target `discovery` finds is added too.
pub async fn run(
    pool: PgPool,
    amqp_url: String,
    cfg: IngestSettings,
    discovery: Option<Discovery>,
    stats: Arc<IngestStats>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let instance = uuid::Uuid::new_v4();
    let shape = Shape::of(&cfg);
    tracing::info!(%instance, seed = ?cfg.queues, auto = cfg.auto, prefetch = cfg.prefetch, batch = shape.batch,
        linger_ms = cfg.linger.as_millis() as u64, "ingest starting");
    let mut seeded = cfg.queues.is_empty();
    let mut consumers: HashMap<String, (CancellationToken, tokio::task::JoinHandle<()>)> = HashMap::new();
    let mut heartbeat_task = tokio::spawn(heartbeat(pool.clone(), instance, stats.clone(), shutdown.clone()));
    let mut last_discovery: Option<Instant> = None;
    loop {
        if !seeded {
            match watch::seed(&pool, &cfg.queues, watch::Origin::Config).await {
                Ok(n) => {
                    seeded = true;
                    if n > 0 {
                        tracing::info!(added = n, "ingest.queues seeded the watched set");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot seed the watched queues yet"),
            }
        }
        if cfg.auto
            && let Some(d) = &discovery
            && last_discovery.is_none_or(|t| t.elapsed() >= AUTO_DISCOVERY_EVERY)
        {
            last_discovery = Some(Instant::now());
            discover(&pool, d).await;
        }
        match watch::watching(&pool).await {
            Ok(wanted) => {
                let wanted: HashSet<String> = wanted.into_iter().collect();
                consumers.retain(|queue, (stop, _)| {
                    let keep = wanted.contains(queue);
                    if !keep {
                        tracing::info!(%queue, "no longer watched: closing its consumer");
                        stop.cancel();
                    }
                    keep
                });
                for queue in wanted {
                    if consumers.contains_key(&queue) {
                        continue;
                    }
                    tracing::info!(%queue, "watched: starting its consumer");
                    let stop = shutdown.child_token();
                    let (pool, url, stats, s) = (pool.clone(), amqp_url.clone(), stats.clone(), stop.clone());
                    let span = tracing::info_span!("ingest", %queue);
                    let task =
                        tokio::spawn(consume_forever(pool, url, queue.clone(), shape, stats, s).instrument(span));
                    consumers.insert(queue, (stop, task));
                }
                stats.set_watched(consumers.keys().cloned().collect());
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the watched queues; keeping the current consumers"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(WATCH_REFRESH) => {}
            res = &mut heartbeat_task => {
                res.context("the ingest heartbeat panicked")?;
                break;
            }
        }
    }
    for (_, (stop, task)) in consumers.drain() {
        stop.cancel();
        task.await.context("an ingest task panicked")?;
    }
    if !heartbeat_task.is_finished() {
        heartbeat_task.await.context("the ingest heartbeat panicked")?;
    }
    tracing::info!(%instance, "ingest stopped");
    Ok(())
}

/// How often each ingester re-reads the watched set (a change takes effect within this).
pub const WATCH_REFRESH: Duration = Duration::from_secs(3);
/// How often `ingest.auto` asks the management API for dead-letter targets.
const AUTO_DISCOVERY_EVERY: Duration = Duration::from_secs(30);

/// `ingest.auto`: adds every queue the topology shows as a dead-letter target. A queue an
/// admin stopped stays stopped (`seed` inserts only what is absent).
async fn discover(pool: &PgPool, d: &Discovery) {
    let http = match crate::topology::http_client() {
        Ok(h) => h,
        Err(e) => return tracing::warn!(error = %e, "ingest.auto: no HTTP client"),
    };
    match crate::topology::report(&http, &d.management_url, &d.vhost, &[], &HashSet::new()).await {
        Ok(r) => {
            let found: Vec<String> = r
                .queues
                .into_iter()
                .filter(|q| q.role == crate::topology::dead_lettering::Role::DeadLetter)
                .map(|q| q.queue)
                .collect();
            match watch::seed(pool, &found, watch::Origin::Auto).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(added = n, queues = ?found, "ingest.auto: new dead-letter queues watched"),
                Err(e) => tracing::warn!(error = %e, "ingest.auto: cannot add the discovered queues"),
            }
        }
        Err(e) => tracing::warn!(error = %e, "ingest.auto: cannot read the topology"),
    }
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
    let mut failures = 0u32;
    while !shutdown.is_cancelled() {
        let started = Instant::now();
        match consume_once(&pool, &url, &queue, shape, &stats, &shutdown).await {
            Ok(()) => {
                stats.note_flowing(&queue);
                return;
            }
            Err(e) => {
                let reason = format!("{e:#}");
                tracing::warn!(error = reason, retry_in_ms = delay.as_millis() as u64, "ingest interrupted");
                failures += 1;
                // Once is a blip (a broker restart); twice in a row the queue is not moving.
                if failures >= 2 {
                    stats.note_stuck(&queue, &reason);
                }
            }
        }
        // A consumer that ran for a while was healthy: start the backoff over.
        if started.elapsed() > BACKOFF_MAX {
            delay = BACKOFF_MIN;
            failures = 0;
        }
        let jitter = Duration::from_millis((rand::random::<f64>() * 250.0) as u64);
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(delay + jitter) => {}
        }
        delay = (delay * 2).min(BACKOFF_MAX);
    }
    stats.note_flowing(&queue);
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
    let mut t = timings::Timings::default();
    let consuming = async {
        let ch = conn.create_channel().await.context("cannot open a channel")?;
        ch.basic_qos(prefetch, BasicQosOptions::default()).await.context("basic.qos refused")?;
        let tag = ShortString::from(format!("revenant-ingest-{}", uuid::Uuid::new_v4().simple()));
        let mut consumer = match ch
            .basic_consume(name, tag, BasicConsumeOptions::default(), FieldTable::default())
            .await
        {
            Ok(c) => c,
            Err(e) if crate::amqp::is_not_found(&e) => {
                anyhow::bail!(
                    "queue `{queue}` does not exist on the broker: declare it, or stop ingesting it (`revenant dlq remove`)"
                )
            }
            Err(e) => return Err(e).context("basic.consume refused"),
        };
        let _live = Consuming::start(stats, queue);
        tracing::info!(prefetch, batch = shape.batch, "consuming");
        let mut gathering: Batch<batch::Pending> = Batch::new(shape.batch, shape.linger);
        let mut parked = batch::Parked::new(queue);
        // Up to `commits` batches commit at once while the next gathers and parses; they are
        // settled (acked) in the order they were gathered, which is delivery-tag order, so a
        // `multiple` ack never covers a batch that has not committed.
        let mut storing: FuturesOrdered<BoxFuture<'static, batch::Stored>> = FuturesOrdered::new();
        // Resolves when the newest batch's rows are written: the next one writes after it.
        let mut last_written: Option<tokio::sync::oneshot::Receiver<()>> = None;
        // Deliveries in batches committing (unacked, so they hold prefetch credit).
        let mut in_store = 0usize;
        loop {
            let now = tokio::time::Instant::now();
            let due = gathering.is_full() || gathering.deadline().is_some_and(|d| d <= now);
            let room = storing.len() < shape.commits;
            if room && due && !gathering.is_empty() {
                stats.batches.fetch_add(1, Ordering::Relaxed);
                in_store += gathering.len();
                let (stored, written) = batch::store(pool, gathering.take(), last_written.take());
                storing.push_back(stored);
                last_written = Some(written);
                continue;
            }
            // A full batch waits for a commit slot rather than grow past `batch` (the
            // prefetch, not this loop, bounds what RabbitMQ has sent us).
            let take_more = !gathering.is_full();
            let gather_deadline = if room { gathering.deadline() } else { None };
            // Deliveries already received come first, so a batch takes in what is there
            // before its linger runs out; `is_full` bounds it.
            let why = timings::Waiting::of(timings::State {
                batch_full: gathering.is_full(),
                room,
                gathering: gathering.len(),
                storing: in_store,
                prefetch,
            });
            let waiting = tokio::time::Instant::now();
            let wake = tokio::select! {
                biased;
                _ = shutdown.cancelled() => Wake::Shutdown,
                Some(stored) = storing.next(), if !storing.is_empty() => Wake::Stored(stored),
                _ = until(parked.next_due()) => Wake::ParkedDue,
                next = consumer.next(), if take_more => Wake::Delivery(next),
                _ = until(gather_deadline) => Wake::Linger,
            };
            t.waited(why, waiting.elapsed());
            match wake {
                Wake::Shutdown => {
                    // Batches in flight finish their commits and are acked; the rest goes back.
                    while let Some(stored) = storing.next().await {
                        batch::settle(pool, stored, stats, &mut parked, &mut t).await?;
                    }
                    return Ok(());
                }
                Wake::Stored(stored) => {
                    in_store -= stored.len();
                    batch::settle(pool, stored, stats, &mut parked, &mut t).await?
                }
                Wake::ParkedDue => parked.release_due().await?,
                Wake::Delivery(Some(Ok(delivery))) => {
                    stats.received.fetch_add(1, Ordering::Relaxed);
                    let p = pending(queue, delivery);
                    t.deliveries += 1;
                    t.parse += p.parse;
                    gathering.push(p);
                }
                Wake::Delivery(Some(Err(e))) => return Err(e).context("consumer failed"),
                Wake::Delivery(None) => anyhow::bail!("the broker cancelled the consumer (queue deleted?)"),
                Wake::Linger => {}
            }
        }
    };
    // The loop never outlives its connection, whatever await it is in when the connection
    // dies: once in 24 runs of the cluster test, a loop whose node stopped was never told
    // (lapin 4.12.3) and stopped consuming for good. What it had not acked goes back to the
    // queue with the connection; what it stored meanwhile is then a duplicate, which the
    // natural key absorbs.
    let result = tokio::select! {
        result = consuming => result,
        _ = lost(&conn) => {
            tracing::warn!("the connection to RabbitMQ is gone and the consumer was not told: starting over");
            Err(anyhow::anyhow!("the connection to RabbitMQ was lost"))
        }
    };
    t.log(queue);
    // Closing returns any unacked deliveries (gathering or parked) to the queue at once. On a
    // broken connection it may never answer.
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, conn.close(200, "revenant ingest stopping".into())).await;
    result
}

/// How often a consumer's connection is checked, and how long closing it may take.
const CONNECTION_CHECK: Duration = Duration::from_millis(500);
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves once `conn` is no longer connected (errored, closing or closed).
async fn lost(conn: &lapin::Connection) {
    let mut tick = tokio::time::interval(CONNECTION_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !conn.status().connected() {
            return;
        }
    }
}

/// What woke a consumer's loop.
// Built and matched within one loop turn, on the stack: boxing a delivery would allocate
// once per message on the hot path.
#[allow(clippy::large_enum_variant)]
enum Wake {
    Shutdown,
    Stored(batch::Stored),
    ParkedDue,
    Delivery(Option<lapin::Result<Delivery>>),
    Linger,
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
    commits: usize,
}

impl Shape {
    /// A batch larger than the prefetch could never fill (RabbitMQ sends no more until some
    /// are acked) and would wait its whole linger every time: it is cut to the prefetch.
    fn of(cfg: &IngestSettings) -> Self {
        let batch = cfg.batch.max(1);
        let prefetch = cfg.prefetch;
        let commits = cfg.commits.max(1);
        if prefetch > 0 && usize::from(prefetch) < batch {
            tracing::warn!(
                prefetch,
                batch,
                "ingest.prefetch is below ingest.batch: batches are cut to the prefetch; raise ingest.prefetch \
                 (twice the batch lets RabbitMQ send the next batch while one commits)"
            );
            return Self { prefetch, batch: usize::from(prefetch), linger: cfg.linger, commits };
        }
        Self { prefetch, batch, linger: cfg.linger, commits }
    }
}

async fn heartbeat(pool: PgPool, instance: uuid::Uuid, stats: Arc<IngestStats>, shutdown: CancellationToken) {
    let host = crate::host::name();
    loop {
        let detail = serde_json::json!({
            "queues": stats.watched(), "consuming": stats.consuming_queues(), "counts": stats.snapshot(),
            "stuck": stats.stuck(),
        });
        if let Err(e) = crate::heartbeats::upsert(&pool, "ingest", instance, &host, &detail).await {
            tracing::warn!(error = %e, "cannot write the ingest heartbeat");
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(HEARTBEAT_EVERY) => {}
            // A consumer started or stopped: beat now (at most every 200 ms).
            _ = stats.changed.notified() => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    // A last beat, so the console stops naming this instance's queues as consumed at once.
    let detail = serde_json::json!({"queues": [], "consuming": [], "counts": stats.snapshot(), "stopped": true});
    let _ = crate::heartbeats::upsert(&pool, "ingest", instance, &host, &detail).await;
}
