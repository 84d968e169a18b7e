//! Broker-side depth of the queues the console shows a card for (watched, or holding dead
//! letters awaiting triage), sampled into `queue_samples`.
//!
//! Policy: ready messages and consumers come from a passive `queue.declare` (plain AMQP, so
//! it works without the management plugin); unacked messages only the management API knows,
//! so `unacked` is NULL when it is off or does not answer. A missing queue is skipped, logged
//! and recorded as missing (`missing`), not fatal. Samples older than `RETENTION` are pruned
//! by the sampler itself.

use std::{str::FromStr, time::Duration};

use anyhow::Context;
use chrono::{DateTime, Utc};
use lapin::{Connection, options::QueueDeclareOptions, types::FieldTable, types::ShortString};
use serde::Serialize;
use sqlx::{PgExecutor, PgPool};
use tokio_util::sync::CancellationToken;

use crate::management::encode;

pub const RETENTION: Duration = Duration::from_secs(7 * 86_400);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct QueueSample {
    pub queue: String,
    pub at: DateTime<Utc>,
    pub ready: i64,
    /// None when the management API is off or did not answer.
    pub unacked: Option<i64>,
    pub consumers: i64,
}

async fn unacked(http: &reqwest::Client, management_url: &str, vhost: &str, queue: &str) -> Option<i64> {
    #[derive(serde::Deserialize)]
    struct Q {
        messages_unacknowledged: Option<i64>,
    }
    let (base, user, pass) = crate::management::split_credentials(management_url);
    let url = format!("{base}/api/queues/{}/{}", encode(vhost), encode(queue));
    let resp = http.get(url).basic_auth(user, Some(pass)).send().await.ok()?;
    // A queue just created has no stats until the broker's next statistics tick: None, not 0.
    resp.error_for_status().ok()?.json::<Q>().await.ok()?.messages_unacknowledged
}

