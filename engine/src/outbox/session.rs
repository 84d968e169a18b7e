//! One broker connection's worth of relay work: claim ahead, publish, settle confirms into
//! group-committed marks, drain.
//!
//! Policy: see `relay.rs`. This file holds the loop and the per-row decisions; the
//! relay around it owns reconnecting, the heartbeat and the LISTEN connection.

use std::{
    collections::VecDeque,
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, Instant},
};

use futures::{StreamExt, future::BoxFuture, stream::FuturesUnordered};
use lapin::Connection;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{
    backoff::Backoff,
    driver::Driver,
    marks::{self, Mark, Marks, duplicate_bound},
    message,
    poll::Poll,
    stats::RelayStats,
    store::{self, AttemptOutcome, ClaimedRow, FailedAttempt},
    waits::{Held, Waits},
};
use crate::{
    amqp::{
        blocked::BlockState,
        confirm::{self, Awaited, Outcome},
    },
    publish::{Confirm, Flushed, Lanes, PublishError, Published},
    settings::RelaySettings,
};

/// What a confirm future hands back: the row, the outcome, the time the confirm took.
struct Sent {
    id: i64,
    event_id: String,
    attempts: i32,
}
type Confirmed = (Sent, Awaited, Duration);

impl From<&ClaimedRow> for Sent {
    fn from(r: &ClaimedRow) -> Self {
        Self { id: r.id, event_id: r.event_id.clone(), attempts: r.attempts }
    }
}

/// A row taken from the buffer: published (its confirm to await), or refused before any
/// publish (its failed attempt to mark).
enum Outgoing {
    Sent(Confirm<Sent>),
    Refused(Mark),
}

async fn notified(l: &mut Option<PgListener>) -> Result<(), sqlx::Error> {
    match l {
        Some(l) => l.recv().await.map(|_| ()),
        None => std::future::pending().await,
    }
}

// Built and matched within one loop turn, on the stack: boxing the confirm would allocate
// once per message on the hot path.
#[allow(clippy::large_enum_variant)]
enum Wake {
    Shutdown,
    Confirmed(Confirmed),
    Flushed(Flushed<Mark, (u64, Vec<(i64, AttemptOutcome)>)>),
    MarksDue,
    Claimed(Result<Vec<ClaimedRow>, store::StoreError>),
    Notified(Result<(), sqlx::Error>),
    Poll,
    Unblocked,
}

type Claim = BoxFuture<'static, Result<Vec<ClaimedRow>, store::StoreError>>;

/// One broker connection's worth of work.
pub(super) struct Session<'a, D> {
    table: &'a Arc<D>,
    cfg: &'a RelaySettings,
    stats: &'a RelayStats,
    owner: Uuid,
    /// The confirm channels; a routing key always takes the same one, so its rows keep order.
    lanes: Lanes<'a>,
    /// Whether the broker blocks this connection; confirm timeouts stop while it does.
    blocks: Arc<BlockState>,
    backoff: Backoff,
}

impl<'a, D: Driver> Session<'a, D> {
    pub(super) async fn open(
        table: &'a Arc<D>,
        conn: &'a Connection,
        cfg: &'a RelaySettings,
        stats: &'a RelayStats,
        owner: Uuid,
    ) -> anyhow::Result<Self> {
        let blocks = stats.blocks.clone();
        let lanes = Lanes::open(conn, cfg.channels, blocks.clone(), cfg.confirm_timeout).await?;
        stats.connected.store(true, Relaxed);
        let backoff = Backoff::new(cfg.backoff_base, cfg.backoff_max);
        Ok(Self { table, cfg, stats, owner, lanes, blocks, backoff })
    }

    /// The next claim, run beside the publishing so the window never waits on it.
    fn claim(&self) -> Claim {
        let (table, owner, batch, lease) = (self.table.clone(), self.owner, self.cfg.batch, self.cfg.lease);
        // A task of its own, so the claim progresses while the session is busy publishing.
        let task = tokio::spawn(async move { table.claim(owner, batch, lease).await });
        Box::pin(async move {
            task.await.unwrap_or_else(|e| Err(store::StoreError::Invalid(format!("the claim task failed: {e}"))))
        })
    }

