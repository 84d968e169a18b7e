//! The yardsticks the relay is measured against: raw lapin publish-with-confirms at the same
//! window on one channel (no database on the path), the broker's own limit (raw confirms from
//! several publishers on connections of their own), and the loop users write by hand (one row
//! at a time, its transaction held while the broker confirms).
//!
//! Both publish exactly what the relay would ([`message::prepare`] of the same kind of rows),
//! to the same durable queue, so the three differ only in what stands between the rows and
//! the broker.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, stream::FuturesUnordered};
use lapin::{
    Confirmation, Connection,
    options::{BasicPublishOptions, ConfirmSelectOptions},
};
use sqlx::PgPool;

use engine::outbox::{message, store::ClaimedRow};

/// Publishes every pending row of `event_type` with up to `window` confirms outstanding and
/// nothing else: the rows are read before the clock starts and marked after it stops.
pub async fn raw(pool: &PgPool, conn: &Connection, event_type: &str, window: usize) -> anyhow::Result<Duration> {
    let rows = pending(pool, event_type).await?;
    let mut prepared = Vec::with_capacity(rows.len());
    for row in &rows {
        let p = message::prepare(row).map_err(|e| anyhow::anyhow!("a bench row cannot be published: {e}"))?;
        prepared.push((p, &row.payload));
    }
    let ch = conn.create_channel().await.context("cannot open a channel")?;
    ch.confirm_select(ConfirmSelectOptions::default()).await.context("cannot enable confirms")?;
    let opts = BasicPublishOptions { mandatory: true, immediate: false };
    let mut in_flight = FuturesUnordered::new();
    let start = Instant::now();
    for (p, payload) in prepared {
        while in_flight.len() >= window.max(1) {
            settle(in_flight.next().await)?;
        }
        let confirm = ch.basic_publish(p.exchange, p.routing_key, opts, payload, p.properties).await?;
        in_flight.push(confirm);
    }
    while !in_flight.is_empty() {
        settle(in_flight.next().await)?;
    }
    let took = start.elapsed();
    let _ = ch.close(200, "raw done".into()).await;
    sqlx::query!("UPDATE outbox SET status = 'published', published_at = now() WHERE event_type = $1", event_type)
        .execute(pool)
        .await?;
    Ok(took)
}

