//! `revenant bench …`: speed figures for the relay, the ingester and the outbox lists.
//!
//! Policy: speed is measured here and printed as rates, ratios and percentiles for a human
//! to read (docs/BENCHMARKS.md), never asserted in tests, where a shared machine would make
//! any threshold flaky. Each bench works in a throwaway database `revenant_bench_<uuid>` on
//! DATABASE_URL's server and in uniquely named queues on AMQP_URL, and removes both at the
//! end, also when it fails or is interrupted with Ctrl-C. Set-up failures abort the bench
//! with a message naming what could not be done.

pub mod dead_letter_list;
pub mod ingest;
pub mod outbox_list;
pub mod relay;
pub mod replay;
pub mod writer;

use std::{
    collections::HashMap,
    future::Future,
    sync::atomic::{AtomicBool, Ordering::Relaxed},
    time::Duration,
};

use anyhow::Context;
use clap::Subcommand;
use engine::settings::Settings;
use futures::StreamExt;
use lapin::{
    Channel,
    options::{BasicConsumeOptions, QueueDeclareOptions, QueueDeleteOptions},
    types::FieldTable,
};
use sqlx::{
    Connection, PgConnection, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The outbox relay against raw confirms at the same window and a one-row-at-a-time loop.
    Relay {
        /// Events each windowed run publishes.
        #[arg(long, default_value_t = 20_000)]
        events: u32,
        /// Confirm windows to run the relay (and raw confirms) with, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 64, 128, 256])]
        window: Vec<usize>,
        /// Events for the one-at-a-time runs (the baseline and window 1), which are slow.
        #[arg(long, default_value_t = 5_000)]
        sample: u32,
        /// Seconds of the commit-to-confirm latency run at half the peak rate (0 skips it).
        #[arg(long, default_value_t = 10)]
        latency_secs: u64,
        /// Which outbox the relay reads (a bench never publishes a declared source's rows).
        #[arg(long, value_enum, default_value_t = relay::BenchSource::Revenant)]
        source: relay::BenchSource,
        /// Quorum queues instead of classic ones (for a cluster: `AMQP_URLS`, docs/CLUSTER.md).
        #[arg(long)]
        quorum: bool,
        /// Rounds of raw then relay per window; each ratio printed is the rounds' median.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Publishers, each on a connection of its own, that measure the broker's limit at
        /// window 128 (the relay's ceiling beyond one channel).
        #[arg(long, default_value_t = 4)]
        publishers: usize,
        /// How the relay finds the rows: `poll` or `logical` (the commit stream); default
        /// `relay.capture` of the settings.
        #[arg(long)]
        capture: Option<String>,
    },
    /// The dead-letter ingester against a consumer that only acks.
    Ingest {
        /// Messages (1 KiB, persistent) in each of the three queues (ack-only, ingest, one-at-a-time).
        #[arg(long, default_value_t = 20_000)]
        messages: u32,
        /// Also ingest into a store already holding this many dead letters (loaded as the
        /// dead-letter-list bench loads them) and compare with the empty store (0 skips it).
        #[arg(long, default_value_t = 0)]
        prefill: i64,
        /// Quorum queues instead of classic ones.
        #[arg(long)]
        quorum: bool,
    },
    /// A replay plan (no rate limit) against raw publishing with confirms and RabbitMQ's shovel.
    Replay {
        #[arg(long, default_value_t = 20_000)]
        messages: u32,
        /// Quorum queues instead of classic ones.
        #[arg(long)]
        quorum: bool,
    },
    /// The service's own transaction (business row + outbox row) at 16 and 64 writers, on the
    /// outbox as installed against the same table without any trigger.
    Writer {
        /// Concurrent writers, each on its own connection, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = [16, 64])]
        clients: Vec<usize>,
        /// Seconds each run lasts.
        #[arg(long, default_value_t = 4)]
        secs: u64,
        /// Rounds per client count; each ratio printed is the rounds' median.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Outbox list and count queries on a large `outbox` table.
    OutboxList {
        /// Rows to generate (10 000 000 is the long run).
        #[arg(long, default_value_t = 1_000_000)]
        rows: i64,
        /// Timed runs of each query.
        #[arg(long, default_value_t = 50)]
        runs: usize,
    },
    /// Dead-letter list, count, failure-group, detail and story queries on a big store.
    DeadLetterList {
        /// Dead letters to generate (10 000 000 is the long run).
        #[arg(long, default_value_t = 1_000_000)]
        rows: i64,
        /// Timed runs of each query.
        #[arg(long, default_value_t = 50)]
        runs: usize,
        /// Leave the loaded database in place (its name is printed) for `--database`.
        #[arg(long)]
        keep: bool,
        /// Time the queries on a database a `--keep` run loaded, without loading or dropping it.
        #[arg(long)]
        database: Option<String>,
    },
}

pub async fn run(cmd: BenchCommand, settings: &Settings) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Relay { events, window, sample, latency_secs, source, quorum, rounds, publishers, capture } => {
            QUORUM.store(quorum, Relaxed);
            let mut settings = settings.clone();
            if let Some(c) = capture {
                settings.relay.capture = engine::settings::parse_capture(Some(&c), None, None)
                    .map_err(|e| anyhow::anyhow!("--capture: {e}"))?;
            }
            relay::run(&settings, events, &window, sample, latency_secs, source, rounds, publishers).await
        }
        BenchCommand::Ingest { messages, quorum, prefill } => {
            QUORUM.store(quorum, Relaxed);
            ingest::run(settings, messages, prefill).await
        }
        BenchCommand::Replay { messages, quorum } => {
            QUORUM.store(quorum, Relaxed);
            replay::run(settings, messages).await
        }
        BenchCommand::Writer { clients, secs, rounds } => writer::run(settings, &clients, secs, rounds).await,
        BenchCommand::OutboxList { rows, runs } => outbox_list::run(settings, rows, runs).await,
        BenchCommand::DeadLetterList { rows, runs, keep, database } => {
            dead_letter_list::run(settings, rows, runs, keep, database).await
        }
    }
}

