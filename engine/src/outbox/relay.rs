//! The outbox relay: leases due rows, publishes them with confirms, marks each after its own.
//!
//! Policy:
//! - up to `window` publishes await their confirm at once; a row is marked published the
//!   moment its own confirm arrives, never in a batch at the end, so a crash re-sends at
//!   most `window` events (plus marks not yet committed) and never loses one;
//! - `Ack` with a returned message (unroutable under `mandatory`), `Nack`, and no confirm
//!   within `confirm_timeout` are failed attempts, recorded with the broker's reason;
//! - no database transaction is ever open while the broker is awaited: the lease is what
//!   keeps a row ours, and a row is not published once its lease is too close to expiry;
//! - a missing exchange is checked with a passive declare on a side channel, because
//!   publishing to it would close the publishing channel and every confirm in flight;
//! - a lost broker connection ends the session: rows whose confirm never came keep their
//!   lease (they may have reached the broker) and are re-sent when it expires; rows not yet
//!   sent are released at once; the relay reconnects with backoff and carries on;
//! - on shutdown it stops claiming, waits for the confirms in flight, releases the rest.

use std::{
    collections::{HashSet, VecDeque},
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::{StreamExt, future::BoxFuture, stream::FuturesUnordered};
use lapin::{
    Channel, Confirmation, Connection, ExchangeKind,
    options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions},
    protocol::{AMQPErrorKind, AMQPSoftError},
    types::{FieldTable, ShortString},
};
use sqlx::{PgPool, postgres::PgListener};
use tokio::time::{MissedTickBehavior, error::Elapsed};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use super::stats::RelayStats;
use super::{
    backoff::Backoff,
    message,
    store::{self, AttemptOutcome, ClaimedRow},
};
use crate::settings::RelaySettings;

/// The channel the `outbox` insert trigger notifies.
pub const NOTIFY_CHANNEL: &str = "revenant_outbox";
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// What a confirm future hands back: the row, the outcome, the time the confirm took.
struct Sent {
    id: i64,
    event_id: Uuid,
    attempts: i32,
}
type Confirmed = (Sent, Result<lapin::Result<Confirmation>, Elapsed>, Duration);

/// Runs the relay until `shutdown` is cancelled. Broker and database outages are logged and
/// retried, not returned: the relay is meant to outlive them.
pub async fn run(
    pool: PgPool,
    amqp_url: String,
    cfg: RelaySettings,
    stats: Arc<RelayStats>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let owner = Uuid::now_v7();
    if cfg.lease <= cfg.confirm_timeout {
        tracing::warn!(
            lease_ms = cfg.lease.as_millis() as u64,
            confirm_timeout_ms = cfg.confirm_timeout.as_millis() as u64,
            "relay.lease_secs should exceed relay.confirm_timeout_ms, or rows are re-sent while their confirm is awaited"
        );
    }
    tracing::info!(instance = %owner, window = cfg.window, batch = cfg.batch, "relay starting");
    let hb_stop = CancellationToken::new();
    let hb = tokio::spawn(heartbeat_loop(
        pool.clone(),
        owner,
        cfg.window,
        stats.clone(),
        hb_stop.clone(),
    ));
    let mut listener = listen(&pool).await;
    let reconnect = Backoff::new(Duration::from_millis(250), Duration::from_secs(30));
    let mut failures = 0u32;
    while !shutdown.is_cancelled() {
        let started = Instant::now();
        let outcome = match crate::amqp::connect(&amqp_url, "revenant-relay").await {
            Ok(conn) => {
                let res = match Session::open(&pool, &conn, &cfg, &stats, owner).await {
                    Ok(mut s) => s.run(&mut listener, &shutdown).await,
                    Err(e) => Err(e),
                };
                stats.connected.store(false, Relaxed);
                let _ = tokio::time::timeout(
                    Duration::from_secs(2),
                    conn.close(200, "relay stopping".into()),
                )
                .await;
                res
            }
            Err(e) => Err(e),
        };
        let Err(e) = outcome else { break };
        // A session that ran a while was healthy; start the backoff over.
        if started.elapsed() > Duration::from_secs(60) {
            failures = 0;
        }
        failures = failures.saturating_add(1);
        let wait = reconnect.delay(failures).max(Duration::from_millis(100));
        tracing::warn!(instance = %owner, error = %format!("{e:#}"), retry_in_ms = wait.as_millis() as u64, "relay lost the broker; reconnecting");
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
    }
    hb_stop.cancel();
    let _ = hb.await;
    tracing::info!(instance = %owner, "relay stopped");
    Ok(())
}

