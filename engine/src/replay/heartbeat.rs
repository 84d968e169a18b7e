//! The replay publisher's row in `heartbeats`, so the Overview's Roles table lists it beside
//! the relay, the ingester and the evaluator: alive, connected, how many plans it is sending.
//!
//! Policy: as the relay's (upserted every few seconds by a task of its own, once more with
//! `stopped: true` on a clean stop; a failed write is logged, never fatal).

use std::{sync::Arc, time::Duration};

use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{config::PublisherConfig, stats::ReplayStats};

const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

pub(crate) async fn run(
    pool: PgPool,
    owner: Uuid,
    cfg: PublisherConfig,
    stats: Arc<ReplayStats>,
    stop: CancellationToken,
) {
    let host = crate::host::name();
    loop {
        let stopping = stop.is_cancelled();
        let c = stats.snapshot();
        let detail = json!({
            "window": cfg.window,
            "max_plans": cfg.max_plans,
            "plans_running": c.plans_running,
            "sent": c.sent,
            "failed": c.failed,
            "returned": c.returned,
            "auto_paused": c.auto_paused,
            "connected": c.connected,
            "unconfirmed": c.unconfirmed,
            // While RabbitMQ blocks publishing: the broker's reason and since when.
            "blocked": c.blocked,
            "unclosed_connections": c.unclosed,
            "stopped": stopping,
        });
        let res = crate::heartbeats::upsert(&pool, "replay", owner, &host, &detail).await;
        if let Err(e) = res {
            tracing::warn!(error = %e, "cannot write the replay publisher's heartbeat");
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
