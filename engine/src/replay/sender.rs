//! One plan's send loop, on its own channel: rate limit, confirm window, grouped marks.
//!
//! Policy: see `publisher.rs`. Items are read in seq order a batch at a time (never
//! the whole plan), the next batch read ahead while the current one is sent; each is sent as
//! the dead letter's exact copy plus the replay headers, persistent and `mandatory`, and
//! marked after its own confirm by the plan's flusher ([`super::marks`]), whose group commit
//! runs beside the sending, one at a time, with backpressure. Sends are spaced by
//! `1 / rate_per_sec`. An ordered plan has one message in flight, so each is sent only after
//! the previous confirm, and a failure pauses the plan rather than send the next out of order.
//! A plan ordered per key keeps that order within each key only ([`super::keys`]).

use std::{collections::VecDeque, sync::Arc, time::Duration};

use anyhow::Context;
use futures::{StreamExt, future::BoxFuture, stream::FuturesUnordered};
use lapin::{
    Connection,
    types::{AMQPValue, LongString, ShortString},
};
use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{
    REPLAY_ID_HEADER, REPLAYED_BY_HEADER, autopause,
    config::PublisherConfig,
    items::{self, Outgoing},
    keys::{Keys, Next},
    lineage,
    marks::{self, Mark, Marks},
    model::{Order, Plan, PlanStatus},
    stats::ReplayStats,
};
use crate::{
    amqp::{
        blocked::BlockState,
        confirm::{self, Awaited, Outcome},
    },
    publish::{Flushed, Lanes, Published},
};

type Confirmed = (i64, Awaited, Duration);

/// What one confirm came to, for the send loop.
enum Settled {
    Sent,
    Failed,
    /// No confirm in time: marked unconfirmed, sent again on the next pass.
    Unconfirmed,
}
type Read = BoxFuture<'static, (sqlx::Result<Vec<Outgoing>>, Duration)>;

/// What woke the send loop.
// Built and matched within one loop turn, on the stack: boxing the confirm would allocate
// once per message on the hot path.
#[allow(clippy::large_enum_variant)]
enum Wake {
    Confirmed(Confirmed),
    Flushed(Flushed<Mark, (u64, u64)>),
    Read((sqlx::Result<Vec<Outgoing>>, Duration)),
    Stop,
    Timer,
    Unblocked,
}

/// Where one sender's time went, logged when it stops (the bench reads it to find the slow stage).
#[derive(Default)]
struct Timings {
    reads: u64,
    /// Reading items (beside the sending: overlaps the rest).
    read: Duration,
    published: u64,
    /// Handing publishes to the client (the loop waits on it).
    publish: Duration,
    /// Waiting with a full window (or no room for marks): the broker's confirms.
    window_full: Duration,
    /// Waiting with nothing read yet: PostgreSQL's reads.
    starved: Duration,
}

impl Timings {
    fn log(&self, plan_id: i64, took: Duration, marks: &Marks) {
        let ms = |d: Duration| d.as_millis() as u64;
        tracing::info!(
            plan_id,
            took_ms = ms(took),
            published = self.published,
            publish_ms = ms(self.publish),
            window_full_ms = ms(self.window_full),
            starved_ms = ms(self.starved),
            reads = self.reads,
            read_ms = ms(self.read),
            flushes = marks.flushes,
            flush_ms = ms(marks.flush_time),
            "replay sender stopped"
        );
    }
}

struct Sender<'a> {
    pool: &'a PgPool,
    cfg: &'a PublisherConfig,
    stats: &'a ReplayStats,
    plan: &'a Plan,
    /// The plan's confirm channels (no key: an ordered plan has one message in flight, one
    /// ordered per key one per key, so any channel keeps their order).
    lanes: Lanes<'a>,
    /// Whether the broker blocks the connection; confirm timeouts stop while it does.
    blocks: Arc<BlockState>,
}

