//! The relay's row in `heartbeats`: who is relaying, from where, and how it is doing.
//!
//! Policy: upserted every few seconds by a task of its own, so the Overview sees a relay
//! that is alive but cut off from the broker (`connected: false`) rather than a silent one;
//! written once more with `stopped: true` on a clean stop. A failed write is logged, never fatal.

use std::{
    sync::{Arc, atomic::Ordering::Relaxed},
    time::Duration,
};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{marks::duplicate_bound, stats::RelayStats};
use crate::settings::RelaySettings;

const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// How often a source taken or let go is looked for between beats.
const ACTIVE_CHECK: Duration = Duration::from_millis(200);

/// Upserts this relay's `heartbeats` row every few seconds, and once more when stopping.
pub(crate) async fn run(
    pool: PgPool,
    owner: Uuid,
    cfg: RelaySettings,
    sources: Vec<(String, Arc<RelayStats>)>,
    stop: CancellationToken,
) {
    let host = crate::host::name();
    let Some(stats) = sources.first().map(|(_, s)| s.clone()) else { return };
    // Published counts at the previous beat, for each source's rate.
    let mut last: Vec<u64> = sources.iter().map(|(_, s)| s.published.load(Relaxed)).collect();
    let mut last_at = std::time::Instant::now();
    loop {
        let stopping = stop.is_cancelled();
        let secs = last_at.elapsed().as_secs_f64().max(0.001);
        last_at = std::time::Instant::now();
        let per_source: Vec<serde_json::Value> = sources
            .iter()
            .zip(last.iter_mut())
            .map(|((name, s), prev)| {
                let published = s.published.load(Relaxed);
                let rate = published.saturating_sub(*prev) as f64 / secs;
                *prev = published;
                serde_json::json!({
                    "name": name,
                    // This instance publishes the source now (false: standing by).
                    "active": s.active.load(Relaxed) && !stopping,
                    "connected": s.connected.load(Relaxed),
                    "published": published,
                    "rate_per_sec": (rate * 10.0).round() / 10.0,
                    "failed": s.failed_final.load(Relaxed),
                    "failed_attempts": s.failed_attempts.load(Relaxed),
                    "in_flight": s.in_flight.load(Relaxed),
                    "blocked": s.blocks.current(),
                })
            })
            .collect();
        let detail = serde_json::json!({
            "sources": per_source,
            "window": cfg.window,
            "mark_batch": cfg.mark_batch,
            "mark_flush_ms": cfg.mark_flush.as_millis() as u64,
            "synchronous_commit": cfg.synchronous_commit,
            // What a kill -9 of this relay can re-send at most (in flight + unflushed marks).
            "duplicate_bound": duplicate_bound(&cfg),
            "unflushed_marks": stats.unflushed_marks.load(Relaxed),
            "published": stats.published.load(Relaxed),
            "failed": stats.failed_final.load(Relaxed),
            "failed_attempts": stats.failed_attempts.load(Relaxed),
            "returned": stats.returned.load(Relaxed),
            "in_flight": stats.in_flight.load(Relaxed),
            "connected": stats.connected.load(Relaxed),
            "unconfirmed": stats.unconfirmed.load(Relaxed),
            // While RabbitMQ blocks publishing (any source's connection): its reason, since when.
            "blocked": sources.iter().find_map(|(_, s)| s.blocks.current()),
            "unclosed_connections": sources.iter().map(|(_, s)| s.blocks.unclosed()).sum::<u64>(),
            "stopped": stopping,
        });
        let res = crate::heartbeats::upsert(&pool, "relay", owner, &host, &detail).await;
        if let Err(e) = res {
            tracing::warn!(error = %e, "cannot write the relay heartbeat");
        }
        if stopping {
            break;
        }
        // The next beat in HEARTBEAT_EVERY, or as soon as a source is taken or let go, so the
        // console does not say "no relay" for seconds after a relay took a source.
        let written: Vec<bool> = sources.iter().map(|(_, s)| s.active.load(Relaxed)).collect();
        let due = tokio::time::Instant::now() + HEARTBEAT_EVERY;
        while tokio::time::Instant::now() < due
            && sources.iter().zip(&written).all(|((_, s), w)| s.active.load(Relaxed) == *w)
        {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(ACTIVE_CHECK) => {}
            }
        }
    }
}
