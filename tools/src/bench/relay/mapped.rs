//! `revenant bench relay --source mapped`: the relay publishing a service's own outbox table
//! (issue 14's shape: `outbox_events` with a varchar event id, a text payload, a flag and a
//! timestamp to mark), against raw confirms at the same window in the same run.
//!
//! The table is made in the bench's throwaway database, never a declared source's: a bench
//! must not publish a live service's rows.

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

use super::{ceiling, enqueue, verify};
use crate::bench::{drain_ids, per_sec, wait_until};
use engine::{
    outbox::relay::{self, Relayed},
    settings::{MappedOutbox, Settings},
};

async fn create_table(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::raw_sql(
        "CREATE TABLE public.outbox_events (id serial PRIMARY KEY, evento_id varchar(64) UNIQUE NOT NULL,
            tipo varchar(100) NOT NULL, routing_key varchar(255) NOT NULL, payload text NOT NULL,
            criado_em timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
            publicado boolean NOT NULL DEFAULT false, publicado_em timestamp);
         CREATE INDEX outbox_events_pendientes ON public.outbox_events (id) WHERE NOT publicado;",
    )
    .execute(pool)
    .await
    .context("cannot create the bench's service table")?;
    Ok(())
}

/// `n` unpublished rows for `queue`, tagged `label`; returns their event ids.
async fn insert_rows(pool: &PgPool, label: &str, queue: &str, n: u32) -> anyhow::Result<HashSet<String>> {
    // Runtime-checked: the service's table is made by this bench, not by Revenant's migrations.
    let ids: Vec<String> = sqlx::query_scalar(
        r#"INSERT INTO public.outbox_events (evento_id, tipo, routing_key, payload)
           SELECT $1 || '-' || i, $1, $2,
                  format('{"order_id":%s,"customer_id":"cust-%s","total_cents":%s,"currency":"EUR","note":"%s"}',
                         i, i % 977, (i * 37) % 100000, repeat('x', 150))
             FROM generate_series(1, $3::bigint) AS i
           RETURNING evento_id"#,
    )
    .bind(label)
    .bind(queue)
    .bind(i64::from(n))
    .fetch_all(pool)
    .await
    .context("cannot insert the bench rows")?;
    Ok(ids.into_iter().collect())
}

/// The bench's mapping; `logical`: read from the commit stream (`capture = "logical"`).
fn mapping(logical: bool) -> MappedOutbox {
    MappedOutbox {
        capture: logical.then(|| "logical".into()),
        name: "bench-mapped".into(),
        relay: true,
        table: "public.outbox_events".into(),
        id_column: "id".into(),
        event_id_column: "evento_id".into(),
        type_column: "tipo".into(),
        routing_key_column: "routing_key".into(),
        payload_column: "payload".into(),
        created_at_column: "criado_em".into(),
        published_flag_column: Some("publicado".into()),
        published_at_column: Some("publicado_em".into()),
        poll_ms: 50,
        ..MappedOutbox::default()
    }
}