/// Sends `plan` until it is done, paused, cancelled, its lease is lost or `stop` fires.
/// `Err` only when the broker channel is unusable (the publisher reconnects).
pub(super) async fn run(
    pool: PgPool,
    conn: Arc<Connection>,
    cfg: PublisherConfig,
    stats: Arc<ReplayStats>,
    plan: Plan,
    owner: Uuid,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let blocks = stats.blocks.clone();
    let lanes = Lanes::open(&conn, cfg.channels, blocks.clone(), cfg.confirm_timeout)
        .await
        .context("cannot open the replay channels")?;
    let mut s = Sender { pool: &pool, cfg: &cfg, stats: &stats, plan: &plan, lanes, blocks };
    // Items a previous sender could not confirm are sent again, in their order, this pass.
    match items::retry_unconfirmed(&pool, plan.id).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(plan_id = plan.id, items = n, "sending unconfirmed items again, same message ids"),
        Err(e) => tracing::warn!(plan_id = plan.id, error = %e, "cannot requeue unconfirmed items; next pass"),
    }
    let window = if plan.ordered { 1 } else { cfg.window };
    tracing::info!(
        plan_id = plan.id,
        total = plan.total,
        left = plan.left(),
        rate = plan.rate_per_sec,
        order = %plan.order().describe(),
        // What a crash of this instance could send twice.
        duplicate_bound = marks::duplicate_bound(window, &cfg),
        channels = s.lanes.len(),
        "sending replay plan"
    );
    let mut marks = marks::flusher(pool.clone(), plan.id, window, &cfg);
    let res = s.send_all(owner, &stop, &mut marks).await;
    // Whatever path ended the loop, no mark may outlive the lease: commit them first.
    marks::drain(&mut marks, plan.id, &stats).await;
    if let Err(e) = items::release(&pool, plan.id, owner).await {
        tracing::warn!(plan_id = plan.id, error = %e, "cannot release the plan's lease; it will expire");
    }
    s.lanes.close("replay stopping").await;
    res
}