    /// Takes a claim's rows into the buffer; returns whether the table looks drained.
    fn claimed(
        &self,
        res: Result<Vec<ClaimedRow>, store::StoreError>,
        buffer: &mut VecDeque<(ClaimedRow, Instant)>,
    ) -> bool {
        match res {
            Ok(rows) => {
                let idle = (rows.len() as i64) < self.cfg.batch;
                // Keep a confirm timeout of margin so no row is sent after its lease ran out.
                let margin = self.cfg.lease.checked_sub(self.cfg.confirm_timeout).unwrap_or(self.cfg.lease / 2);
                // A mapped table's rows are ours while the lock is: no lease runs out.
                let margin = if self.table.leased() { margin } else { Duration::from_secs(86_400) };
                let deadline = Instant::now() + margin;
                buffer.extend(rows.into_iter().map(|r| (r, deadline)));
                idle
            }
            Err(e) => {
                tracing::warn!(error = %e, "claim failed; retrying at the next poll");
                true
            }
        }
    }

    pub(super) async fn run(
        &mut self,
        listener: &mut Option<PgListener>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<()> {
        // Claimed rows not yet sent, each with the instant after which it must not be sent.
        let mut buffer: VecDeque<(ClaimedRow, Instant)> = VecDeque::new();
        let mut in_flight: FuturesUnordered<BoxFuture<'static, Confirmed>> = FuturesUnordered::new();
        let mut marks = marks::flusher(self.table.clone(), self.owner, self.cfg);
        let mut claiming: Option<Claim> = None;
        // Published but not durably marked, at most: what a kill -9 could re-send.
        let bound = duplicate_bound(self.cfg);
        // True when the last claim found fewer rows than asked: wait for the adaptive poll (or
        // the NOTIFY of a console retry).
        let mut idle = false;
        let mut poll = Poll::new(self.cfg.poll_min, self.cfg.poll);
        let mut next_poll = tokio::time::Instant::now();
        let (started, mut waits) = (Instant::now(), Waits::default());
        // Set while blocked, until the publishes in flight then have settled and their marks
        // committed: their leases may have run out during the block, and a claim meanwhile
        // would take them again.
        let mut after_block = false;
        let mut doubtful = false;
        let result = loop {
            if shutdown.is_cancelled() {
                break Ok(());
            }
            let mut broken = None;
            let publishing = Instant::now();
            // While the broker blocks the connection nothing it is handed is written: publish
            // and claim nothing more, and wait for the block to lift (no timeout runs meanwhile).
            let blocked = self.blocks.is_blocked();
            after_block = blocked || (after_block && (!in_flight.is_empty() || marks.unflushed() > 0));
            // After a confirm that did not come, one publish at a time until one is acked.
            let window = if doubtful { 1 } else { self.cfg.window };
            while !blocked && marks.may_publish(in_flight.len(), window) {
                let Some((row, deadline)) = buffer.pop_front() else {
                    break;
                };
                match self.publish(row, deadline).await {
                    Ok(Some(Outgoing::Sent(confirm))) => in_flight.push(confirm),
                    Ok(Some(Outgoing::Refused(mark))) => self.push(&mut marks, mark),
                    Ok(None) => {}
                    Err(e) => {
                        broken = Some(e);
                        break;
                    }
                }
            }
            waits.publishing += publishing.elapsed();
            self.stats.in_flight.store(in_flight.len() as u64, Relaxed);
            if let Some(e) = broken {
                break Err(e);
            }
            // Claim ahead: the next batch is read while this one is still being sent.
            if claiming.is_none() && !idle && !after_block && (buffer.len() as i64) < self.cfg.batch {
                claiming = Some(self.claim());
                waits.claims += 1;
            }
            marks.start(false);
            let take_confirms = !in_flight.is_empty() && marks.has_room();
            let marks_due = marks.due_at();
            let far = tokio::time::Instant::now() + Duration::from_secs(3600);
            let held = Held::of(
                in_flight.len() >= self.cfg.window,
                (!in_flight.is_empty() && !take_confirms) || in_flight.len() + marks.unflushed() >= bound,
                buffer.is_empty(),
                claiming.is_some(),
            );
            let waiting = Instant::now();
            let wake = tokio::select! {
                _ = shutdown.cancelled() => Wake::Shutdown,
                Some(done) = in_flight.next(), if take_confirms => Wake::Confirmed(done),
                done = marks.flushed() => Wake::Flushed(done),
                _ = tokio::time::sleep_until(marks_due.unwrap_or(far)), if marks_due.is_some() => Wake::MarksDue,
                r = async {
                    match claiming.as_mut() {
                        Some(claim) => claim.await,
                        None => std::future::pending().await,
                    }
                }, if claiming.is_some() => Wake::Claimed(r),
                r = notified(listener), if idle && !blocked => Wake::Notified(r),
                _ = self.table.arrived(), if idle && !blocked => Wake::Notified(Ok(())),
                _ = tokio::time::sleep_until(next_poll), if idle && !blocked => Wake::Poll,
                _ = self.blocks.unblocked(), if blocked => Wake::Unblocked,
            };
            waits.waited(held, waiting);
            match wake {
                Wake::Shutdown => break Ok(()),
                Wake::Confirmed(done) => {
                    self.stats.in_flight.store(in_flight.len() as u64, Relaxed);
                    match self.settle(done).await {
                        Ok(Some(mark)) => {
                            doubtful &= !matches!(mark, Mark::Published { .. });
                            self.push(&mut marks, mark);
                        }
                        Ok(None) => doubtful = true,
                        Err(e) => break Err(e),
                    }
                }
                Wake::Flushed(done) => self.account(done, &marks),
                Wake::MarksDue | Wake::Unblocked => {}
                Wake::Claimed(res) => {
                    claiming = None;
                    // A mapped table's claims run on its lock connection: a failed claim means
                    // the lock may be gone, and only the lock holder may publish the table.
                    if let Err(e) = &res
                        && !self.table.leased()
                    {
                        break Err(anyhow::anyhow!("claim failed; the table's relay lock may be lost: {e}"));
                    }
                    // Rows found, even fewer than asked: more are likely coming, look again soon.
                    if matches!(&res, Ok(rows) if !rows.is_empty()) {
                        poll.busy();
                    }
                    idle = self.claimed(res, &mut buffer);
                    if idle {
                        next_poll = tokio::time::Instant::now() + poll.idle();
                    }
                }
                Wake::Notified(Ok(())) => {
                    idle = false;
                    poll.busy();
                }
                Wake::Notified(Err(e)) => {
                    tracing::warn!(error = %e, "LISTEN connection lost; polling until it is back");
                    *listener = None;
                    idle = false;
                }
                Wake::Poll => {
                    // An idle relay would otherwise notice a dead connection only at its next
                    // publish, and report itself connected until then.
                    if !self.lanes.connected() {
                        break Err(anyhow::anyhow!("publishing channel closed while idle"));
                    }
                    if listener.is_none() {
                        *listener = self.table.listen().await;
                    }
                    idle = false;
                }
            }
        };
        // A claim in flight still leases its rows: take them, to give them back below.
        if let Some(claim) = claiming.take() {
            self.claimed(claim.await, &mut buffer);
        }
        // Confirms already asked for: wait for them (bounded by the confirm timeout each, of
        // unblocked time), so a clean stop re-sends nothing. On a dead channel they resolve at
        // once with an error. A stop during a block gives up on them: their rows stay leased.
        if shutdown.is_cancelled() && self.blocks.is_blocked() {
            in_flight.clear();
        }
        while let Some(done) = in_flight.next().await {
            match self.settle(done).await {
                Ok(Some(mark)) => {
                    self.push(&mut marks, mark);
                    marks.start(false);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = %format!("{e:#}"), "confirm lost while draining; the lease will expire")
                }
            }
        }
        marks.drain(|done| marks::account(done, self.stats)).await;
        self.stats.unflushed_marks.store(0, Relaxed);
        waits.log(started.elapsed());
        self.stats.in_flight.store(0, Relaxed);
        let ids: Vec<i64> = buffer.iter().map(|(r, _)| r.id).collect();
        if let Err(e) = self.table.release(self.owner, &ids).await {
            tracing::warn!(error = %e, rows = ids.len(), "cannot release leases; they will expire instead");
        }
        self.lanes.close("relay stopping").await;
        result
    }

