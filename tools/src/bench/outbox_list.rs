//! `revenant bench outbox-list`: the console's outbox lists and counts on a big `outbox`.
//!
//! The table is filled with `generate_series` (fast) to a mix like a busy service's after a
//! month: 94 % published, 4 % pending, 2 % failed, spread over 30 days and scattered through
//! the table (the worst case for any query that cannot use the status index), then vacuumed
//! and analysed as autovacuum would have. Each query is the console's own
//! ([`engine::sources::query`]), run once to warm up, then `runs` times; the target is a
//! p99 of at most 100 ms at 1 M and at 10 M rows.

use engine::settings::ExposeSecret;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::{Scratch, interruptible, ms, percentile};
use engine::{
    settings::Settings,
    sources::{
        NATIVE, Source,
        mapping::Cols,
        query::{self, Bucket, Filter},
    },
};

/// The console's page size (app/src/pages/outbox/api.rs).
const PAGE: i64 = 50;
const TARGET: Duration = Duration::from_millis(100);
/// Rows per INSERT statement, so a 10 M run reports progress and no statement is huge.
const CHUNK: i64 = 1_000_000;

enum Probe {
    List { filter: Filter, after: Option<String> },
    Count(Filter),
}

pub async fn run(settings: &Settings, rows: i64, runs: usize) -> anyhow::Result<()> {
    anyhow::ensure!(rows >= 1_000 && runs >= 1, "use at least 1 000 rows and 1 run");
    let db = Scratch::create(settings.database_url.expose_secret()).await?;
    let src = Source {
        name: NATIVE.into(),
        pool: db.pool.clone(),
        cols: Cols::native(),
        stuck_after: settings.outbox_stuck_after,
        stuck_attempts: 3,
        relay: false,
        poll: std::time::Duration::from_millis(250),
        capture: Default::default(),
        database_url: None,
    };
    let res = interruptible(bench(&src, rows, runs)).await;
    drop(src);
    db.drop_db().await;
    res
}

