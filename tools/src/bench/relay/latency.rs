//! Commit-to-confirm latency under a steady load: a producer commits events at a fixed rate
//! (a small insert every 10 ms, as services would), the real relay publishes them, and each
//! row's `published_at - created_at` is read back.
//!
//! `created_at` is set by the insert's own single-statement transaction, so it is its commit
//! give or take the statement; `published_at` is set by the mark flush, which runs after the
//! confirm. The figure is therefore an upper bound of commit-to-confirm: it includes the
//! adaptive poll's wait, the claim, the publish, the confirm and up to one mark flush.

use engine::settings::ExposeSecret;
use std::{
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, Instant},
};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use engine::{
    outbox::relay::{self, RelayStats},
    settings::Settings,
};

pub struct Latency {
    /// The relay's own publish → confirm histogram over the run (the broker's share).
    pub stats: Arc<RelayStats>,
    pub rate: f64,
    pub events: i64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Runs the relay at `window` while `rate` events/s are committed for `secs` seconds.
pub async fn run(
    settings: &Settings,
    pool: &PgPool,
    queue: &str,
    window: usize,
    rate: f64,
    secs: u64,
) -> anyhow::Result<Latency> {
    let label = "bench.latency";
    let cfg = engine::settings::RelaySettings { window, ..settings.relay.clone() };
    let stats = Arc::new(RelayStats::default());
    let stop = CancellationToken::new();
    let handle = tokio::spawn(relay::run(
        pool.clone(),
        settings.amqp_url.expose_secret().to_string(),
        cfg,
        stats.clone(),
        stop.clone(),
    ));
    // Let the relay connect before the clock that matters starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tick = Duration::from_millis(10);
    let start = Instant::now();
    let mut due = 0f64;
    let mut sent = 0i64;
    let mut ticker = tokio::time::interval(tick);
    while start.elapsed() < Duration::from_secs(secs) {
        ticker.tick().await;
        due += rate * tick.as_secs_f64();
        let n = due as i64 - sent;
        if n > 0 {
            insert(pool, label, queue, n).await?;
            sent += n;
        }
    }
    super::super::wait_until(
        "latency run",
        Duration::from_secs(30),
        || stats.published.load(Relaxed),
        |p| p >= sent as u64,
    )
    .await?;
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), handle).await;
    let ms = sqlx::query!(
        r#"SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS "p50!",
                  percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS "p99!", max(ms) AS "max!"
           FROM (SELECT (extract(epoch FROM published_at - created_at) * 1000)::float8 AS ms
                   FROM outbox WHERE event_type = $1) t"#,
        label,
    )
    .fetch_one(pool)
    .await?;
    Ok(Latency { stats, rate, events: sent, p50_ms: ms.p50, p99_ms: ms.p99, max_ms: ms.max })
}

async fn insert(pool: &PgPool, label: &str, queue: &str, n: i64) -> anyhow::Result<()> {
    sqlx::query!(
        r#"INSERT INTO outbox (event_type, exchange, routing_key, payload)
           SELECT $1, '', $2, convert_to(format('{"order_id":%s,"note":"%s"}', i, repeat('x', 200)), 'UTF8')
             FROM generate_series(1, $3::bigint) AS i"#,
        label,
        queue,
        n,
    )
    .execute(pool)
    .await?;
    Ok(())
}