async fn listen(pool: &PgPool) -> Option<PgListener> {
    let res = async {
        let mut l = PgListener::connect_with(pool).await?;
        l.listen(NOTIFY_CHANNEL).await?;
        Ok::<_, sqlx::Error>(l)
    }
    .await;
    match res {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(error = %e, "cannot LISTEN {NOTIFY_CHANNEL}; polling only until it works");
            None
        }
    }
}

async fn notified(l: &mut Option<PgListener>) -> Result<(), sqlx::Error> {
    match l {
        Some(l) => l.recv().await.map(|_| ()),
        None => std::future::pending().await,
    }
}

enum Wake {
    Shutdown,
    Confirmed(Confirmed),
    Notified(Result<(), sqlx::Error>),
    Poll,
}

/// One broker connection's worth of work.
struct Session<'a> {
    pool: &'a PgPool,
    conn: &'a Connection,
    cfg: &'a RelaySettings,
    stats: &'a RelayStats,
    owner: Uuid,
    channel: Channel,
    /// Passive declares fail by closing their channel, so they get one of their own.
    probe: Option<Channel>,
    known_exchanges: HashSet<String>,
    backoff: Backoff,
}

impl<'a> Session<'a> {
    async fn open(
        pool: &'a PgPool,
        conn: &'a Connection,
        cfg: &'a RelaySettings,
        stats: &'a RelayStats,
        owner: Uuid,
    ) -> anyhow::Result<Self> {
        let channel = conn
            .create_channel()
            .await
            .context("cannot open a publishing channel")?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .context("cannot enable publisher confirms")?;
        stats.connected.store(true, Relaxed);
        let backoff = Backoff::new(cfg.backoff_base, cfg.backoff_max);
        Ok(Self {
            pool,
            conn,
            cfg,
            stats,
            owner,
            channel,
            probe: None,
            known_exchanges: HashSet::new(),
            backoff,
        })
    }

    async fn run(
        &mut self,
        listener: &mut Option<PgListener>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<()> {
        // Claimed rows not yet sent, each with the instant after which it must not be sent.
        let mut buffer: VecDeque<(ClaimedRow, Instant)> = VecDeque::new();
        let mut in_flight: FuturesUnordered<BoxFuture<'static, Confirmed>> =
            FuturesUnordered::new();
        // True when the last claim found fewer rows than asked: wait for a NOTIFY or the poll.
        let mut idle = false;
        let mut poll = tokio::time::interval(self.cfg.poll);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let result = loop {
            if shutdown.is_cancelled() {
                break Ok(());
            }
            let mut broken = None;
            while in_flight.len() < self.cfg.window {
                let Some((row, deadline)) = buffer.pop_front() else {
                    break;
                };
                match self.publish(row, deadline).await {
                    Ok(Some(confirm)) => in_flight.push(confirm),
                    Ok(None) => {}
                    Err(e) => {
                        broken = Some(e);
                        break;
                    }
                }
            }
            self.stats.in_flight.store(in_flight.len() as u64, Relaxed);
            if let Some(e) = broken {
                break Err(e);
            }
            if buffer.is_empty() && in_flight.len() < self.cfg.window && !idle {
                match store::claim(self.pool, self.owner, self.cfg.batch, self.cfg.lease).await {
                    Ok(rows) => {
                        idle = (rows.len() as i64) < self.cfg.batch;
                        // Keep a confirm timeout of margin so no row is sent after its lease ran out.
                        let margin = self
                            .cfg
                            .lease
                            .checked_sub(self.cfg.confirm_timeout)
                            .unwrap_or(self.cfg.lease / 2);
                        let deadline = Instant::now() + margin;
                        buffer.extend(rows.into_iter().map(|r| (r, deadline)));
                        if !buffer.is_empty() {
                            continue;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "claim failed; retrying at the next poll");
                        idle = true;
                    }
                }
            }
            let wake = tokio::select! {
                _ = shutdown.cancelled() => Wake::Shutdown,
                Some(done) = in_flight.next(), if !in_flight.is_empty() => Wake::Confirmed(done),
                r = notified(listener), if idle => Wake::Notified(r),
                _ = poll.tick(), if idle => Wake::Poll,
            };
            match wake {
                Wake::Shutdown => break Ok(()),
                Wake::Confirmed(done) => {
                    self.stats.in_flight.store(in_flight.len() as u64, Relaxed);
                    if let Err(e) = self.settle(done).await {
                        break Err(e);
                    }
                }
                Wake::Notified(Ok(())) => idle = false,
                Wake::Notified(Err(e)) => {
                    tracing::warn!(error = %e, "LISTEN connection lost; polling until it is back");
                    *listener = None;
                    idle = false;
                }
                Wake::Poll => {
                    if listener.is_none() {
                        *listener = listen(self.pool).await;
                    }
                    idle = false;
                }
            }
        };
        // Confirms already asked for: wait for them (bounded by the confirm timeout each), so
        // a clean stop re-sends nothing. On a dead channel they resolve at once with an error.
        while let Some(done) = futures::future::OptionFuture::from(None::<futures::future::Ready<Confirmed>>).await {
            if let Err(e) = self.settle(done).await {
                tracing::debug!(error = %format!("{e:#}"), "confirm lost while draining; the lease will expire");
            }
        }
        self.stats.in_flight.store(0, Relaxed);
        let ids: Vec<i64> = buffer.iter().map(|(r, _)| r.id).collect();
        if let Err(e) = store::release(self.pool, self.owner, &ids).await {
            tracing::warn!(error = %e, rows = ids.len(), "cannot release leases; they will expire instead");
        }
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            self.channel.close(200, "relay stopping".into()),
        )
        .await;
        result
    }