/// A throwaway, migrated database; [`Scratch::drop_db`] removes it.
pub struct Scratch {
    pub pool: PgPool,
    pub name: String,
    admin: PgConnectOptions,
}

impl Scratch {
    pub async fn create(database_url: &str) -> anyhow::Result<Scratch> {
        let admin = engine::db::options(database_url)?;
        let name = format!("revenant_bench_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect_with(&admin).await.context("cannot connect to DATABASE_URL")?;
        // Runtime-checked: CREATE DATABASE of a name made at run time.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut conn)
            .await
            .with_context(|| format!("cannot create the bench database {name} (does the role have CREATEDB?)"))?;
        let _ = conn.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(12)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(admin.clone().database(&name))
            .await
            .with_context(|| format!("cannot connect to the bench database {name}"))?;
        let scratch = Scratch { pool, name, admin };
        if let Err(e) = engine::db::migrate(&scratch.pool).await {
            scratch.drop_db().await;
            return Err(e);
        }
        println!("bench database: {}", scratch.name);
        Ok(scratch)
    }

    /// Connection options for this database (for a pool of another size).
    pub fn options(&self) -> PgConnectOptions {
        self.admin.clone().database(&self.name)
    }

    /// Drops the database, forcing out any connection a bench task still holds.
    pub async fn drop_db(self) {
        self.pool.close().await;
        let res = async {
            let mut conn = PgConnection::connect_with(&self.admin).await?;
            // A commit-stream relay's slot would keep the database from being dropped.
            engine::outbox::logical::slots::drop_all_of(&mut conn, &self.name).await;
            // Runtime-checked: DROP DATABASE of a name made at run time.
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name)))
                .execute(&mut conn)
                .await?;
            conn.close().await
        }
        .await;
        if let Err(e) = res {
            eprintln!("revenant bench: could not drop {} ({e}); drop it by hand", self.name);
        }
    }
}

/// Runs `body`, or stops at Ctrl-C so the caller still cleans up.
pub async fn interruptible<T>(body: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::select! {
        r = body => r,
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted"),
    }
}

/// A durable queue with a unique name: persistent messages in it are written to disk, as
/// they would be in production.
/// `--quorum`: every queue of this bench run (the ceilings' too) is a quorum queue.
static QUORUM: AtomicBool = AtomicBool::new(false);

/// The bench's queue type as its header says it: `classic` or `quorum`.
pub fn queue_kind() -> &'static str {
    if QUORUM.load(Relaxed) { "quorum" } else { "classic" }
}

pub async fn declare_queue(ch: &Channel, prefix: &str) -> anyhow::Result<String> {
    let name = format!("{prefix}.{}", uuid::Uuid::new_v4().simple());
    let opts = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), lapin::types::AMQPValue::LongString(queue_kind().into()));
    ch.queue_declare(name.as_str().into(), opts, args).await.with_context(|| format!("cannot declare queue {name}"))?;
    Ok(name)
}