async fn bench(src: &Source, rows: i64, runs: usize) -> anyhow::Result<()> {
    let pool = &src.pool;
    let started = Instant::now();
    fill(pool, rows).await?;
    let filled = started.elapsed();
    let started = Instant::now();
    sqlx::query!("VACUUM (ANALYZE) outbox").execute(pool).await.context("VACUUM ANALYZE failed")?;
    let size: String = sqlx::query_scalar!(r#"SELECT pg_size_pretty(pg_total_relation_size('outbox')) AS "size!""#)
        .fetch_one(pool)
        .await?;
    println!(
        "outbox-list bench: {rows} rows ({size} with indexes) inserted in {:.1} s, vacuumed and analysed in {:.1} s; \
         page size {PAGE}, {runs} timed runs per query",
        filled.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    let f = |bucket| Filter { bucket, ..Filter::default() };
    let (deep, pages) = follow(src, &f(Bucket::Pending), 200).await?;
    let mid = mid_cursor(pool, rows).await?;
    let probes = vec![
        ("pending, first page".to_string(), Probe::List { filter: f(Bucket::Pending), after: None }),
        (format!("pending, page {pages} (cursor followed)"), Probe::List { filter: f(Bucket::Pending), after: deep }),
        (
            "pending, event type = order.paid".into(),
            Probe::List { filter: Filter { event_type: Some("order.paid".into()), ..f(Bucket::Pending) }, after: None },
        ),
        ("stuck, first page".into(), Probe::List { filter: f(Bucket::Stuck), after: None }),
        ("failed, first page".into(), Probe::List { filter: f(Bucket::Failed), after: None }),
        (
            "failed, error ~ 'NO_ROUTE' (a third of failed)".into(),
            Probe::List { filter: Filter { error: Some("NO_ROUTE".into()), ..f(Bucket::Failed) }, after: None },
        ),
        (
            "failed, error ~ 'billing' (2 % of failed)".into(),
            Probe::List { filter: Filter { error: Some("billing".into()), ..f(Bucket::Failed) }, after: None },
        ),
        (
            "failed, error ~ 'no such text' (matches nothing)".into(),
            Probe::List { filter: Filter { error: Some("no such text".into()), ..f(Bucket::Failed) }, after: None },
        ),
        ("published, first page (newest)".into(), Probe::List { filter: f(Bucket::Published), after: None }),
        ("published, mid-table cursor".into(), Probe::List { filter: f(Bucket::Published), after: Some(mid) }),
        ("count pending (capped at 10 000)".into(), Probe::Count(f(Bucket::Pending))),
        ("count stuck (capped)".into(), Probe::Count(f(Bucket::Stuck))),
        ("count failed (capped)".into(), Probe::Count(f(Bucket::Failed))),
        (
            "count failed, error ~ 'billing'".into(),
            Probe::Count(Filter { error: Some("billing".into()), ..f(Bucket::Failed) }),
        ),
    ];

    println!();
    println!("| query | rows | p50 ms | p99 ms | max ms | p99 ≤ 100 ms |");
    println!("|---|--:|--:|--:|--:|:-:|");
    let mut missed = Vec::new();
    for (name, probe) in &probes {
        let (mut samples, n) = time(src, probe, runs).await.with_context(|| format!("query `{name}` failed"))?;
        samples.sort();
        let p99 = percentile(&samples, 99.0);
        let ok = p99 <= TARGET;
        if !ok {
            missed.push(name.clone());
        }
        println!(
            "| {name} | {n} | {} | {} | {} | {} |",
            ms(percentile(&samples, 50.0)),
            ms(p99),
            ms(samples.last().copied().unwrap_or_default()),
            if ok { "yes" } else { "**no**" }
        );
    }
    println!();
    if missed.is_empty() {
        println!("every query met p99 ≤ 100 ms at {rows} rows");
    } else {
        println!("missed p99 ≤ 100 ms at {rows} rows: {}", missed.join("; "));
    }
    Ok(())
}

/// Inserts the rows in chunks; ids follow `created_at`, as they do in a real outbox.
async fn fill(pool: &PgPool, rows: i64) -> anyhow::Result<()> {
    let mut from = 1;
    while from <= rows {
        let to = (from + CHUNK - 1).min(rows);
        sqlx::query!(
            r#"INSERT INTO outbox (event_type, exchange, routing_key, payload, created_at, status, published_at,
                                   attempts, last_error, next_attempt_at)
               SELECT t, 'orders', t,
                      convert_to(format('{"order_id":%s,"customer_id":"cust-%s","total_cents":%s}', i, i % 977, (i * 37) % 100000), 'UTF8'),
                      ts,
                      CASE WHEN r < 2 THEN 'failed' WHEN r < 6 THEN 'pending' ELSE 'published' END,
                      CASE WHEN r >= 6 THEN ts + interval '40 ms' END,
                      CASE WHEN r < 2 THEN 10 WHEN r = 2 THEN 4 WHEN r < 6 THEN 0 ELSE 1 END,
                      CASE WHEN r < 2 THEN
                               CASE WHEN i % 50 = 0 THEN 'exchange `billing` does not exist (NOT_FOUND)'
                                    WHEN i % 3 = 0 THEN 'returned by the broker: 312 NO_ROUTE'
                                    WHEN i % 3 = 1 THEN 'no confirm within 10000 ms'
                                    ELSE 'nacked by the broker' END
                           WHEN r = 2 THEN 'no confirm within 10000 ms' END,
                      ts
                 FROM (SELECT i, (ARRAY['order.placed','order.paid','order.shipped','invoice.issued','customer.updated'])[1 + i % 5] AS t,
                              now() - ($2::float8 - i) * (interval '30 days' / $2::float8) AS ts,
                              abs(hashint8(i)::bigint) % 100 AS r
                         FROM generate_series($1::bigint, $3::bigint) AS i) g"#,
            from,
            rows as f64,
            to,
        )
        .execute(pool)
        .await
        .with_context(|| format!("cannot insert rows {from}..={to}"))?;
        if rows > CHUNK {
            println!("  inserted {to} of {rows}");
        }
        from = to + 1;
    }
    Ok(())
}

/// Follows `pages - 1` next-page cursors; returns the cursor of the last page reached.
async fn follow(src: &Source, f: &Filter, pages: usize) -> anyhow::Result<(Option<String>, usize)> {
    let mut after: Option<String> = None;
    let mut page = 1;
    while page < pages {
        let (_, next) = query::list(src, f, after.as_deref(), PAGE).await?;
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
        page += 1;
    }
    Ok((after, page))
}

/// A cursor at the middle of the table, built the way [`query::list`] builds its own.
async fn mid_cursor(pool: &PgPool, rows: i64) -> anyhow::Result<String> {
    let row = sqlx::query!(
        "SELECT created_at, id FROM outbox WHERE id >= $1 AND status = 'published' ORDER BY id LIMIT 1",
        rows / 2,
    )
    .fetch_one(pool)
    .await
    .context("no published row in the middle of the table")?;
    let (at, id): (DateTime<Utc>, i64) = (row.created_at, row.id);
    Ok(format!("{}~{id}", at.timestamp_micros()))
}

/// One warm-up, then `runs` timings; also the rows the query returned (or counted).
async fn time(src: &Source, probe: &Probe, runs: usize) -> anyhow::Result<(Vec<Duration>, i64)> {
    let once = || async {
        Ok::<_, sqlx::Error>(match probe {
            Probe::List { filter, after } => query::list(src, filter, after.as_deref(), PAGE).await?.0.len() as i64,
            Probe::Count(filter) => query::count(src, filter).await?.n,
        })
    };
    let n = once().await?;
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        once().await?;
        samples.push(t.elapsed());
    }
    Ok((samples, n))
}