    /// Sends one row. `Ok(None)` when the row was dealt with without a publish (bad row,
    /// lease too old); `Err` when the channel is unusable.
    async fn publish(&mut self, row: ClaimedRow, deadline: Instant) -> anyhow::Result<Option<Outgoing>> {
        if Instant::now() >= deadline {
            // Another relay may already own it; sending now could double it for nothing.
            if let Err(e) = self.table.release(self.owner, &[row.id]).await {
                tracing::warn!(id = row.id, error = %e, "cannot release a stale lease");
            }
            return Ok(None);
        }
        let prepared = match message::prepare(&row) {
            Ok(p) => p,
            Err(reason) => {
                let reason = format!("bad row: {reason}");
                self.table.refused(row.id);
                tracing::warn!(id = row.id, event_id = %row.event_id, %reason, "outbox row cannot be published as it stands");
                RelayStats::bump(&self.stats.failed_attempts);
                match self.table.mark_bad(row.id, self.owner, &reason).await {
                    Ok(AttemptOutcome::Failed) => RelayStats::bump(&self.stats.failed_final),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(id = row.id, error = %e, "cannot mark a bad row failed")
                    }
                }
                return Ok(None);
            }
        };
        let table = self.table.clone();
        let key = table.lane_key(&row);
        let (exchange, routing_key, props) = (prepared.exchange, prepared.routing_key, prepared.properties);
        match self.lanes.publish(Some(&key), exchange, routing_key, &row.payload, props, Sent::from(&row)).await {
            Ok(Published::Sent(confirm)) => {
                tracing::debug!(id = row.id, event_id = %row.event_id, bytes = row.payload.len(), "published; awaiting confirm");
                Ok(Some(Outgoing::Sent(confirm)))
            }
            Ok(Published::NoExchange(sent, reason)) => Ok(Some(Outgoing::Refused(self.failed_attempt(&sent, reason)))),
            // Refused before anything was sent (the channel is closed): give the row back now
            // rather than make it wait for its lease to expire.
            Err(e @ PublishError::Lost(_)) => {
                if let Err(re) = self.table.release(self.owner, &[row.id]).await {
                    tracing::warn!(id = row.id, error = %re, "cannot release the lease; it will expire");
                }
                Err(e.into())
            }
            // It may be half-sent: keep the lease, so a re-send waits for it to expire.
            Err(e @ PublishError::Stuck) => Err(e.into()),
        }
    }

    fn push(&self, marks: &mut Marks<D>, mark: Mark) {
        marks.push(mark);
        self.stats.unflushed_marks.store(marks.unflushed() as u64, Relaxed);
    }

    fn account(&self, done: Flushed<Mark, (u64, Vec<(i64, AttemptOutcome)>)>, marks: &Marks<D>) {
        marks::account(done, self.stats);
        self.stats.unflushed_marks.store(marks.unflushed() as u64, Relaxed);
    }

    /// Turns one confirm into the mark to write: none when the outcome is unknown (not an
    /// attempt: a native row keeps its lease and is re-sent when it ends, as after a crash; a
    /// mapped row, which has no lease, is given back to be claimed and sent again). `Err` only
    /// when the channel is gone.
    async fn settle(&self, (sent, res, latency): Confirmed) -> anyhow::Result<Option<Mark>> {
        match confirm::settle(res) {
            Outcome::Acked => {
                self.stats.observe_confirm_latency(latency);
                Ok(Some(Mark::Published { id: sent.id }))
            }
            Outcome::Refused { reason, returned } => {
                if returned {
                    RelayStats::bump(&self.stats.returned);
                }
                Ok(Some(self.failed_attempt(&sent, reason)))
            }
            Outcome::Unknown { reason, channel_lost } => {
                RelayStats::bump(&self.stats.unconfirmed);
                tracing::warn!(id = sent.id, event_id = %sent.event_id, reason,
                    "publish unconfirmed; the row is sent again (a native row when its lease ends)");
                if !self.table.leased()
                    && let Err(e) = self.table.release(self.owner, &[sent.id]).await
                {
                    tracing::warn!(id = sent.id, error = %e, "cannot give the row back");
                }
                if channel_lost {
                    anyhow::bail!("confirm lost: channel or connection closed");
                }
                Ok(None)
            }
        }
    }

    fn failed_attempt(&self, sent: &Sent, reason: String) -> Mark {
        self.table.refused(sent.id);
        RelayStats::bump(&self.stats.failed_attempts);
        let number = u32::try_from(sent.attempts).unwrap_or(0).saturating_add(1);
        let attempt = FailedAttempt { id: sent.id, reason, retry_in: self.backoff.delay(number) };
        Mark::Failed { attempt, event_id: sent.event_id.clone(), number }
    }
}
