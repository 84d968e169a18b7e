//! `revenant bench relay`: the relay's throughput against the publisher users write by hand
//! (one row at a time: select it, publish, wait for the confirm, mark it), on the same table,
//! the same durable queue and the same messages.
//!
//! Every run enqueues its own events (tagged by `event_type`), publishes them all, then the
//! queue is drained and each `message_id` checked against the run's event ids: a lost or a
//! doubled message shows in the table, not only a rate.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::StreamExt;
use lapin::{
    Confirmation, Connection,
    options::{BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions},
    types::FieldTable,
};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Scratch, declare_queue, delete_queues, interruptible, ms, per_sec, percentile, ready, wait_until};
use engine::{
    outbox::{
        message,
        relay::{self, RelayStats},
        stats::LATENCY_BUCKETS,
        store::ClaimedRow,
    },
    settings::Settings,
};

struct Outcome {
    label: String,
    events: u64,
    took: Duration,
    p50: String,
    p99: String,
    check: Check,
}

/// What arrived on the queue, compared with what the run's rows say was published.
struct Check {
    unpublished_rows: i64,
    on_queue: u32,
    lost: usize,
    duplicates: usize,
    unexpected: usize,
}

pub async fn run(settings: &Settings, events: u32, windows: &[usize], sample: u32) -> anyhow::Result<()> {
    let db = Scratch::create(&settings.database_url).await?;
    let res = async {
        let conn = engine::amqp::connect(&settings.amqp_url, "revenant-bench").await?;
        let ch = conn.create_channel().await.context("cannot open a channel")?;
        let queue = declare_queue(&ch, "revenant-bench.relay").await?;
        let res = interruptible(bench(settings, &db.pool, &conn, &queue, events, windows, sample)).await;
        delete_queues(&settings.amqp_url, std::slice::from_ref(&queue)).await;
        let _ = conn.close(200, "bench done".into()).await;
        res
    }
    .await;
    db.drop_db().await;
    res
}

async fn bench(
    settings: &Settings,
    pool: &PgPool,
    conn: &Connection,
    queue: &str,
    events: u32,
    windows: &[usize],
    sample: u32,
) -> anyhow::Result<()> {
    println!(
        "relay bench: durable queue, persistent messages of ~250 B, mandatory, confirms; \
         {sample} events one at a time, {events} per windowed run (batch {})",
        settings.relay.batch
    );
    let mut out = Vec::new();
    let label = "bench.baseline";
    enqueue(pool, label, queue, sample).await?;
    let (took, mut lat) = baseline(pool, conn, sample).await?;
    lat.sort();
    let check = verify(pool, conn, queue, label).await?;
    out.push(Outcome {
        label: "hand-written, one at a time".into(),
        events: sample.into(),
        took,
        p50: format!("{} ms", ms(percentile(&lat, 50.0))),
        p99: format!("{} ms", ms(percentile(&lat, 99.0))),
        check,
    });
    report(out.last());
    for &w in windows {
        let n = if w == 1 { sample } else { events };
        let label = format!("bench.relay.w{w}");
        enqueue(pool, &label, queue, n).await?;
        let (took, stats) = relay_run(settings, pool, w, n.into()).await?;
        let check = verify(pool, conn, queue, &label).await?;
        let snap = stats.confirm_latency();
        out.push(Outcome {
            label: format!("relay, window {w}"),
            events: n.into(),
            took,
            p50: bucket_percentile(&snap.counts, snap.count, 50.0),
            p99: bucket_percentile(&snap.counts, snap.count, 99.0),
            check,
        });
        report(out.last());
    }
    let base = per_sec(out[0].events, out[0].took);
    println!();
    println!(
        "| run | events | s | events/s | vs baseline | confirm p50 | confirm p99 | on queue | lost | duplicates |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for o in &out {
        let rate = per_sec(o.events, o.took);
        println!(
            "| {} | {} | {:.2} | {:.0} | {:.1}× | {} | {} | {} | {} | {} |",
            o.label,
            o.events,
            o.took.as_secs_f64(),
            rate,
            rate / base,
            o.p50,
            o.p99,
            o.check.on_queue,
            o.check.lost,
            o.check.duplicates
        );
    }
    let bad = out.iter().any(|o| {
        let c = &o.check;
        c.lost + c.duplicates + c.unexpected > 0 || c.unpublished_rows > 0 || u64::from(c.on_queue) != o.events
    });
    anyhow::ensure!(!bad, "some runs lost, doubled or left messages (see the table)");
    Ok(())
}