    /// Sends one row. `Ok(None)` when the row was dealt with without a publish (bad row,
    /// missing exchange, lease too old); `Err` when the channel is unusable.
    async fn publish(
        &mut self,
        row: ClaimedRow,
        deadline: Instant,
    ) -> anyhow::Result<Option<BoxFuture<'static, Confirmed>>> {
        if Instant::now() >= deadline {
            // Another relay may already own it; sending now could double it for nothing.
            if let Err(e) = store::release(self.pool, self.owner, &[row.id]).await {
                tracing::warn!(id = row.id, error = %e, "cannot release a stale lease");
            }
            return Ok(None);
        }
        let prepared = match message::prepare(&row) {
            Ok(p) => p,
            Err(reason) => {
                let reason = format!("bad row: {reason}");
                tracing::warn!(id = row.id, event_id = %row.event_id, %reason, "outbox row cannot be published as it stands");
                RelayStats::bump(&self.stats.failed_attempts);
                match store::mark_bad(self.pool, row.id, self.owner, &reason).await {
                    Ok(AttemptOutcome::Failed) => RelayStats::bump(&self.stats.failed_final),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(id = row.id, error = %e, "cannot mark a bad row failed")
                    }
                }
                return Ok(None);
            }
        };
        if !self.exchange_exists(&prepared.exchange).await? {
            let reason = format!("exchange `{}` does not exist (NOT_FOUND)", row.exchange);
            self.fail(row.id, row.event_id, row.attempts, &reason).await;
            return Ok(None);
        }
        let options = BasicPublishOptions {
            mandatory: true,
            immediate: false,
        };
        let publish = self.channel.basic_publish(
            prepared.exchange,
            prepared.routing_key,
            options,
            &row.payload,
            prepared.properties,
        );
        let confirm = tokio::time::timeout(self.cfg.confirm_timeout, publish)
            .await
            .context("the client did not take the publish within the confirm timeout")?
            .context("publish failed: channel or connection lost")?;
        tracing::debug!(id = row.id, event_id = %row.event_id, bytes = row.payload.len(), "published; awaiting confirm");
        let sent = Sent {
            id: row.id,
            event_id: row.event_id,
            attempts: row.attempts,
        };
        let timeout = self.cfg.confirm_timeout;
        let started = Instant::now();
        Ok(Some(Box::pin(async move {
            let res = tokio::time::timeout(timeout, confirm).await;
            (sent, res, started.elapsed())
        })))
    }

    async fn exchange_exists(&mut self, name: &ShortString) -> anyhow::Result<bool> {
        if name.as_str().is_empty() || self.known_exchanges.contains(name.as_str()) {
            return Ok(true);
        }
        let probe = match &self.probe {
            Some(c) if c.status().connected() => c.clone(),
            _ => {
                let c = self
                    .conn
                    .create_channel()
                    .await
                    .context("cannot open a probe channel")?;
                self.probe = Some(c.clone());
                c
            }
        };
        let opts = ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        };
        match probe
            .exchange_declare(
                name.clone(),
                ExchangeKind::Direct,
                opts,
                FieldTable::default(),
            )
            .await
        {
            Ok(()) => {
                self.known_exchanges.insert(name.to_string());
                Ok(true)
            }
            Err(e) if is_not_found(&e) => {
                self.probe = None;
                Ok(false)
            }
            Err(e) => Err(anyhow::Error::new(e).context("passive exchange check failed")),
        }
    }

    /// Records the outcome of one confirm. `Err` only when the channel is gone.
    async fn settle(&self, (sent, res, latency): Confirmed) -> anyhow::Result<()> {
        let reason = match res {
            Ok(Ok(Confirmation::Ack(None))) => {
                self.stats.observe_confirm_latency(latency);
                match store::mark_published(self.pool, sent.id).await {
                    Ok(true) => RelayStats::bump(&self.stats.published),
                    Ok(false) => {
                        tracing::info!(id = sent.id, event_id = %sent.event_id, "confirmed, but the row was archived meanwhile")
                    }
                    Err(e) => tracing::warn!(id = sent.id, event_id = %sent.event_id, error = %e,
                        "confirmed but not marked; it will be sent again when the lease expires"),
                }
                return Ok(());
            }
            Ok(Ok(Confirmation::Ack(Some(ret)))) => {
                RelayStats::bump(&self.stats.returned);
                format!(
                    "returned by the broker: {} {}",
                    ret.reply_code, ret.reply_text
                )
            }
            Ok(Ok(Confirmation::Nack(Some(ret)))) => format!(
                "nacked by the broker (returned: {} {})",
                ret.reply_code, ret.reply_text
            ),
            Ok(Ok(Confirmation::Nack(None))) => "nacked by the broker".to_string(),
            Ok(Ok(Confirmation::NotRequested)) => {
                "no confirm: confirms are not enabled on the channel".to_string()
            }
            // The confirm may or may not have been given: leave the lease to expire.
            Ok(Err(e)) => {
                return Err(
                    anyhow::Error::new(e).context("confirm lost: channel or connection closed")
                );
            }
            Err(_) => format!(
                "no confirm within {} ms",
                self.cfg.confirm_timeout.as_millis()
            ),
        };
        self.fail(sent.id, sent.event_id, sent.attempts, &reason)
            .await;
        Ok(())
    }

    async fn fail(&self, id: i64, event_id: Uuid, attempts_before: i32, reason: &str) {
        RelayStats::bump(&self.stats.failed_attempts);
        let attempt = u32::try_from(attempts_before)
            .unwrap_or(0)
            .saturating_add(1);
        let retry_in = self.backoff.delay(attempt);
        match store::mark_attempt_failed(
            self.pool,
            id,
            self.owner,
            reason,
            self.cfg.max_attempts,
            retry_in,
        )
        .await
        {
            Ok(AttemptOutcome::Failed) => {
                RelayStats::bump(&self.stats.failed_final);
                tracing::warn!(id, %event_id, attempt, reason, "outbox row failed for good");
            }
            Ok(AttemptOutcome::Retry) => {
                tracing::info!(id, %event_id, attempt, reason, retry_in_ms = retry_in.as_millis() as u64, "publish attempt failed; will retry")
            }
            Ok(AttemptOutcome::NotOwned) => {
                tracing::debug!(id, %event_id, "attempt failed on a row no longer ours")
            }
            Err(e) => {
                tracing::warn!(id, %event_id, error = %e, "cannot record a failed attempt; the lease will expire")
            }
        }
    }
}