/// The broker's own limit: every pending row of `event_type` published by `publishers`
/// clients at once, each on a connection of its own with up to `window` confirms outstanding,
/// into the same queue (rows dealt out in turn). Timed from the moment all are connected until
/// the last confirm.
pub async fn broker_limit(
    pool: &PgPool,
    amqp_url: &str,
    event_type: &str,
    window: usize,
    publishers: usize,
) -> anyhow::Result<Duration> {
    let rows = pending(pool, event_type).await?;
    let n = publishers.max(1);
    let mut shares: Vec<Vec<(message::Prepared, Vec<u8>)>> = (0..n).map(|_| Vec::new()).collect();
    for (i, row) in rows.into_iter().enumerate() {
        let p = message::prepare(&row).map_err(|e| anyhow::anyhow!("a bench row cannot be published: {e}"))?;
        shares[i % n].push((p, row.payload));
    }
    let mut channels = Vec::with_capacity(n);
    for k in 0..n {
        let conn = engine::amqp::connect(amqp_url, &format!("revenant-bench-limit-{k}")).await?;
        let ch = conn.create_channel().await.context("cannot open a channel")?;
        ch.confirm_select(ConfirmSelectOptions::default()).await.context("cannot enable confirms")?;
        channels.push((conn, ch));
    }
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for ((_, ch), share) in channels.iter().zip(shares) {
        let ch = ch.clone();
        tasks.spawn(async move {
            let opts = BasicPublishOptions { mandatory: true, immediate: false };
            let mut in_flight = FuturesUnordered::new();
            for (p, payload) in share {
                while in_flight.len() >= window.max(1) {
                    settle(in_flight.next().await)?;
                }
                in_flight.push(ch.basic_publish(p.exchange, p.routing_key, opts, &payload, p.properties).await?);
            }
            while !in_flight.is_empty() {
                settle(in_flight.next().await)?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a limit publisher panicked")??;
    }
    let took = start.elapsed();
    for (conn, _) in channels {
        let _ = conn.close(200, "limit done".into()).await;
    }
    sqlx::query!("UPDATE outbox SET status = 'published', published_at = now() WHERE event_type = $1", event_type)
        .execute(pool)
        .await?;
    Ok(took)
}

/// Every pending row of `event_type`, in id order, read before a clock starts.
async fn pending(pool: &PgPool, event_type: &str) -> anyhow::Result<Vec<ClaimedRow>> {
    Ok(sqlx::query_as!(
        ClaimedRow,
        r#"SELECT id, event_id::text AS "event_id!", event_type, exchange, routing_key, payload, content_type,
                  headers, created_at, attempts, next_attempt_at FROM outbox
           WHERE event_type = $1 AND status = 'pending' ORDER BY id"#,
        event_type,
    )
    .fetch_all(pool)
    .await?)
}

fn settle(c: Option<lapin::Result<Confirmation>>) -> anyhow::Result<()> {
    match c {
        Some(Ok(Confirmation::Ack(None))) => Ok(()),
        other => anyhow::bail!("raw publish not confirmed: {other:?}"),
    }
}

/// The loop users write first: one transaction per row, held while the broker confirms.
pub async fn one_at_a_time(pool: &PgPool, conn: &Connection, n: u32) -> anyhow::Result<(Duration, Vec<Duration>)> {
    let ch = conn.create_channel().await.context("cannot open a channel")?;
    ch.confirm_select(ConfirmSelectOptions::default()).await.context("cannot enable confirms")?;
    let mut latencies = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for _ in 0..n {
        let mut tx = pool.begin().await?;
        let row = sqlx::query_as!(
            ClaimedRow,
            r#"SELECT id, event_id::text AS "event_id!", event_type, exchange, routing_key, payload, content_type,
                      headers, created_at, attempts, next_attempt_at FROM outbox
               WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"#
        )
        .fetch_optional(&mut *tx)
        .await?;
        let row = row.context("the baseline ran out of pending rows")?;
        let p = message::prepare(&row).map_err(|e| anyhow::anyhow!("a bench row cannot be published: {e}"))?;
        let sent = Instant::now();
        let opts = BasicPublishOptions { mandatory: true, immediate: false };
        let confirm = ch.basic_publish(p.exchange, p.routing_key, opts, &row.payload, p.properties).await?.await?;
        latencies.push(sent.elapsed());
        anyhow::ensure!(matches!(confirm, Confirmation::Ack(None)), "baseline publish not confirmed: {confirm:?}");
        sqlx::query!(
            "UPDATE outbox SET status = 'published', published_at = now(), attempts = attempts + 1 WHERE id = $1",
            row.id,
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
    }
    let took = start.elapsed();
    let _ = ch.close(200, "baseline done".into()).await;
    Ok((took, latencies))
}

/// The broker's own publish → confirm latency at `rate` messages/s for `secs` seconds (a
/// burst every 10 ms, confirms awaited beside the publishing): what the relay's
/// commit-to-confirm latency at that rate cannot go below. Returns (p50, p99, max) in ms.
pub async fn raw_latency(conn: &Connection, queue: &str, rate: f64, secs: u64) -> anyhow::Result<(f64, f64, f64)> {
    let ch = conn.create_channel().await.context("cannot open a channel")?;
    ch.confirm_select(ConfirmSelectOptions::default()).await.context("cannot enable confirms")?;
    let opts = BasicPublishOptions { mandatory: true, immediate: false };
    let body = format!("{{\"order_id\":1,\"note\":\"{}\"}}", "x".repeat(200)).into_bytes();
    let mut in_flight = FuturesUnordered::new();
    let mut lat: Vec<Duration> = Vec::new();
    let tick = Duration::from_millis(10);
    let mut ticker = tokio::time::interval(tick);
    let (start, mut due, mut sent) = (Instant::now(), 0f64, 0u64);
    while start.elapsed() < Duration::from_secs(secs) {
        tokio::select! {
            Some((at, c)) = in_flight.next(), if !in_flight.is_empty() => {
                settle(Some(c))?;
                lat.push(Instant::elapsed(&at));
            }
            _ = ticker.tick() => {
                due += rate * tick.as_secs_f64();
                while (sent as f64) < due {
                    let props = lapin::BasicProperties::default().with_delivery_mode(2);
                    let confirm = ch.basic_publish("".into(), queue.into(), opts, &body, props).await?;
                    let at = Instant::now();
                    in_flight.push(async move { (at, confirm.await) });
                    sent += 1;
                }
            }
        }
    }
    while let Some((at, c)) = in_flight.next().await {
        settle(Some(c))?;
        lat.push(Instant::elapsed(&at));
    }
    let _ = ch.close(200, "raw latency done".into()).await;
    lat.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Ok((
        ms(super::super::percentile(&lat, 50.0)),
        ms(super::super::percentile(&lat, 99.0)),
        lat.last().map_or(0.0, |d| ms(*d)),
    ))
}