fn report(o: Option<&Outcome>) {
    if let Some(o) = o {
        println!(
            "  {:<28} {:>6} events in {:>6.2} s = {:>7.0} events/s (confirm p50 {}, p99 {})",
            o.label,
            o.events,
            o.took.as_secs_f64(),
            per_sec(o.events, o.took),
            o.p50,
            o.p99
        );
    }
}

/// `n` pending events, as a service would write them, in one statement (fast set-up).
async fn enqueue(pool: &PgPool, event_type: &str, queue: &str, n: u32) -> anyhow::Result<()> {
    sqlx::query(
        r#"INSERT INTO outbox (event_type, exchange, routing_key, payload, headers)
           SELECT $1, '', $2,
                  convert_to(format('{"order_id":%s,"customer_id":"cust-%s","total_cents":%s,"currency":"EUR","lines":[{"sku":"SKU-%s","qty":%s}],"note":"%s"}',
                                    i, i % 977, (i * 37) % 100000, i % 311, 1 + i % 5, repeat('x', 120)), 'UTF8'),
                  '{"tenant":"acme","source":"orders"}'::jsonb
             FROM generate_series(1, $3) AS i"#,
    )
    .bind(event_type)
    .bind(queue)
    .bind(i64::from(n))
    .execute(pool)
    .await
    .context("cannot enqueue the bench events")?;
    Ok(())
}

/// The loop users write first: one transaction per row, held while the broker confirms.
async fn baseline(pool: &PgPool, conn: &Connection, n: u32) -> anyhow::Result<(Duration, Vec<Duration>)> {
    let ch = conn.create_channel().await.context("cannot open a channel")?;
    ch.confirm_select(ConfirmSelectOptions::default()).await.context("cannot enable confirms")?;
    let mut latencies = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for _ in 0..n {
        let mut tx = pool.begin().await?;
        let row: Option<ClaimedRow> = sqlx::query_as(
            "SELECT id, event_id, event_type, exchange, routing_key, payload, content_type, headers, created_at,
                    attempts, next_attempt_at, now() AS lease_expires_at
               FROM outbox WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
        )
        .fetch_optional(&mut *tx)
        .await?;
        let row = row.context("the baseline ran out of pending rows")?;
        // The same properties the relay sends, so both publish identical messages.
        let p = message::prepare(&row).map_err(|e| anyhow::anyhow!("a bench row cannot be published: {e}"))?;
        let sent = Instant::now();
        let opts = BasicPublishOptions { mandatory: true, immediate: false };
        let confirm = ch.basic_publish(p.exchange, p.routing_key, opts, &row.payload, p.properties).await?.await?;
        latencies.push(sent.elapsed());
        anyhow::ensure!(matches!(confirm, Confirmation::Ack(None)), "baseline publish not confirmed: {confirm:?}");
        sqlx::query(
            "UPDATE outbox SET status = 'published', published_at = now(), attempts = attempts + 1 WHERE id = $1",
        )
        .bind(row.id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
    }
    let took = start.elapsed();
    let _ = ch.close(200, "baseline done".into()).await;
    Ok((took, latencies))
}

/// Runs the real relay until it has published `n` rows; the clock includes its connecting.
async fn relay_run(
    settings: &Settings,
    pool: &PgPool,
    window: usize,
    n: u64,
) -> anyhow::Result<(Duration, Arc<RelayStats>)> {
    let cfg = engine::settings::RelaySettings { window, ..settings.relay.clone() };
    let stats = Arc::new(RelayStats::default());
    let stop = CancellationToken::new();
    let start = Instant::now();
    let handle = tokio::spawn(relay::run(pool.clone(), settings.amqp_url.clone(), cfg, stats.clone(), stop.clone()));
    let s = stats.clone();
    let waited = wait_until(
        &format!("relay window {window}"),
        Duration::from_secs(30),
        || s.published.load(Relaxed) + s.failed_attempts.load(Relaxed),
        |_| s.published.load(Relaxed) >= n,
    )
    .await;
    let took = start.elapsed();
    stop.cancel();
    match tokio::time::timeout(Duration::from_secs(30), handle).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => return Err(e.context("the relay failed")),
        Ok(Err(e)) => return Err(anyhow::Error::new(e).context("the relay panicked")),
        Err(_) => anyhow::bail!("the relay did not stop within 30 s"),
    }
    waited?;
    let failed = stats.failed_attempts.load(Relaxed);
    if failed > 0 {
        println!("  window {window}: {failed} failed attempts (retried)");
    }
    Ok((took, stats))
}

