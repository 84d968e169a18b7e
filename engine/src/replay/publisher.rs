//! The replay publisher role: takes due plans and sends them, several instances at once.
//!
//! Policy:
//! - a plan is sent only under a lease (`lease_owner`, `lease_expires_at`) renewed while
//!   sending, so two instances never send one plan at once; a crashed instance's plans are
//!   taken over when its lease expires and their unmarked items re-sent (at-least-once);
//! - due means `start_at <= now()` and scheduled or running; taking a scheduled plan makes it
//!   running; a paused or cancelled plan is noticed at the next lease renewal and left;
//! - each plan has its own confirm channels (`channels`, the shared pipeline of
//!   [`crate::publish`]) on one shared connection, up to
//!   `max_plans` at once, so a slow plan (1 message/s) does not hold the others back;
//! - no database transaction is open while the broker is awaited;
//! - items are marked after their confirms in groups (see [`super::marks`]): one statement per
//!   `mark_batch` confirms or per `mark_flush`, whichever comes first. A crash re-sends at most
//!   the plan's window plus its unflushed marks (`window + mark_batch`; an ordered plan
//!   `1 + mark_batch`); window 1 with `mark_batch` 1 is the strict mode. Live progress (the
//!   plan's counters) lags the broker by at most one flush;
//! - a lost connection stops every plan's sender (their leases are released) and the
//!   publisher reconnects with backoff.

use std::{
    collections::HashSet,
    sync::{Arc, atomic::Ordering::Relaxed},
    time::Instant,
};

use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{items, sender, stats::ReplayStats};

pub use super::config::PublisherConfig;

/// Runs the publisher with the default configuration until `shutdown` is cancelled.
pub async fn run(
    pool: PgPool,
    amqp_url: String,
    stats: Arc<ReplayStats>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run_with(pool, amqp_url, PublisherConfig::default(), stats, shutdown).await
}

/// Runs the publisher until `shutdown` is cancelled. Broker and database outages are logged
/// and retried, not returned.
pub async fn run_with(
    pool: PgPool,
    amqp_url: String,
    cfg: PublisherConfig,
    stats: Arc<ReplayStats>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let owner = Uuid::now_v7();
    tracing::info!(
        instance = %owner,
        window = cfg.window,
        mark_batch = cfg.mark_batch,
        mark_flush_ms = cfg.mark_flush.as_millis() as u64,
        max_plans = cfg.max_plans,
        "replay publisher starting"
    );
    let mut reconnect = crate::amqp::reconnect::Reconnect::new(format!("replay publisher {owner}"));
    let conn_name = format!("revenant-replay {owner}");
    let hb_stop = CancellationToken::new();
    let hb = tokio::spawn(super::heartbeat::run(pool.clone(), owner, cfg.clone(), stats.clone(), hb_stop.clone()));
    while !shutdown.is_cancelled() {
        let started = Instant::now();
        let outcome = match crate::amqp::connect(&amqp_url, &conn_name).await {
            Ok(conn) => {
                stats.connected.store(true, Relaxed);
                let follow = crate::amqp::blocked::follow(&conn, stats.blocks.clone(), &conn_name);
                let conn = Arc::new(conn);
                let res = session(&pool, &conn, &cfg, &stats, owner, &shutdown).await;
                stats.connected.store(false, Relaxed);
                crate::amqp::blocked::close(&conn, follow, "replay stopping").await;
                res
            }
            Err(e) => Err(e),
        };
        let Err(e) = outcome else { break };
        if !reconnect.wait(started, &e, &shutdown).await {
            break;
        }
    }
    hb_stop.cancel();
    let _ = hb.await;
    tracing::info!(instance = %owner, "replay publisher stopped");
    Ok(())
}

/// One connection's life: claims due plans and runs a sender per plan. Ok on shutdown.
async fn session(
    pool: &PgPool,
    conn: &Arc<lapin::Connection>,
    cfg: &PublisherConfig,
    stats: &Arc<ReplayStats>,
    owner: Uuid,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let stop = shutdown.child_token();
    let mut senders: JoinSet<(i64, anyhow::Result<()>)> = JoinSet::new();
    let mut running: HashSet<i64> = HashSet::new();
    let result = loop {
        while running.len() < cfg.max_plans.max(1) {
            let busy: Vec<i64> = running.iter().copied().collect();
            match items::claim_plan(pool, owner, cfg.lease, &busy).await {
                Ok(Some(plan)) => {
                    running.insert(plan.id);
                    stats.plans_running.store(running.len() as u64, Relaxed);
                    let (pool, conn, cfg, stats, stop) =
                        (pool.clone(), conn.clone(), cfg.clone(), stats.clone(), stop.clone());
                    let id = plan.id;
                    senders.spawn(async move { (id, sender::run(pool, conn, cfg, stats, plan, owner, stop).await) });
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot claim replay plans; retrying at the next poll");
                    break;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            Some(joined) = senders.join_next(), if !senders.is_empty() => {
                match joined {
                    Ok((id, res)) => {
                        running.remove(&id);
                        stats.plans_running.store(running.len() as u64, Relaxed);
                        if let Err(e) = res {
                            break Err(e.context(format!("replay plan {id}")));
                        }
                    }
                    Err(e) => break Err(anyhow::anyhow!("a replay sender panicked: {e}")),
                }
            }
            _ = tokio::time::sleep(cfg.poll) => {
                if !conn.status().connected() {
                    break Err(anyhow::anyhow!("broker connection closed while idle"));
                }
            }
        }
    };
    // Senders finish their confirms in flight and release their leases.
    stop.cancel();
    while senders.join_next().await.is_some() {}
    stats.plans_running.store(0, Relaxed);
    result
}
