//! `revenant bench replay`: a replay plan (rate limit off) against raw publishing with
//! confirms of the same number of messages, in the same run, to the same kind of queue.
//!
//! The dead letters are written straight into a throwaway store (their content does not
//! matter to the publisher's speed); the plan is created and sent exactly as the console does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use engine::replay::{self, CreatePlan, ReplayStats, Selection, Target};
use engine::settings::Settings;
use lapin::{BasicProperties, options::BasicPublishOptions, options::ConfirmSelectOptions};
use tokio_util::sync::CancellationToken;

use super::{Scratch, declare_queue, delete_queues, interruptible, per_sec, ready};

const WINDOW: usize = 256;

pub async fn run(settings: &Settings, messages: u32) -> anyhow::Result<()> {
    let db = Scratch::create(&settings.database_url).await?;
    let conn = engine::amqp::connect(&settings.amqp_url, "revenant-bench").await?;
    let ch = conn.create_channel().await.context("cannot open a channel")?;
    ch.confirm_select(ConfirmSelectOptions::default()).await.context("cannot enable confirms")?;
    let raw = declare_queue(&ch, "revenant-bench.raw").await?;
    let target = declare_queue(&ch, "revenant-bench.replayed").await?;
    let res = interruptible(bench(settings, &db, &conn, &ch, &raw, &target, messages)).await;
    delete_queues(&settings.amqp_url, &[raw, target]).await;
    let _ = conn.close(200, "bench done".into()).await;
    db.drop_db().await;
    res
}

async fn bench(
    settings: &Settings,
    db: &Scratch,
    conn: &lapin::Connection,
    ch: &lapin::Channel,
    raw: &str,
    target: &str,
    n: u32,
) -> anyhow::Result<()> {
    println!("replay bench: {n} messages of 1 KiB, persistent, durable queues");
    let body = vec![b'x'; 1024];
    // Raw: publish with confirms, up to WINDOW awaiting at once (what a good client does).
    let started = Instant::now();
    let mut pending = std::collections::VecDeque::new();
    for i in 0..n {
        let props = BasicProperties::default().with_delivery_mode(2).with_message_id(format!("raw-{i}").into());
        let confirm = ch
            .basic_publish(
                "".into(),
                raw.into(),
                BasicPublishOptions { mandatory: true, ..Default::default() },
                &body,
                props,
            )
            .await
            .context("raw publish failed")?;
        pending.push_back(confirm);
        if pending.len() >= WINDOW {
            if let Some(c) = pending.pop_front() {
                c.await.context("raw confirm failed")?;
            }
        }
    }
    for c in pending {
        c.await.context("raw confirm failed")?;
    }
    let raw_took = started.elapsed();
    anyhow::ensure!(ready(conn, raw).await? == n, "raw: not every message arrived");

    sqlx::query(
        "INSERT INTO dead_letters (queue, natural_key, message_id, body, body_size, exchange, routing_key, reason,
                                   original_queue, original_exchange, original_routing_keys, fingerprint, delivery_mode)
         SELECT 'bench.dlq', 'bench-' || g, 'dl-' || g, $1, 1024, '', 'bench.dlq', 'rejected',
                'bench.work', '', ARRAY['bench.work'], 'bench', 2
         FROM generate_series(1, $2) g",
    )
    .bind(&body)
    .bind(n as i64)
    .execute(&db.pool)
    .await
    .context("cannot write the bench's dead letters")?;
    let by = engine::audit::cli_principal();
    let mut req = CreatePlan::new(
        Selection::Filter(engine::dead_letter::store::ListFilter::default()),
        Target::Queue { queue: target.to_string() },
    );
    req.confirm_count = Some(n as i64);
    let stats = Arc::new(ReplayStats::default());
    let stop = CancellationToken::new();
    let started = Instant::now();
    let plan = replay::plan::create(&db.pool, &by, None, &req).await.context("cannot create the plan")?;
    let publisher =
        tokio::spawn(replay::publisher::run(db.pool.clone(), settings.amqp_url.clone(), stats.clone(), stop.clone()));
    let mut last = 0;
    let mut moved = Instant::now();
    loop {
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
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let replay_took = started.elapsed();
    stop.cancel();
    let _ = publisher.await;
    let arrived = ready(conn, target).await?;
    let raw_rate = per_sec(n as u64, raw_took);
    let replay_rate = per_sec(n as u64, replay_took);
    println!("raw publish with confirms (window {WINDOW}): {raw_rate:>8.0} msg/s  ({:.2} s)", raw_took.as_secs_f64());
    println!(
        "replay plan, no rate limit:              {replay_rate:>8.0} msg/s  ({:.2} s, plan creation included)",
        replay_took.as_secs_f64()
    );
    println!("ratio replay / raw: {:.2}", replay_rate / raw_rate.max(1e-9));
    println!("arrived: {arrived} of {n} (lost = {}, extra = {})", n.saturating_sub(arrived), arrived.saturating_sub(n));
    Ok(())
}