fn is_not_found(e: &lapin::Error) -> bool {
    matches!(e.kind(), lapin::ErrorKind::ProtocolError(err) if matches!(err.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

/// Upserts this relay's `heartbeats` row every few seconds, and once more when stopping.
async fn heartbeat_loop(
    pool: PgPool,
    owner: Uuid,
    window: usize,
    stats: Arc<RelayStats>,
    stop: CancellationToken,
) {
    let host = hostname();
    loop {
        let stopping = stop.is_cancelled();
        let detail = serde_json::json!({
            "window": window,
            "published": stats.published.load(Relaxed),
            "failed": stats.failed_final.load(Relaxed),
            "failed_attempts": stats.failed_attempts.load(Relaxed),
            "returned": stats.returned.load(Relaxed),
            "in_flight": stats.in_flight.load(Relaxed),
            "connected": stats.connected.load(Relaxed),
            "stopped": stopping,
        });
        let res = sqlx::query(
            "INSERT INTO heartbeats (role, instance, host, detail) VALUES ('relay', $1, $2, $3)
             ON CONFLICT (role, instance) DO UPDATE SET last_seen = now(), host = EXCLUDED.host, detail = EXCLUDED.detail",
        )
        .bind(owner)
        .bind(&host)
        .bind(detail)
        .execute(&pool)
        .await;
        if let Err(e) = res {
            tracing::warn!(error = %e, "cannot write the relay heartbeat");
        }
        if stopping {
            break;
        }
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(HEARTBEAT_EVERY) => {}
        }
    }
}
