//! One batch of deliveries: stored in one transaction, then acked; a refused one isolated.
//!
//! Policy: a batch is stored on a task of its own ([`store`]) and settled by the consumer
//! loop in the order batches were gathered ([`settle`]). It is acked only after its
//! transaction has committed (invariant 1), with one
//! `basic.ack multiple` on its highest delivery tag. `multiple` also settles every lower tag
//! still unacked on the channel, so it is used only while no refused delivery is waiting for
//! its delayed nack; otherwise each delivery is acked on its own. When PostgreSQL refuses the
//! batch statement, the deliveries are stored one at a time (each its own transaction) so
//! that one unstorable message costs the others nothing: those stored are acked at once, the
//! refused one is *parked* and nacked with requeue after `STORE_RETRY_DELAY`, alone, while
//! the consumer carries on. A failure that is not a refusal (connection lost, pool exhausted)
//! parks the whole batch without trying each row.

use std::{
    collections::{HashMap, VecDeque},
    sync::atomic::Ordering,
    time::Duration,
};

use anyhow::Context;
use futures::future::BoxFuture;
use lapin::{
    Acker,
    options::{BasicAckOptions, BasicNackOptions},
};
use sqlx::PgPool;
use tokio::{sync::oneshot, time::Instant};
use tracing::Instrument;

use super::{IngestStats, STORE_RETRY_DELAY, timings::Timings};
use crate::dead_letter::{
    store::StoreError,
    store_batch::{self, NewDeadLetter},
};

/// A delivery read and parsed, waiting for its batch to commit.
pub(super) struct Pending {
    pub acker: Acker,
    pub tag: u64,
    pub row: NewDeadLetter,
    /// Time spent parsing it (for the batch's stage timings).
    pub parse: Duration,
}

/// Deliveries the store refused, each nacked (requeued) once its delay is over. They all
/// wait the same delay, so the queue is in due order. Also how often each message (by
/// natural key) was refused, so a message refused [`QUARANTINE_AFTER`] times is stored in
/// its quarantined form instead of retried forever.
pub(super) struct Parked {
    queue: String,
    waiting: VecDeque<(Instant, Acker)>,
    refused: HashMap<String, u32>,
}

/// Refusals of one message after which it is stored raw (`NewDeadLetter::quarantined`): a
/// passing fault (a deadlock, a constraint raced) clears within them; a poison row does not.
pub const QUARANTINE_AFTER: u32 = 3;
/// Messages whose refusals are remembered (a poison flood cannot grow the map further).
const REFUSALS_REMEMBERED: usize = 10_000;

impl Parked {
    pub fn new(queue: &str) -> Self {
        Self { queue: queue.to_string(), waiting: VecDeque::new(), refused: HashMap::new() }
    }

    /// Counts a refusal of the message with `key`; true when it is due for quarantine.
    fn refused(&mut self, key: &str) -> bool {
        if self.refused.len() >= REFUSALS_REMEMBERED && !self.refused.contains_key(key) {
            self.refused.clear();
        }
        let n = self.refused.entry(key.to_string()).or_default();
        *n += 1;
        *n >= QUARANTINE_AFTER
    }

    fn forget(&mut self, key: &str) {
        self.refused.remove(key);
    }