/// Samples each queue once and writes the rows; returns how many were written.
pub async fn sample_once(
    pool: &PgPool,
    conn: &Connection,
    http: &reqwest::Client,
    management_url: Option<&str>,
    vhost: &str,
    queues: &[String],
) -> anyhow::Result<usize> {
    let mut written = 0;
    for queue in queues {
        let Ok(name) = ShortString::try_new(queue.as_str()) else {
            continue;
        };
        // A passive declare of a missing queue closes its channel: one channel per queue.
        let ch = conn.create_channel().await.context("cannot open a channel")?;
        let opts = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
        let q = match ch.queue_declare(name, opts, FieldTable::default()).await {
            Ok(q) => q,
            Err(e) if crate::amqp::is_not_found(&e) => {
                // Said once when it goes missing, not every round while it stays so.
                if super::missing::record(pool, queue, false).await.context("cannot record a missing queue")? {
                    tracing::warn!(%queue, "the queue no longer exists on the broker");
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(%queue, error = %e, "cannot sample the queue");
                continue;
            }
        };
        if super::missing::record(pool, queue, true).await.context("cannot record a queue as present")? {
            tracing::info!(%queue, "the queue exists on the broker again");
        }
        let _ = ch.close(200, "sampled".into()).await;
        let unacked = match management_url {
            Some(m) => unacked(http, m, vhost, queue).await,
            None => None,
        };
        sqlx::query!(
            "INSERT INTO queue_samples (queue, ready, unacked, consumers) VALUES ($1, $2, $3, $4)",
            queue,
            i64::from(q.message_count()),
            unacked,
            i64::from(q.consumer_count())
        )
        .execute(pool)
        .await
        .context("cannot write a queue sample")?;
        written += 1;
    }
    Ok(written)
}

/// The queues a card is shown for: watched ones, and those holding dead letters awaiting
/// triage (a queue no longer watched still shows its broker depth, or that it is gone).
async fn carded(pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    let mut queues = super::watch::watching(pool).await?;
    for q in super::awaiting::by_queue(pool).await? {
        if !queues.contains(&q.queue) {
            queues.push(q.queue);
        }
    }
    Ok(queues)
}

pub async fn prune(db: impl PgExecutor<'_>) -> Result<u64, sqlx::Error> {
    let cutoff = Utc::now() - chrono::Duration::from_std(RETENTION).unwrap_or(chrono::Duration::days(7));
    let res = sqlx::query!("DELETE FROM queue_samples WHERE at < $1", cutoff).execute(db).await?;
    Ok(res.rows_affected())
}

/// Samples the watched queues (re-read each round, see `watch`) every `every` until
/// `shutdown`; reconnects on its own after errors.
pub async fn run_sampler(
    pool: PgPool,
    amqp_url: String,
    management_url: Option<String>,
    every: Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let vhost = lapin::uri::AMQPUri::from_str(crate::amqp::first_url(&amqp_url))
        .map_err(|e| anyhow::anyhow!("AMQP_URL is not a valid AMQP URI: {e}"))?
        .vhost;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(3)).build().context("http client")?;
    let mut conn: Option<Connection> = None;
    let mut last_prune: Option<std::time::Instant> = None;
    loop {
        if conn.as_ref().is_none_or(|c| !c.status().connected()) {
            conn = match crate::amqp::connect(&amqp_url, "revenant-depth").await {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(error = format!("{e:#}"), "depth sampler cannot connect");
                    None
                }
            };
        }
        let queues = match carded(&pool).await {
            Ok(q) => q,
            Err(e) => {
                tracing::warn!(error = %e, "depth sampler cannot read the watched queues");
                Vec::new()
            }
        };
        if let Some(c) = &conn
            && let Err(e) = sample_once(&pool, c, &http, management_url.as_deref(), &vhost, &queues).await
        {
            tracing::warn!(error = format!("{e:#}"), "depth sampling failed");
        }
        if last_prune.is_none_or(|t| t.elapsed() > Duration::from_secs(3600)) {
            match prune(&pool).await {
                Ok(n) => tracing::debug!(pruned = n, "old queue samples pruned"),
                Err(e) => tracing::warn!(error = %e, "cannot prune queue samples"),
            }
            match super::inflow::prune(&pool).await {
                Ok(n) => tracing::debug!(pruned = n, "inflow older than a day pruned"),
                Err(e) => tracing::warn!(error = %e, "cannot prune the dead-letter inflow"),
            }
            last_prune = Some(std::time::Instant::now());
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
    }
    if let Some(c) = conn {
        let _ = c.close(200, "depth sampler stopping".into()).await;
    }
    Ok(())
}

/// The newest sample of each queue.
pub async fn latest(db: impl PgExecutor<'_>) -> Result<Vec<QueueSample>, sqlx::Error> {
    sqlx::query_as!(
        QueueSample,
        "SELECT DISTINCT ON (queue) queue, at, ready, unacked, consumers FROM queue_samples ORDER BY queue, at DESC"
    )
    .fetch_all(db)
    .await
}

/// One queue's samples since `since`, oldest first (for a chart).
pub async fn series(
    db: impl PgExecutor<'_>,
    queue: &str,
    since: DateTime<Utc>,
) -> Result<Vec<QueueSample>, sqlx::Error> {
    series_of(db, &[queue.to_string()], since).await
}

/// The samples of several queues since `since` in one query, by queue then oldest first (a
/// page of sparklines costs one round trip, not one per queue).
pub async fn series_of(
    db: impl PgExecutor<'_>,
    queues: &[String],
    since: DateTime<Utc>,
) -> Result<Vec<QueueSample>, sqlx::Error> {
    sqlx::query_as!(
        QueueSample,
        "SELECT queue, at, ready, unacked, consumers FROM queue_samples
         WHERE queue = ANY($1) AND at >= $2 ORDER BY queue, at",
        queues,
        since
    )
    .fetch_all(db)
    .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_vhost_and_odd_queue_names_are_encoded_for_the_api() {
        assert_eq!(super::encode("/"), "%2F");
        assert_eq!(super::encode("orders.dlq v2"), "orders.dlq%20v2");
    }
}