pub async fn bench(
    settings: &Settings,
    pool: &PgPool,
    conn: &Connection,
    queue: &str,
    events: u32,
    windows: &[usize],
    sample: u32,
) -> anyhow::Result<()> {
    create_table(pool).await?;
    let logical = matches!(settings.relay.capture, engine::settings::Capture::Logical { .. });
    let source = engine::sources::open(&mapping(logical), pool).await?;
    println!(
        "relay bench, source mapped: a service table (varchar event ids, text payloads of ~250 B, flag + timestamp marks), \
         durable {} queue, mandatory, confirms; {sample} events at window 1, {events} per other run (claim batch {}, \
         mark_batch {}, mark_flush {} ms); capture: {}",
        crate::bench::queue_kind(),
        settings.relay.batch,
        settings.relay.mark_batch,
        settings.relay.mark_flush.as_millis(),
        if logical {
            "logical (the commit stream; a warm-up row makes the slot first, so every run streams)"
        } else {
            "poll"
        }
    );
    if logical {
        // The slot is made by the first relay to run: rows written before it would be held
        // and sent per key as a backlog, not streamed.
        let ids = insert_rows(pool, "bench-mapped-warmup", queue, 1).await?;
        run_relay(settings, pool, &source, settings.relay.window, 1).await?;
        let (_, seen) = drain_ids(conn, queue).await?;
        anyhow::ensure!(ids.iter().all(|id| seen.contains_key(id)), "the warm-up row was not published");
    }
    let mut ratios = Vec::new();
    for &w in windows {
        let n = if w == 1 { sample } else { events };
        let label = format!("bench.raw.w{w}");
        enqueue(pool, &label, queue, n).await?;
        let took = ceiling::raw(pool, conn, &label, w).await?;
        let check = verify(pool, conn, queue, &label).await?;
        anyhow::ensure!(check.lost + check.duplicates == 0, "raw confirms lost or doubled messages");
        let raw = per_sec(n.into(), took);

        let label = format!("bench-mapped-w{w}");
        let ids = insert_rows(pool, &label, queue, n).await?;
        let took = run_relay(settings, pool, &source, w, n).await?;
        let (on_queue, seen) = drain_ids(conn, queue).await?;
        let lost = ids.iter().filter(|id| !seen.contains_key(*id)).count();
        let duplicates: u32 = seen.values().map(|c| c - 1).sum();
        // Runtime-checked: the service's table is made by this bench, not by Revenant's migrations.
        let unmarked: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM public.outbox_events WHERE tipo = $1 AND (NOT publicado OR publicado_em IS NULL)",
        )
        .bind(&label)
        .fetch_one(pool)
        .await?;
        let rate = per_sec(n.into(), took);
        println!(
            "  mapped relay, window {w:<4} {n:>6} rows in {:>6.2} s = {rate:>7.0} events/s (raw {raw:.0}/s); on queue {on_queue}, lost {lost}, duplicates {duplicates}, unmarked {unmarked}",
            took.as_secs_f64()
        );
        anyhow::ensure!(lost == 0 && duplicates == 0 && unmarked == 0, "the mapped relay lost, doubled or left rows");
        ratios.push((w, raw, rate));
    }
    println!();
    for (w, raw, rate) in &ratios {
        println!("relay window={w}: {rate:.0} events/s, raw {raw:.0} events/s (source mapped)");
    }
    for (w, raw, rate) in &ratios {
        println!("ratio relay/raw window={w}: {:.2}", rate / raw.max(1e-9));
    }
    Ok(())
}

/// Runs a relay of `source` at window `w` until it has published `n` rows: the time from its
/// broker connection until then.
async fn run_relay(
    settings: &Settings,
    pool: &PgPool,
    source: &engine::sources::Source,
    w: usize,
    n: u32,
) -> anyhow::Result<Duration> {
    // The capture is the mapped source's own; Revenant's outbox here (the ceilings' rows, all
    // published already) is only polled.
    let cfg = engine::settings::RelaySettings { window: w, capture: Default::default(), ..settings.relay.clone() };
    let r = Relayed { source: source.clone(), stats: Arc::default() };
    let stats = r.stats.clone();
    let stop = CancellationToken::new();
    let handle = tokio::spawn(relay::run_all(
        pool.clone(),
        settings.amqp_url.expose_secret().to_string(),
        cfg,
        Arc::default(),
        vec![r],
        stop.clone(),
    ));
    let connecting = Instant::now();
    while !stats.connected.load(Relaxed) && connecting.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let start = Instant::now();
    let s = stats.clone();
    let waited = wait_until(
        &format!("mapped relay window {w}"),
        Duration::from_secs(30),
        || s.published.load(Relaxed) + s.failed_attempts.load(Relaxed),
        |_| s.published.load(Relaxed) >= u64::from(n),
    )
    .await;
    let took = start.elapsed();
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), handle).await;
    waited?;
    Ok(took)
}
