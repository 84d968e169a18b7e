//! `revenant bench writer`: what Revenant's outbox costs the service that writes it.
//!
//! The service's own transaction (insert a business row and an outbox row, commit) run by
//! `clients` concurrent writers, each on its own connection, for `secs` seconds per run, on
//! three outbox tables of one throwaway database, in alternating order round after round,
//! each run right after a `CHECKPOINT`:
//! - `installed`: `revenant.outbox` exactly as the migrations (and `revenant outbox install`)
//!   leave it, which is what a service writes;
//! - `plain`: a copy with the same columns, defaults, constraints and indexes and no trigger;
//! - `notify`: that copy plus the insert NOTIFY trigger of earlier versions, with one idle
//!   listener as a relay had: what the trigger cost, measured beside the others.
//!
//! The last lines are `ratio writer/plain clients=N: X.XX`, each the median of its rounds'
//! ratios (target ≥ 0.95); the notify ratios are printed before them.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use engine::settings::{ExposeSecret, Settings};
use sqlx::{Connection, PgPool, postgres::PgPoolOptions};

use super::{Scratch, interruptible, relay::median};

/// The tables the writers insert into, in the order of the first round.
const VARIANTS: [(&str, &str); 3] = [
    ("installed", "revenant.outbox"),
    ("plain", "public.bench_plain_outbox"),
    ("notify", "public.bench_notify_outbox"),
];

pub async fn run(settings: &Settings, clients: &[usize], secs: u64, rounds: usize) -> anyhow::Result<()> {
    anyhow::ensure!(
        !clients.is_empty() && clients.iter().all(|&c| (1..=90).contains(&c)),
        "--clients takes 1..=90 each"
    );
    anyhow::ensure!(rounds >= 1 && secs >= 1, "--rounds and --secs must be at least 1");
    let scratch = Scratch::create(settings.database_url.expose_secret()).await?;
    let res = interruptible(measure(&scratch, clients, secs, rounds)).await;
    scratch.drop_db().await;
    res
}

async fn measure(scratch: &Scratch, clients: &[usize], secs: u64, rounds: usize) -> anyhow::Result<()> {
    prepare(&scratch.pool).await?;
    let most = clients.iter().copied().max().unwrap_or(1) as u32;
    let writers = PgPoolOptions::new()
        .max_connections(most)
        .min_connections(most)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(scratch.options())
        .await?;
    // A relay of earlier versions listened on the channel; so does this idle listener.
    let mut listener = sqlx::postgres::PgListener::connect_with(&scratch.pool).await?;
    listener.listen(engine::outbox::store::NOTIFY_CHANNEL).await?;
    let drain = tokio::spawn(async move { while listener.recv().await.is_ok() {} });
    let (wal_level, sync): (String, String) =
        sqlx::query_as("SELECT current_setting('wal_level'), current_setting('synchronous_commit')")
            .fetch_one(&scratch.pool)
            .await?;
    println!(
        "writer: business row + outbox row per transaction, {secs} s per run, {rounds} rounds, wal_level={wal_level}, synchronous_commit={sync}"
    );
    let mut lines = Vec::new();
    for &n in clients {
        let mut ratios = Vec::new();
        let mut notify_ratios = Vec::new();
        for round in 0..rounds {
            let mut rates = [0f64; 3];
            // Each round starts with the next variant, so none always runs first.
            for k in 0..VARIANTS.len() {
                let v = (round + k) % VARIANTS.len();
                // Every run starts right after a checkpoint, so each pays the same full-page
                // writes and none is hit by one that a run before it triggered.
                sqlx::query("CHECKPOINT").execute(&scratch.pool).await?;
                rates[v] = run_writers(&writers, VARIANTS[v].1, n, Duration::from_secs(secs)).await?;
            }
            println!(
                "clients={n} round {}: installed {:.0}/s, plain {:.0}/s, notify {:.0}/s",
                round + 1,
                rates[0],
                rates[1],
                rates[2]
            );
            ratios.push(rates[0] / rates[1].max(1e-9));
            notify_ratios.push(rates[2] / rates[1].max(1e-9));
        }
        println!(
            "ratio writer-notify/plain clients={n}: {:.2} (the insert trigger of earlier versions)",
            median(&mut notify_ratios)
        );
        lines.push(format!("ratio writer/plain clients={n}: {:.2}", median(&mut ratios)));
    }
    drain.abort();
    writers.close().await;
    for l in lines {
        println!("{l}");
    }
    Ok(())
}

/// The business table and the two copies of the outbox, next to the installed one.
async fn prepare(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::raw_sql(
        "CREATE TABLE public.bench_orders (
             id bigserial PRIMARY KEY,
             customer text NOT NULL,
             amount_cents bigint NOT NULL,
             created_at timestamptz NOT NULL DEFAULT now());
         CREATE TABLE public.bench_plain_outbox (LIKE revenant.outbox INCLUDING ALL);
         CREATE TABLE public.bench_notify_outbox (LIKE revenant.outbox INCLUDING ALL);
         CREATE TRIGGER outbox_notify AFTER INSERT ON public.bench_notify_outbox
             FOR EACH STATEMENT EXECUTE FUNCTION revenant.outbox_notify();",
    )
    .execute(pool)
    .await?;
    let installed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'revenant.outbox'::regclass AND NOT tgisinternal AND tgtype & 4 = 4",
    )
    .fetch_one(pool)
    .await?;
    println!("revenant.outbox as installed: {installed} insert trigger(s)");
    Ok(())
}

/// `n` writers committing the service's transaction into `table` for `secs`; commits/s.
async fn run_writers(pool: &PgPool, table: &str, n: usize, secs: Duration) -> anyhow::Result<f64> {
    // Runtime-checked: the table is one of VARIANTS; the statement is the same text otherwise.
    let insert = Arc::new(format!(
        "INSERT INTO {table} (event_type, exchange, routing_key, payload, headers)
         VALUES ('order.placed', 'orders', $1, $2, '{{}}')"
    ));
    let gate = Arc::new(tokio::sync::Barrier::new(n + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..n {
        let (pool, insert, gate) = (pool.clone(), insert.clone(), gate.clone());
        tasks.spawn(async move {
            let mut conn = pool.acquire().await?;
            gate.wait().await;
            let deadline = Instant::now() + secs;
            let mut commits = 0u64;
            while Instant::now() < deadline {
                let mut tx = conn.begin().await?;
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO public.bench_orders (customer, amount_cents) VALUES ($1, $2) RETURNING id",
                )
                .bind(format!("customer-{w}"))
                .bind(1_999i64)
                .fetch_one(&mut *tx)
                .await?;
                let payload = format!(r#"{{"order_id":{id},"customer":"customer-{w}","amount_cents":1999}}"#);
                sqlx::query(sqlx::AssertSqlSafe(insert.as_str()))
                    .bind(format!("order.{id}"))
                    .bind(payload.into_bytes())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                commits += 1;
            }
            anyhow::Ok(commits)
        });
    }
    gate.wait().await;
    let started = Instant::now();
    let mut total = 0u64;
    while let Some(done) = tasks.join_next().await {
        total += done??;
    }
    Ok(super::per_sec(total, started.elapsed()))
}
