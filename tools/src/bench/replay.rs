//! `revenant bench replay`: a replay plan (rate limit off) against raw publishing with
//! confirms of the same messages and against RabbitMQ's own shovel moving them, in the same
//! run, to the same kind of queue.
//!
//! Policy: the two sides differ only in what makes a replay safe. Raw is lapin publishing
//! with confirms at the publisher's own window (`PublisherConfig::window`), the same 1 KiB
//! body, message ids and replay headers, persistent and `mandatory`, to a durable queue
//! declared the same way. Each side's queue is then drained and checked by message id (lost,
//! duplicates, unexpected). The plan is sent exactly as the console does (`plan::create`,
//! then the publisher role). `ratio replay/raw` is of the sending alone; `ratio
//! replay/shovel` compares what an operator waits for: the shovel ([`shovel`]) moving the raw
//! queue's messages to another, from its creation until the destination holds them all,
//! against the replay from the operator's confirmation (plan creation included) until the
//! origin queue holds them all. The process's RSS (VmRSS, and VmHWM reset before the replay when the
//! kernel allows) is printed, so a run of 100 000 shows what the publisher holds. The last
//! lines are always `ratio replay/raw: X.XX` then `ratio replay/shovel: X.XX`.

use engine::settings::ExposeSecret;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use engine::replay::{self, CreatePlan, ReplayStats, Selection, Target};
use engine::settings::Settings;
use lapin::{
    BasicProperties,
    options::{BasicPublishOptions, ConfirmSelectOptions},
    types::{AMQPValue, FieldTable, LongString},
};
use tokio_util::sync::CancellationToken;

use super::{Scratch, declare_queue, delete_queues, interruptible, per_sec, wait_for_ready};

mod shovel;

const BODY: usize = 1024;

/// The two ratios the run ends on.
struct Ratios {
    raw: f64,
    shovel: f64,
}

pub async fn run(settings: &Settings, messages: u32) -> anyhow::Result<()> {
    let db = Scratch::create(settings.database_url.expose_secret()).await?;
    let conn = engine::amqp::connect(settings.amqp_url.expose_secret(), "revenant-bench").await?;
    let ch = conn.create_channel().await.context("cannot open a channel")?;
    ch.confirm_select(ConfirmSelectOptions::default()).await.context("cannot enable confirms")?;
    let raw = declare_queue(&ch, "revenant-bench.raw").await?;
    let target = declare_queue(&ch, "revenant-bench.replayed").await?;
    let shovelled = declare_queue(&ch, "revenant-bench.shovelled").await?;
    let queues = Queues { raw: &raw, shovelled: &shovelled, target: &target };
    let res = interruptible(bench(settings, &db, &conn, &ch, &queues, messages)).await;
    delete_queues(settings.amqp_url.expose_secret(), &[raw, target, shovelled]).await;
    let _ = conn.close(200, "bench done".into()).await;
    db.drop_db().await;
    // After the clean-up, whose logs would otherwise come after it: the ratios are the last lines.
    let r = res?;
    println!("ratio replay/raw: {:.2}", r.raw);
    println!("ratio replay/shovel: {:.2}", r.shovel);
    Ok(())
}

/// What one side's queue held, by message id.
struct Check {
    arrived: u32,
    lost: usize,
    duplicates: usize,
    unexpected: usize,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "arrived {}, lost {}, duplicates {}, unexpected {}",
            self.arrived, self.lost, self.duplicates, self.unexpected
        )
    }
}

fn message_id(i: u32) -> String {
    format!("dl-{i}")
}

/// Raw publishes into `raw`, the shovel moves them to `shovelled`, the replay sends to `target`.
struct Queues<'a> {
    raw: &'a str,
    shovelled: &'a str,
    target: &'a str,
}