    fn park(&mut self, acker: Acker) {
        self.waiting.push_back((Instant::now() + STORE_RETRY_DELAY, acker));
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// When the oldest parked delivery is due for its nack.
    pub fn next_due(&self) -> Option<Instant> {
        self.waiting.front().map(|(due, _)| *due)
    }

    /// Nacks (with requeue) every parked delivery whose delay is over.
    pub async fn release_due(&mut self) -> anyhow::Result<()> {
        let now = Instant::now();
        while let Some((due, _)) = self.waiting.front() {
            if *due > now {
                break;
            }
            if let Some((_, acker)) = self.waiting.pop_front() {
                let nack = BasicNackOptions { requeue: true, multiple: false };
                acker.nack(nack).await.context("nack failed")?;
            }
        }
        Ok(())
    }
}

/// A batch whose transaction has ended (committed or refused), waiting its turn to be settled.
pub(super) struct Stored {
    ackers: Vec<(Acker, u64)>,
    rows: Vec<NewDeadLetter>,
    outcome: Result<Vec<Option<i64>>, StoreError>,
    parse: Duration,
    store: Duration,
}

/// Stores `items` in one transaction on a task of its own (so it progresses while the consumer
/// loop gathers the next batch, and beside the previous batch's commit), its rows written
/// once the previous batch's are (`after`, see [`store_batch::insert_committed_after`]).
/// Returns the batch and what resolves when its rows are written. Nothing is acked here:
/// [`settle`] does that, in delivery order.
pub(super) fn store(
    pool: &PgPool,
    items: Vec<Pending>,
    after: Option<oneshot::Receiver<()>>,
) -> (BoxFuture<'static, Stored>, oneshot::Receiver<()>) {
    let parse = items.iter().map(|p| p.parse).sum();
    let (ackers, rows): (Vec<(Acker, u64)>, Vec<NewDeadLetter>) =
        items.into_iter().map(|p| ((p.acker, p.tag), p.row)).unzip();
    let pool = pool.clone();
    let (written, rows_written) = oneshot::channel();
    let task = tokio::spawn(async move {
        let started = Instant::now();
        // A previous batch that failed drops its sender: that also lets this one go.
        let after = async move {
            if let Some(after) = after {
                let _ = after.await;
            }
        };
        let outcome = store_batch::insert_committed_after(&pool, &rows, after, move || {
            let _ = written.send(());
        })
        .await;
        Stored { ackers, rows, outcome, parse, store: started.elapsed() }
    });
    (Box::pin(async move { task.await.expect("the store task panicked") }), rows_written)
}

impl Stored {
    /// Deliveries in the batch.
    pub fn len(&self) -> usize {
        self.ackers.len()
    }
}

/// Settles a stored batch: acked (one `multiple` ack when that is safe) once committed, or, when
/// PostgreSQL refused it, stored again one delivery at a time, or parked. Called in delivery
/// order, so a `multiple` ack never covers a batch that has not committed.
pub(super) async fn settle(
    pool: &PgPool,
    stored: Stored,
    stats: &IngestStats,
    parked: &mut Parked,
    t: &mut Timings,
) -> anyhow::Result<()> {
    let Stored { ackers, rows, outcome, parse, store } = stored;
    if ackers.is_empty() {
        return Ok(());
    }
    t.batches += 1;
    t.store += store;
    let span = tracing::info_span!("batch", size = ackers.len());
    async {
        match outcome {
            Ok(outcomes) => {
                count(stats, &outcomes);
                let started = Instant::now();
                // Only now, with the rows committed, may RabbitMQ forget the messages.
                ack_all(&ackers, parked.is_empty()).await?;
                t.ack += started.elapsed();
                if parked.is_empty() {
                    stats.note_flowing(&parked.queue);
                }
                // Stage timings, to see where a batch's time goes (RUST_LOG=engine=debug).
                tracing::debug!(
                    stored = outcomes.iter().flatten().count(),
                    parse_us = parse.as_micros() as u64,
                    store_us = store.as_micros() as u64,
                    ack_us = started.elapsed().as_micros() as u64,
                    "batch stored"
                );
            }
            Err(e) if store_batch::is_refusal(&e) => {
                if rows.len() > 1 {
                    tracing::warn!(error = %e, "the batch was refused; storing its deliveries one at a time");
                }
                one_at_a_time(pool, ackers, rows, stats, parked).await?;
            }
            Err(e) => {
                stats.store_errors.fetch_add(rows.len() as u64, Ordering::Relaxed);
                tracing::warn!(error = %e, "cannot store the batch; requeueing its deliveries after a delay");
                stats.note_stuck(&parked.queue, &format!("cannot store: {e}"));
                for (acker, _) in ackers {
                    parked.park(acker);
                }
            }
        }
        Ok(())
    }
    .instrument(span)
    .await
}

fn count(stats: &IngestStats, outcomes: &[Option<i64>]) {
    let stored = outcomes.iter().flatten().count() as u64;
    stats.stored.fetch_add(stored, Ordering::Relaxed);
    stats.duplicates.fetch_add(outcomes.len() as u64 - stored, Ordering::Relaxed);
}

/// Acks a committed batch: one `multiple` ack when no lower tag may be outstanding.
async fn ack_all(ackers: &[(Acker, u64)], multiple_is_safe: bool) -> anyhow::Result<()> {
    if multiple_is_safe {
        if let Some((highest, _)) = ackers.iter().max_by_key(|(_, tag)| *tag) {
            highest.ack(BasicAckOptions { multiple: true }).await.context("ack failed")?;
        }
        return Ok(());
    }
    for (acker, _) in ackers {
        acker.ack(BasicAckOptions::default()).await.context("ack failed")?;
    }
    Ok(())
}

async fn one_at_a_time(
    pool: &PgPool,
    ackers: Vec<(Acker, u64)>,
    rows: Vec<NewDeadLetter>,
    stats: &IngestStats,
    parked: &mut Parked,
) -> anyhow::Result<()> {
    let mut reachable = true;
    for ((acker, tag), row) in ackers.into_iter().zip(rows) {
        if !reachable {
            stats.store_errors.fetch_add(1, Ordering::Relaxed);
            parked.park(acker);
            continue;
        }
        match store_batch::insert_committed(pool, std::slice::from_ref(&row)).await {
            Ok(outcome) => {
                count(stats, &outcome);
                parked.forget(row.natural_key());
                acker.ack(BasicAckOptions::default()).await.context("ack failed")?;
            }
            Err(e) => {
                stats.store_errors.fetch_add(1, Ordering::Relaxed);
                // Ids and sizes only: never the payload.
                tracing::warn!(
                    error = %e,
                    tag,
                    message_id = row.message_id().unwrap_or(""),
                    bytes = row.body_len(),
                    "cannot store the dead letter; requeueing it after a delay"
                );
                reachable = store_batch::is_refusal(&e);
                if reachable && parked.refused(row.natural_key()) {
                    let raw = row.quarantined(&e.to_string());
                    match store_batch::insert_committed(pool, std::slice::from_ref(&raw)).await {
                        Ok(outcome) => {
                            count(stats, &outcome);
                            stats.quarantined.fetch_add(1, Ordering::Relaxed);
                            parked.forget(row.natural_key());
                            tracing::warn!(
                                tag,
                                bytes = row.body_len(),
                                "refused repeatedly: stored raw, as unreadable"
                            );
                            acker.ack(BasicAckOptions::default()).await.context("ack failed")?;
                            continue;
                        }
                        Err(e) => tracing::warn!(error = %e, tag, "even its raw form was refused"),
                    }
                }
                stats.note_stuck(&parked.queue, &format!("a message the store refuses: {e}"));
                parked.park(acker);
            }
        }
    }
    if parked.is_empty() {
        stats.note_flowing(&parked.queue);
    }
    Ok(())
}
