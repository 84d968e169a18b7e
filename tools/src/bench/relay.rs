//! `revenant bench relay`: the relay's throughput against its ceiling, raw lapin
//! publish-with-confirms at the same window measured in the same run, and against the
//! publisher users write by hand (one row at a time), on the same table, the same durable
//! queue and the same messages; then its commit-to-confirm latency at half its peak rate.
//!
//! Every run enqueues its own events (tagged by `event_type`), publishes them all, then the
//! queue is drained and each `message_id` checked against the run's event ids: a lost or a
//! doubled message shows in the table, not only a rate.

use engine::settings::ExposeSecret;
use std::{
    collections::HashSet,
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, Instant},
};

use anyhow::Context;
use lapin::Connection;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Scratch, declare_queue, delete_queues, interruptible, ms, per_sec, percentile, wait_until};
use engine::{
    outbox::{
        relay::{self, RelayStats},
        stats::LATENCY_BUCKETS,
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

impl Outcome {
    /// A ceiling's run: raw publishes, no confirm latencies measured per row.
    fn ceiling(label: String, events: u32, took: Duration, check: Check) -> Self {
        Self { label, events: events.into(), took, p50: "–".into(), p99: "–".into(), check }
    }
}

/// What arrived on the queue, compared with what the run's rows say was published.
struct Check {
    unpublished_rows: i64,
    on_queue: u32,
    lost: usize,
    duplicates: usize,
    unexpected: usize,
}

mod ceiling;
mod latency;
mod mapped;

/// The outbox `revenant bench relay` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchSource {
    /// Revenant's own outbox.
    Revenant,
    /// A service's own table, made in the throwaway database, relayed through its mapping.
    Mapped,
}

#[allow(clippy::too_many_arguments)] // the bench's command-line knobs, passed through once
pub async fn run(
    settings: &Settings,
    events: u32,
    windows: &[usize],
    sample: u32,
    latency_secs: u64,
    source: BenchSource,
    rounds: usize,
    publishers: usize,
) -> anyhow::Result<()> {
    let db = Scratch::create(settings.database_url.expose_secret()).await?;
    let res = async {
        let conn = engine::amqp::connect(settings.amqp_url.expose_secret(), "revenant-bench").await?;
        let ch = conn.create_channel().await.context("cannot open a channel")?;
        let queue = declare_queue(&ch, "revenant-bench.relay").await?;
        let res = if source == BenchSource::Mapped {
            interruptible(mapped::bench(settings, &db.pool, &conn, &queue, events, windows, sample)).await
        } else {
            {
                let knobs = Knobs { events, windows, sample, latency_secs, rounds, publishers };
                interruptible(bench(settings, &db.pool, &conn, &queue, &knobs)).await
            }
        };
        delete_queues(settings.amqp_url.expose_secret(), std::slice::from_ref(&queue)).await;
        let _ = conn.close(200, "bench done".into()).await;
        res
    }
    .await;
    db.drop_db().await;
    res
}

/// The bench's command-line knobs.
struct Knobs<'a> {
    events: u32,
    windows: &'a [usize],
    sample: u32,
    latency_secs: u64,
    rounds: usize,
    /// Publishers (each on its own connection) measuring the broker's limit at window 128.
    publishers: usize,
}

/// The window the broker's limit is measured at.
const LIMIT_WINDOW: usize = 128;