/// The upper bound of the histogram bucket holding the `p`th percentile ("≤ 5 ms").
fn bucket_percentile(counts: &[u64], total: u64, p: f64) -> String {
    if total == 0 {
        return "–".into();
    }
    let rank = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
    let mut acc = 0;
    for (i, c) in counts.iter().enumerate() {
        acc += c;
        if acc >= rank {
            return match LATENCY_BUCKETS.get(i) {
                // Rounded to the microsecond so 0.005 s prints as 5, not 5.000000000000001.
                Some(le) => format!("≤ {} ms", (le * 1e6).round() / 1e3),
                None => format!("> {} s", LATENCY_BUCKETS[LATENCY_BUCKETS.len() - 1]),
            };
        }
    }
    "–".into()
}

/// Takes every message now on the queue and compares their ids with the run's events.
async fn verify(pool: &PgPool, conn: &Connection, queue: &str, event_type: &str) -> anyhow::Result<Check> {
    let expected: Vec<String> = sqlx::query_scalar("SELECT event_id::text FROM outbox WHERE event_type = $1")
        .bind(event_type)
        .fetch_all(pool)
        .await?;
    let unpublished_rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox WHERE event_type = $1 AND status <> 'published'")
            .bind(event_type)
            .fetch_one(pool)
            .await?;
    let on_queue = ready(conn, queue).await?;
    let ch = conn.create_channel().await.context("cannot open a channel")?;
    let opts = BasicConsumeOptions { no_ack: true, ..BasicConsumeOptions::default() };
    let tag = format!("revenant-bench-drain-{}", uuid::Uuid::new_v4().simple());
    let mut consumer = ch.basic_consume(queue.into(), tag.into(), opts, FieldTable::default()).await?;
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut got = 0u32;
    while got < on_queue {
        let next = tokio::time::timeout(Duration::from_secs(10), consumer.next()).await;
        let d = match next {
            Ok(Some(Ok(d))) => d,
            Ok(Some(Err(e))) => return Err(e).context("draining the bench queue failed"),
            Ok(None) | Err(_) => anyhow::bail!("draining the bench queue stopped at {got} of {on_queue}"),
        };
        got += 1;
        let id = d.properties.message_id().as_ref().map(|m| m.as_str().to_string()).unwrap_or_default();
        *seen.entry(id).or_default() += 1;
    }
    let _ = ch.close(200, "drained".into()).await;
    let expected: HashSet<String> = expected.into_iter().collect();
    Ok(Check {
        unpublished_rows,
        on_queue,
        lost: expected.iter().filter(|id| !seen.contains_key(*id)).count(),
        duplicates: (got as usize).saturating_sub(seen.len()),
        unexpected: seen.keys().filter(|id| !expected.contains(*id)).count(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_percentile_names_the_bucket_bound() {
        let mut counts = vec![0; LATENCY_BUCKETS.len() + 1];
        counts[2] = 98;
        counts[5] = 2;
        assert_eq!(bucket_percentile(&counts, 100, 50.0), "≤ 5 ms");
        assert_eq!(bucket_percentile(&counts, 100, 99.0), "≤ 50 ms");
        assert_eq!(bucket_percentile(&counts, 0, 99.0), "–");
    }
}