async fn bench(
    settings: &Settings,
    db: &Scratch,
    conn: &lapin::Connection,
    ch: &lapin::Channel,
    queues: &Queues<'_>,
    n: u32,
) -> anyhow::Result<Ratios> {
    let Queues { raw, shovelled, target } = *queues;
    let cfg = settings.replay.clone();
    let window = cfg.window.max(1);
    println!(
        "replay bench: {n} messages of 1 KiB, persistent, durable {} queues, window {window}, channels {}, mark_batch {}, mark_flush {} ms",
        super::queue_kind(),
        cfg.channels,
        cfg.mark_batch,
        cfg.mark_flush.as_millis()
    );
    let body = vec![b'x'; BODY];
    let expected: HashSet<String> = (1..=n).map(message_id).collect();

    // Raw: publish with confirms, up to `window` awaiting at once (what a good client does).
    let started = Instant::now();
    let mut pending = std::collections::VecDeque::new();
    for i in 1..=n {
        let mut headers = FieldTable::default();
        let replay_id = format!("0:{i}");
        headers.insert("x-revenant-replay-id".into(), AMQPValue::LongString(LongString::from(replay_id.as_bytes())));
        headers.insert("x-revenant-replayed-by".into(), AMQPValue::LongString(LongString::from(&b"cli"[..])));
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(message_id(i).into())
            .with_headers(headers);
        let options = BasicPublishOptions { mandatory: true, ..Default::default() };
        let confirm =
            ch.basic_publish("".into(), raw.into(), options, &body, props).await.context("raw publish failed")?;
        pending.push_back(confirm);
        if pending.len() >= window
            && let Some(c) = pending.pop_front()
        {
            c.await.context("raw confirm failed")?;
        }
    }
    for c in pending {
        c.await.context("raw confirm failed")?;
    }
    let raw_took = started.elapsed();
    // The shovel moves what raw published, as "Move messages" would from a dead-letter queue.
    let shovel_took = shovel::shovel(settings, conn, raw, shovelled, n).await?;
    let raw_check = verify(conn, shovelled, &expected).await?;

    sqlx::query!(
        "INSERT INTO dead_letters (queue, natural_key, message_id, body, body_size, exchange, routing_key, reason,
                                   original_queue, original_exchange, original_routing_keys, fingerprint, delivery_mode)
         SELECT 'bench.dlq', 'bench-' || g, 'dl-' || g, $1, $3, '', 'bench.dlq', 'rejected',
                'bench.work', '', ARRAY['bench.work'], 'bench', 2
         FROM generate_series(1, $2::bigint) g",
        &body,
        n as i64,
        BODY as i32,
    )
    .execute(&db.pool)
    .await
    .context("cannot write the bench's dead letters")?;
    let by = engine::audit::cli_principal();
    let mut req = CreatePlan::new(
        Selection::Filter(engine::dead_letter::store::ListFilter::default()),
        Target::Queue { queue: target.to_string() },
    );
    req.confirm_count = Some(n as i64);
    // The operator's confirmation: the clock the shovel comparison runs on starts here.
    let confirmed = Instant::now();
    let plan = replay::plan::create(&db.pool, &by, None, &req).await.context("cannot create the plan")?;
    let create_took = confirmed.elapsed();

    let rss_before = Rss::read();
    // The peak so far is the raw run's and the inserts'; start the replay's own from here.
    let peak_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let stats = Arc::new(ReplayStats::default());
    let stop = CancellationToken::new();
    let started = Instant::now();
    let publisher = tokio::spawn(replay::publisher::run_with(
        db.pool.clone(),
        settings.amqp_url.expose_secret().to_string(),
        cfg,
        stats.clone(),
        stop.clone(),
    ));
    let mut last = 0;
    let mut moved = Instant::now();
    let mut rss_peak_seen = 0u64;
    let mut arrived_took = None;
    loop {
        if arrived_took.is_none() && super::ready(conn, target).await? >= n {
            arrived_took = Some(confirmed.elapsed());
        }
        let p = replay::progress::get(&db.pool, plan.id).await.context("cannot read progress")?;
        if p.status == "done" {
            break;
        }
        if p.sent != last {
            last = p.sent;
            moved = Instant::now();
        } else if moved.elapsed() > Duration::from_secs(60) {
            anyhow::bail!("replay stuck at {} sent for 60 s", p.sent);
        }
        rss_peak_seen = rss_peak_seen.max(Rss::read().rss_kib);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let replay_took = started.elapsed();
    let rss_after = Rss::read();
    stop.cancel();
    let _ = publisher.await;
    // Done means every item marked sent after its confirm: the origin holds them all by now.
    wait_for_ready(conn, target, n, Duration::from_secs(30)).await?;
    let arrived_took = arrived_took.unwrap_or_else(|| confirmed.elapsed());
    let replay_check = verify(conn, target, &expected).await?;

    let raw_rate = per_sec(n as u64, raw_took);
    let replay_rate = per_sec(n as u64, replay_took);
    let with_creation = per_sec(n as u64, replay_took + create_took);
    let shovel_rate = per_sec(n as u64, shovel_took);
    let operator_rate = per_sec(n as u64, arrived_took);
    println!("raw publish with confirms (window {window}): {raw_rate:>8.0} msg/s  ({:.2} s)", raw_took.as_secs_f64());
    println!(
        "shovel, ack-mode on-confirm, creation until moved: {shovel_rate:>8.0} msg/s  ({:.2} s)",
        shovel_took.as_secs_f64()
    );
    println!("  shovelled by message id: {raw_check}");
    println!("replay plan, no rate limit, sending:    {replay_rate:>8.0} msg/s  ({:.2} s)", replay_took.as_secs_f64());
    println!(
        "replay plan creation (items frozen):    {:.2} s; with it: {with_creation:.0} msg/s, ratio {:.2}",
        create_took.as_secs_f64(),
        with_creation / raw_rate.max(1e-9)
    );
    println!(
        "replay, confirmation (plan creation included) until the origin holds all: {operator_rate:>8.0} msg/s  ({:.2} s)",
        arrived_took.as_secs_f64()
    );
    println!("  replay by message id: {replay_check}; publisher counted {} sent", stats.snapshot().sent);
    println!("rss before the replay: {rss_before}");
    println!(
        "rss after the replay:  {rss_after}{}; highest VmRSS sampled while sending {:.1} MB",
        if peak_reset { " (VmHWM reset before the replay)" } else { " (VmHWM since the process started)" },
        rss_peak_seen as f64 / 1024.0
    );
    let clean = |c: &Check| c.arrived == n && c.lost + c.duplicates + c.unexpected == 0;
    anyhow::ensure!(clean(&raw_check) && clean(&replay_check), "a side lost, doubled or added messages (see above)");
    Ok(Ratios { raw: replay_rate / raw_rate.max(1e-9), shovel: operator_rate / shovel_rate.max(1e-9) })
}

/// VmRSS and VmHWM of this process, in KiB (0 where /proc is not there).
struct Rss {
    rss_kib: u64,
    hwm_kib: u64,
}

impl Rss {
    fn read() -> Self {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        Self { rss_kib: field("VmRSS:"), hwm_kib: field("VmHWM:") }
    }
}

impl std::fmt::Display for Rss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VmRSS {:.1} MB, VmHWM {:.1} MB", self.rss_kib as f64 / 1024.0, self.hwm_kib as f64 / 1024.0)
    }
}

/// Takes every message now on `queue` and compares their ids with `expected`.
async fn verify(conn: &lapin::Connection, queue: &str, expected: &HashSet<String>) -> anyhow::Result<Check> {
    let (got, seen) = super::drain_ids(conn, queue).await?;
    Ok(Check {
        arrived: got,
        lost: expected.iter().filter(|id| !seen.contains_key(*id)).count(),
        duplicates: (got as usize).saturating_sub(seen.len()),
        unexpected: seen.keys().filter(|id| !expected.contains(*id)).count(),
    })
}