async fn bench(
    settings: &Settings,
    pool: &PgPool,
    conn: &Connection,
    queue: &str,
    k: &Knobs<'_>,
) -> anyhow::Result<()> {
    let Knobs { events, windows, sample, latency_secs, rounds, publishers } = *k;
    println!(
        "relay bench: durable {} queue, persistent messages of ~250 B, mandatory, confirms; \
         {sample} events one at a time and at window 1, {events} per other run, {rounds} rounds of raw then relay \
         per window, and at window {LIMIT_WINDOW} the broker's limit ({publishers} publishers on {publishers} \
         connections) (relay channels {}, claim batch {}, mark_batch {}, mark_flush {} ms, synchronous_commit {})",
        super::queue_kind(),
        settings.relay.channels,
        settings.relay.batch,
        settings.relay.mark_batch,
        settings.relay.mark_flush.as_millis(),
        if settings.relay.synchronous_commit { "on" } else { "off" }
    );
    let logical = matches!(settings.relay.capture, engine::settings::Capture::Logical { .. });
    if logical {
        // The relay makes its slot at its first start; rows written before it are held and
        // go out as a backlog. One warm-up event makes the slot, so every timed run streams.
        println!(
            "capture: logical (the commit stream); before each relay run the slot is moved past the ceiling runs' rows, which the ceilings marked published themselves"
        );
        enqueue(pool, "bench.warmup", queue, 1).await?;
        relay_run(settings, pool, 1, 1).await?;
        let _ = verify(pool, conn, queue, "bench.warmup").await?;
    } else {
        println!("capture: poll");
    }
    let mut out = Vec::new();
    let label = "bench.baseline";
    enqueue(pool, label, queue, sample).await?;
    let (took, mut lat) = ceiling::one_at_a_time(pool, conn, sample).await?;
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
    // Per window: median raw events/s, median relay events/s, mark flushes, median of the
    // rounds' ratios. Raw and relay alternate, round by round, so a slow spell of a noisy
    // machine weighs on both sides of a ratio rather than on one.
    let mut ratios = Vec::new();
    // The broker's limit per round at window 128, and the relay's share of it.
    let (mut limit_rates, mut limit_ratios) = (vec![], vec![]);
    for &w in windows {
        let n = if w == 1 { sample } else { events };
        let (mut raw_rates, mut relay_rates, mut round_ratios, mut flushes) = (vec![], vec![], vec![], 0);
        for r in 1..=rounds.max(1) {
            let round = if rounds > 1 { format!(", round {r}") } else { String::new() };
            let label = format!("bench.raw.w{w}.r{r}");
            enqueue(pool, &label, queue, n).await?;
            let took = ceiling::raw(pool, conn, &label, w).await?;
            let check = verify(pool, conn, queue, &label).await?;
            let raw_rate = per_sec(n.into(), took);
            out.push(Outcome::ceiling(format!("raw confirms, window {w}{round}"), n, took, check));
            report(out.last());

            let label = format!("bench.relay.w{w}.r{r}");
            if logical {
                skip_settled(pool).await?;
            }
            enqueue(pool, &label, queue, n).await?;
            let (took, stats) = relay_run(settings, pool, w, n.into()).await?;
            let check = verify(pool, conn, queue, &label).await?;
            let snap = stats.confirm_latency();
            out.push(Outcome {
                label: format!("relay, window {w}{round}"),
                events: n.into(),
                took,
                p50: bucket_percentile(&snap.counts, snap.count, 50.0),
                p99: bucket_percentile(&snap.counts, snap.count, 99.0),
                check,
            });
            report(out.last());
            let relay_rate = per_sec(n.into(), took);
            round_ratios.push(relay_rate / raw_rate.max(1e-9));
            if w == LIMIT_WINDOW {
                let label = format!("bench.limit.w{w}.r{r}");
                enqueue(pool, &label, queue, n).await?;
                let took =
                    ceiling::broker_limit(pool, settings.amqp_url.expose_secret(), &label, w, publishers).await?;
                let check = verify(pool, conn, queue, &label).await?;
                let label = format!("broker limit, {publishers} publishers, window {w}{round}");
                out.push(Outcome::ceiling(label, n, took, check));
                report(out.last());
                let limit_rate = per_sec(n.into(), took);
                limit_rates.push(limit_rate);
                limit_ratios.push(relay_rate / limit_rate.max(1e-9));
            }
            raw_rates.push(raw_rate);
            relay_rates.push(relay_rate);
            flushes += stats.mark_flushes.load(Relaxed);
        }
        ratios.push((w, median(&mut raw_rates), median(&mut relay_rates), flushes, median(&mut round_ratios)));
    }
    let base = per_sec(out[0].events, out[0].took);
    println!();
    println!(
        "| run | events | s | events/s | vs one-at-a-time | confirm p50 | confirm p99 | on queue | lost | duplicates | unexpected |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for o in &out {
        let rate = per_sec(o.events, o.took);
        println!(
            "| {} | {} | {:.2} | {:.0} | {:.1}× | {} | {} | {} | {} | {} | {} |",
            o.label,
            o.events,
            o.took.as_secs_f64(),
            rate,
            rate / base,
            o.p50,
            o.p99,
            o.check.on_queue,
            o.check.lost,
            o.check.duplicates,
            o.check.unexpected
        );
    }
    let bad = out.iter().any(|o| {
        let c = &o.check;
        c.lost + c.duplicates + c.unexpected > 0 || c.unpublished_rows > 0 || u64::from(c.on_queue) != o.events
    });
    anyhow::ensure!(!bad, "some runs lost, doubled or left messages (see the table)");
    // Latency at half the relay's peak: the window that was fastest, or 128 when measured.
    let peak = ratios.iter().find(|r| r.0 == 128).or_else(|| ratios.iter().max_by(|a, b| a.2.total_cmp(&b.2)));
    if let Some(&(w, _, rate, _, _)) = peak
        && latency_secs > 0
    {
        if logical {
            skip_settled(pool).await?;
        }
        let l = latency::run(settings, pool, queue, w, rate / 2.0, latency_secs).await?;
        let _ = verify(pool, conn, queue, "bench.latency").await?;
        let (r50, r99, rmax) = ceiling::raw_latency(conn, queue, rate / 2.0, latency_secs).await?;
        let _ = super::drain_ids(conn, queue).await?;
        println!();
        let snap = l.stats.confirm_latency();
        println!(
            "commit-to-confirm (upper bound: created_at → published_at) at {:.0} events/s, window {w}, {} events: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; of which publish → confirm p50 {}, p99 {}",
            l.rate,
            l.events,
            l.p50_ms,
            l.p99_ms,
            l.max_ms,
            bucket_percentile(&snap.counts, snap.count, 50.0),
            bucket_percentile(&snap.counts, snap.count, 99.0)
        );
        println!(
            "raw publish → confirm at the same rate (the broker alone): p50 {r50:.1} ms, p99 {r99:.1} ms, max {rmax:.1} ms"
        );
    }
    println!();
    for (w, raw, relay, flushes, _) in &ratios {
        println!(
            "relay window={w}: {relay:.0} events/s, raw {raw:.0} events/s (medians of {} rounds), {flushes} mark flushes",
            rounds.max(1)
        );
    }
    if !limit_rates.is_empty() {
        println!(
            "broker limit window={LIMIT_WINDOW}: {:.0} events/s from {publishers} publishers on {publishers} connections (median of {} rounds)",
            median(&mut limit_rates),
            limit_rates.len()
        );
    }
    for (w, _, _, _, ratio) in &ratios {
        println!("ratio relay/raw window={w}: {ratio:.2}");
    }
    if !limit_ratios.is_empty() {
        println!("ratio relay/broker-limit window={LIMIT_WINDOW}: {:.2}", median(&mut limit_ratios));
    }
    Ok(())
}