/// Deletes the bench's queues on a connection of its own: the bench's may be the reason it
/// failed (a broker restart mid-run), and a durable queue would otherwise stay behind.
pub async fn delete_queues(amqp_url: &str, queues: &[String]) {
    let mut last = String::new();
    for attempt in 0..5 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let res = async {
            let conn = engine::amqp::connect(amqp_url, "revenant-bench cleanup").await?;
            let ch = conn.create_channel().await.context("cannot open a channel")?;
            for q in queues {
                ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                    .await
                    .with_context(|| format!("cannot delete queue {q}"))?;
            }
            let _ = conn.close(200, "bench cleanup done".into()).await;
            Ok::<_, anyhow::Error>(())
        }
        .await;
        match res {
            Ok(()) => return,
            Err(e) => last = format!("{e:#}"),
        }
    }
    eprintln!("revenant bench: could not delete queues {queues:?} ({last}); delete them by hand");
}

/// Ready messages in `queue` (a passive declare, on its own channel since a failure closes it).
pub async fn ready(conn: &lapin::Connection, queue: &str) -> anyhow::Result<u32> {
    let ch = conn.create_channel().await.context("cannot open a channel")?;
    let opts = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
    let q = ch.queue_declare(queue.into(), opts, FieldTable::default()).await.context("passive declare failed")?;
    let _ = ch.close(200, "".into()).await;
    Ok(q.message_count())
}

/// Waits until `queue` holds at least `n` ready messages (polled every 2 ms on one channel).
pub async fn wait_for_ready(conn: &lapin::Connection, queue: &str, n: u32, timeout: Duration) -> anyhow::Result<()> {
    let ch = conn.create_channel().await.context("cannot open a channel")?;
    let opts = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
    let started = std::time::Instant::now();
    let res = loop {
        let q = ch.queue_declare(queue.into(), opts, FieldTable::default()).await.context("passive declare failed")?;
        if q.message_count() >= n {
            break Ok(());
        }
        if started.elapsed() > timeout {
            break Err(anyhow::anyhow!(
                "{queue} holds {} of {n} messages after {} s",
                q.message_count(),
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let _ = ch.close(200, "".into()).await;
    res
}

/// Takes every message now ready on `queue` (no-ack) and counts them by `message_id`:
/// (how many arrived, id → copies), for the benches' lost / duplicates / unexpected checks.
pub async fn drain_ids(conn: &lapin::Connection, queue: &str) -> anyhow::Result<(u32, HashMap<String, u32>)> {
    let on_queue = ready(conn, queue).await?;
    let ch = conn.create_channel().await.context("cannot open a channel")?;
    let opts = BasicConsumeOptions { no_ack: true, ..BasicConsumeOptions::default() };
    let tag = format!("revenant-bench-drain-{}", uuid::Uuid::new_v4().simple());
    let mut consumer = ch.basic_consume(queue.into(), tag.into(), opts, FieldTable::default()).await?;
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut got = 0u32;
    while got < on_queue {
        let d = match tokio::time::timeout(Duration::from_secs(10), consumer.next()).await {
            Ok(Some(Ok(d))) => d,
            Ok(Some(Err(e))) => return Err(e).context("draining the bench queue failed"),
            Ok(None) | Err(_) => anyhow::bail!("draining the bench queue stopped at {got} of {on_queue}"),
        };
        got += 1;
        let id = d.properties.message_id().as_ref().map(|m| m.as_str().to_string()).unwrap_or_default();
        *seen.entry(id).or_default() += 1;
    }
    let _ = ch.close(200, "drained".into()).await;
    Ok((got, seen))
}

/// Polls `done` every 10 ms until it returns true; fails when `progress` has not moved for
/// `stall`, so a bench that cannot finish says so instead of hanging.
pub async fn wait_until(
    what: &str,
    stall: Duration,
    mut progress: impl FnMut() -> u64,
    mut done: impl FnMut(u64) -> bool,
) -> anyhow::Result<()> {
    let mut last = progress();
    let mut moved = tokio::time::Instant::now();
    loop {
        let now = progress();
        if done(now) {
            return Ok(());
        }
        if now != last {
            last = now;
            moved = tokio::time::Instant::now();
        } else if moved.elapsed() > stall {
            anyhow::bail!("{what}: stuck at {now} for {} s", stall.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Nearest-rank percentile of sorted samples (`p` in 0..=100).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn per_sec(n: u64, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64().max(1e-9)
}

pub fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let s: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&s, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&s, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&s[..1], 99.0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }
}