impl Sender<'_> {
    /// The next batch of items after `after`, read beside the sending so the window never
    /// waits on PostgreSQL.
    fn read(&self, after: i64) -> Read {
        let (pool, plan_id, limit) = (self.pool.clone(), self.plan.id, self.cfg.batch.max(1));
        // A task of its own, so the query progresses while the loop is busy with confirms.
        let read = tokio::spawn(async move {
            let started = Instant::now();
            (items::next_pending(&pool, plan_id, after, limit).await, started.elapsed())
        });
        Box::pin(async move {
            read.await
                .unwrap_or_else(|e| (Err(sqlx::Error::Protocol(format!("the read task failed: {e}"))), Duration::ZERO))
        })
    }

    async fn send_all(&mut self, owner: Uuid, stop: &CancellationToken, marks: &mut Marks) -> anyhow::Result<()> {
        let plan_id = self.plan.id;
        let interval = self.plan.rate_per_sec.map(|r| Duration::from_secs_f64(1.0 / f64::from(r)));
        let full_window = if self.plan.ordered { 1 } else { self.cfg.window.max(1) };
        // After a confirm that did not come, one message at a time until one is acked: while
        // the broker does not answer, each further send would only be unconfirmed too (and
        // sent twice later).
        let mut doubtful = false;
        let limit = self.cfg.batch.max(1);
        let mut keys = self.keys().await?;
        // Messages parked behind their key's message in flight: reading ahead stops past this.
        let park_max = (limit as usize).saturating_mul(4);
        let mut in_flight: FuturesUnordered<BoxFuture<'static, Confirmed>> = FuturesUnordered::new();
        let mut buffer: VecDeque<Outgoing> = VecDeque::new();
        let mut reading: Option<Read> = None;
        let (mut cursor, mut exhausted, mut stopping) = (0i64, false, false);
        let mut next_slot = Instant::now();
        let mut next_read = Instant::now();
        let mut next_control = Instant::now() + self.cfg.control_every;
        let mut result = Ok(());
        let mut t = Timings::default();
        let started = Instant::now();
        loop {
            if stop.is_cancelled() {
                stopping = true;
            }
            let now = Instant::now();
            // While the broker blocks the connection nothing handed to it is written: send
            // nothing more and wait for the block to lift (no confirm timeout runs meanwhile).
            let blocked = self.blocks.is_blocked();
            let window = if doubtful { 1 } else { full_window };
            if !stopping && now >= next_control {
                next_control = now + self.cfg.control_every;
                stopping = !self.still_ours(owner).await;
            }
            if stopping {
                if in_flight.is_empty() {
                    break;
                }
            } else {
                // Read ahead: the next batch is fetched while this one is being sent.
                if reading.is_none()
                    && !exhausted
                    && (buffer.len() as i64) < limit
                    && keys.parked() < park_max
                    && now >= next_read
                {
                    reading = Some(self.read(cursor));
                }
                if !blocked
                    && marks.may_publish(in_flight.len(), window)
                    && (keys.has_ready() || !buffer.is_empty())
                    && now >= next_slot
                {
                    let item = match keys.next(&mut buffer) {
                        Some(Next::Send(item)) => item,
                        Some(Next::Hold(item, why)) => {
                            marks.push(Mark::Failed(item.dead_letter.id, why));
                            continue;
                        }
                        // Everything read waits behind its key's message in flight.
                        None => continue,
                    };
                    if let Some(i) = interval {
                        next_slot = next_slot.max(now) + i;
                    }
                    let id = item.dead_letter.id;
                    keys.sending(&item);
                    let publishing = Instant::now();
                    let published = self.publish(item, marks).await;
                    t.published += 1;
                    t.publish += publishing.elapsed();
                    match published {
                        Ok(Some(confirm)) => in_flight.push(confirm),
                        Ok(None) => {
                            hold(keys.settled(id, false), marks);
                            stopping |= self.plan.ordered;
                        }
                        Err(e) => {
                            result = Err(e);
                            stopping = true;
                        }
                    }
                    continue;
                }
                if buffer.is_empty() && keys.idle() && exhausted && reading.is_none() && in_flight.is_empty() {
                    // The plan is judged on committed marks only: flush them all first.
                    marks::drain(marks, plan_id, self.stats).await;
                    match items::finish(self.pool, plan_id, owner).await {
                        Ok(true) => {
                            tracing::info!(plan_id, "replay plan done");
                            break;
                        }
                        // Items still pending behind the cursor (a mark that did not commit) or
                        // unconfirmed: go round again; they are re-sent, at-least-once, under
                        // their same message ids.
                        Ok(false) if items::pending_left(self.pool, plan_id).await.unwrap_or(true) => {
                            if let Err(e) = items::retry_unconfirmed(self.pool, plan_id).await {
                                tracing::warn!(plan_id, error = %e, "cannot requeue unconfirmed items");
                            }
                            (cursor, exhausted) = (0, false);
                            continue;
                        }
                        Ok(false) => break,
                        Err(e) => tracing::warn!(plan_id, error = %e, "cannot mark the plan done; retrying"),
                    }
                }
            }
            marks.start(false);
            // Backpressure: no more than `mark_batch` confirmed items wait for their mark.
            let take_confirms = !in_flight.is_empty() && marks.has_room();
            let sending = !stopping
                && !blocked
                && (keys.has_ready() || !buffer.is_empty())
                && marks.may_publish(in_flight.len(), window);
            let mut wake_at = if sending { next_slot.min(next_control) } else { next_control };
            // Only when a read would start on waking: with the buffer full, an old `next_read`
            // would wake the loop at once, again and again (a busy loop that took a core).
            if !stopping && reading.is_none() && !exhausted && (buffer.len() as i64) < limit && keys.parked() < park_max
            {
                wake_at = wake_at.min(next_read);
            }
            if let Some(due) = marks.due_at() {
                wake_at = wake_at.min(due);
            }
            let waiting = Instant::now();
            let wake = tokio::select! {
                // Finished flushes and reads first: a steady stream of confirms must not hide them.
                biased;
                done = marks.flushed(), if marks.is_flushing() => Wake::Flushed(done),
                r = async {
                    match reading.as_mut() {
                        Some(read) => read.await,
                        None => std::future::pending().await,
                    }
                }, if reading.is_some() => Wake::Read(r),
                Some(done) = in_flight.next(), if take_confirms => Wake::Confirmed(done),
                _ = stop.cancelled(), if !stopping => Wake::Stop,
                _ = self.blocks.unblocked(), if blocked => Wake::Unblocked,
                _ = tokio::time::sleep_until(wake_at) => Wake::Timer,
            };
            let waited = waiting.elapsed();
            if !sending && !stopping {
                // Nothing could be sent: the window was full, or no item was read yet.
                if buffer.is_empty() { t.starved += waited } else { t.window_full += waited }
            }
            match wake {
                Wake::Confirmed(done) => match (done.0, self.settle(done, marks).await) {
                    (id, Ok(Settled::Sent)) => {
                        doubtful = false;
                        hold(keys.settled(id, true), marks);
                    }
                    // An ordered plan stops at its first failure; one ordered per key holds
                    // back that key's later messages.
                    (id, Ok(Settled::Failed)) => {
                        hold(keys.settled(id, false), marks);
                        stopping |= self.plan.ordered;
                    }
                    // Unordered: it is sent again on the next pass. Ordered (whole plan or
                    // per key): nothing after it may go first, so the sender stops and the
                    // plan is taken again after a reconnect, this item first.
                    (id, Ok(Settled::Unconfirmed)) => {
                        doubtful = true;
                        if self.plan.ordered || self.plan.order().keyed() {
                            result = Err(anyhow::anyhow!(
                                "no confirm for dead letter {id} of an ordered plan; sending it again after reconnecting"
                            ));
                            stopping = true;
                        } else {
                            hold(keys.settled(id, true), marks);
                        }
                    }
                    (_, Err(e)) => {
                        result = Err(e);
                        stopping = true;
                    }
                },
                Wake::Read((res, took)) => {
                    reading = None;
                    t.reads += 1;
                    t.read += took;
                    match res {
                        Ok(batch) => {
                            exhausted = (batch.len() as i64) < limit;
                            cursor = batch.last().map_or(cursor, |o| o.seq);
                            buffer.extend(batch);
                        }
                        Err(e) => {
                            tracing::warn!(plan_id, error = %e, "cannot read pending items; retrying");
                            next_read = Instant::now() + self.cfg.control_every;
                        }
                    }
                }
                Wake::Stop => stopping = true,
                Wake::Flushed(done) => marks::account(done, plan_id, self.stats),
                Wake::Timer | Wake::Unblocked => {}
            }
        }
        t.log(plan_id, started.elapsed(), marks);
        result
    }

    /// The per-key bookkeeping, with the keys earlier failures of this plan hold back.
    async fn keys(&self) -> anyhow::Result<Keys> {
        let label = match self.plan.order() {
            Order::Header(h) => format!("header `{h}`"),
            _ => "routing key".to_string(),
        };
        let held = if self.plan.order().keyed() {
            items::held_keys(self.pool, self.plan.id).await.context("cannot read the plan's held-back keys")?
        } else {
            Vec::new()
        };
        Ok(Keys::new(label, held))
    }

    /// Renews the lease; false when the plan was paused, cancelled, or taken over.
    async fn still_ours(&self, owner: Uuid) -> bool {
        let plan_id = self.plan.id;
        match items::renew(self.pool, plan_id, owner, self.cfg.lease).await {
            Ok(Some(PlanStatus::Running)) => {}
            Ok(Some(status)) => {
                tracing::info!(plan_id, %status, "replay plan no longer running; stopping");
                return false;
            }
            Ok(None) => {
                tracing::warn!(plan_id, "replay plan lease lost; another instance carries on");
                return false;
            }
            // The database may be back at the next check; the lease margin covers a few misses.
            Err(e) => tracing::warn!(plan_id, error = %e, "cannot renew the plan's lease"),
        }
        if self.plan.auto_pause_share.is_some() {
            match autopause::check(self.pool, plan_id).await {
                Ok(Some(_)) => {
                    ReplayStats::bump(&self.stats.auto_paused);
                    return false;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(plan_id, error = %e, "cannot evaluate auto-pause"),
            }
        }
        true
    }

    /// Publishes one item. `Ok(None)` when it failed without a publish (recorded), `Err`
    /// when the channel is unusable.
    async fn publish(
        &mut self,
        item: Outgoing,
        marks: &mut Marks,
    ) -> anyhow::Result<Option<BoxFuture<'static, Confirmed>>> {
        let dl = &item.dead_letter;
        let names = ShortString::try_new(item.exchange.as_str())
            .and_then(|e| ShortString::try_new(item.routing_key.as_str()).map(|k| (e, k)))
            .map_err(|_| "exchange or routing key longer than 255 bytes".to_string());
        let props = dl.properties().map_err(|e| format!("cannot rebuild the message's properties: {e}"));
        let (exchange, routing_key, props) = match (names, props) {
            (Ok((e, k)), Ok(p)) => (e, k, p),
            (Err(reason), _) | (_, Err(reason)) => {
                self.fail(marks, dl.id, reason).await;
                return Ok(None);
            }
        };
        let mut headers = props.headers().clone().unwrap_or_default();
        let replay_id = lineage::replay_id(item.plan_id, dl.id);
        headers.insert(REPLAY_ID_HEADER.into(), AMQPValue::LongString(LongString::from(replay_id.as_bytes())));
        let by = LongString::from(self.plan.created_by.as_bytes());
        headers.insert(REPLAYED_BY_HEADER.into(), AMQPValue::LongString(by));
        let props = props.with_headers(headers).with_delivery_mode(2);
        let confirm = match self.lanes.publish(None, exchange, routing_key, &dl.body, props, dl.id).await {
            Ok(Published::Sent(confirm)) => confirm,
            Ok(Published::NoExchange(id, reason)) => {
                self.fail(marks, id, reason).await;
                return Ok(None);
            }
            // The lanes are unusable: the publisher reconnects.
            Err(e) => return Err(e.into()),
        };
        tracing::debug!(
            plan_id = item.plan_id,
            dead_letter_id = dl.id,
            seq = item.seq,
            bytes = dl.body.len(),
            "replayed; awaiting confirm"
        );
        Ok(Some(confirm))
    }

    /// Records one confirm as a mark. `Err` when the channel is gone (its item is marked
    /// unconfirmed first).
    async fn settle(&self, (id, res, _): Confirmed, marks: &mut Marks) -> anyhow::Result<Settled> {
        match confirm::settle(res) {
            Outcome::Acked => {
                marks.push(Mark::Sent(id));
                Ok(Settled::Sent)
            }
            Outcome::Refused { reason, returned } => {
                if returned {
                    ReplayStats::bump(&self.stats.returned);
                }
                self.fail(marks, id, reason).await;
                Ok(Settled::Failed)
            }
            Outcome::Unknown { reason, channel_lost } => {
                ReplayStats::bump(&self.stats.unconfirmed);
                tracing::warn!(
                    plan_id = self.plan.id,
                    dead_letter_id = id,
                    reason,
                    "replay item unconfirmed; it stays out of triage and is sent again under the same message id"
                );
                marks.push(Mark::Unconfirmed(id, reason));
                if channel_lost {
                    anyhow::bail!("confirm lost: channel or connection closed");
                }
                Ok(Settled::Unconfirmed)
            }
        }
    }

    /// Queues the item's failed mark. An ordered plan then stops: every mark is committed
    /// (this one included) before the plan is paused, so the pause shows where it stood.
    async fn fail(&self, marks: &mut Marks, id: i64, reason: String) {
        let plan_id = self.plan.id;
        ReplayStats::bump(&self.stats.failed);
        tracing::warn!(plan_id, dead_letter_id = id, reason, "replay item failed; the dead letter awaits triage again");
        let why = format!("ordered replay stopped: dead letter {id} failed ({reason})");
        marks.push(Mark::Failed(id, reason));
        if self.plan.ordered {
            marks::drain(marks, plan_id, self.stats).await;
            if let Err(e) = autopause::pause_for(self.pool, plan_id, &why).await {
                tracing::warn!(plan_id, error = %e, "cannot pause the ordered plan");
            }
        }
    }
}

/// Marks each held-back message failed with its reason: its dead letter awaits triage again.
fn hold(held: Vec<(Outgoing, String)>, marks: &mut Marks) {
    for (item, why) in held {
        tracing::info!(plan_id = item.plan_id, dead_letter_id = item.dead_letter.id, why, "replay item held back");
        marks.push(Mark::Failed(item.dead_letter.id, why));
    }
}