/// The middle value (the mean of the two middle ones for an even count); 0 when empty.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
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
    sqlx::query!(
        r#"INSERT INTO outbox (event_type, exchange, routing_key, payload, headers)
           SELECT $1, '', $2,
                  convert_to(format('{"order_id":%s,"customer_id":"cust-%s","total_cents":%s,"currency":"EUR","lines":[{"sku":"SKU-%s","qty":%s}],"note":"%s"}',
                                    i, i % 977, (i * 37) % 100000, i % 311, 1 + i % 5, repeat('x', 120)), 'UTF8'),
                  '{"tenant":"acme","source":"orders"}'::jsonb
             FROM generate_series(1, $3::bigint) AS i"#,
        event_type,
        queue,
        i64::from(n),
    )
    .execute(pool)
    .await
    .context("cannot enqueue the bench events")?;
    Ok(())
}

/// Moves the bench database's commit-stream slot to the end of the log. Only between runs,
/// with every row already published (the ceilings mark theirs themselves): a relay running
/// all along would have read past those rows and skipped each, which is not the work the
/// next run measures.
async fn skip_settled(pool: &PgPool) -> anyhow::Result<()> {
    let pending: i64 = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM outbox WHERE status <> 'published'"#)
        .fetch_one(pool)
        .await?;
    anyhow::ensure!(pending == 0, "{pending} bench rows are not published; the slot stays where it is");
    sqlx::query!(
        r#"SELECT a.slot_name::text AS "slot!"
             FROM pg_replication_slots s, pg_replication_slot_advance(s.slot_name, pg_current_wal_lsn()) a
            WHERE s.database = current_database()"#
    )
    .fetch_all(pool)
    .await
    .context("cannot move the bench's replication slot")?;
    Ok(())
}

/// Runs the real relay until it has published `n` rows, timed from its connecting.
async fn relay_run(
    settings: &Settings,
    pool: &PgPool,
    window: usize,
    n: u64,
) -> anyhow::Result<(Duration, Arc<RelayStats>)> {
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
    // The clock starts once the relay has its channel, as raw's does: connecting is not
    // throughput, and it weighs on the short window-1 runs.
    let connecting = Instant::now();
    while !stats.connected.load(Relaxed) && connecting.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let start = Instant::now();
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
    let expected: Vec<String> =
        sqlx::query_scalar!(r#"SELECT event_id::text AS "event_id!" FROM outbox WHERE event_type = $1"#, event_type)
            .fetch_all(pool)
            .await?;
    let unpublished_rows: i64 = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM outbox WHERE event_type = $1 AND status <> 'published'"#,
        event_type,
    )
    .fetch_one(pool)
    .await?;
    let (on_queue, seen) = super::drain_ids(conn, queue).await?;
    let expected: HashSet<String> = expected.into_iter().collect();
    Ok(Check {
        unpublished_rows,
        on_queue,
        lost: expected.iter().filter(|id| !seen.contains_key(*id)).count(),
        duplicates: (on_queue as usize).saturating_sub(seen.len()),
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

    #[test]
    fn a_median_is_the_middle_of_the_sorted_values() {
        assert_eq!(median(&mut [0.9, 0.5, 0.7]), 0.7);
        assert_eq!(median(&mut [0.8, 0.6]), 0.7);
        assert_eq!(median(&mut []), 0.0);
    }
}
