//! `revenant demo`: the producer loop and the consumers together, and `--reset`.
//!
//! Policy: a steady, low rate (one business transaction per tick) so the console shows
//! trends rather than a flood; a failed tick (database down) is logged and the next one
//! tries again. On shutdown the tick in progress finishes, the consumers close their
//! channels (unacked deliveries go back to their queues) and `run` returns. The demo only
//! *writes* the outbox and *consumes* the work queues: publishing is the relay's job and
//! reading the DLQs the ingester's, so the demo shows Revenant's own roles at work.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use sqlx::PgPool;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::{
    consumers,
    service::{self, Plan},
    topology::{self, Names},
};

/// Events per second when the operator does not say.
pub const DEFAULT_RATE_PER_SEC: f64 = 2.0;
/// Above this the demo stops being "steady, low": refuse rather than flood a laptop.
pub const MAX_RATE_PER_SEC: f64 = 100.0;
const PROGRESS_EVERY: u64 = 100;

/// Runs the default demo (prefix `demo`) until `shutdown`.
pub async fn run(pool: PgPool, amqp_url: String, rate_per_sec: f64, shutdown: CancellationToken) -> anyhow::Result<()> {
    run_with(pool, amqp_url, Names::default(), rate_per_sec, shutdown).await
}

/// Runs the demo under `names` until `shutdown`.
pub async fn run_with(
    pool: PgPool,
    amqp_url: String,
    names: Names,
    rate_per_sec: f64,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    if !(rate_per_sec > 0.0 && rate_per_sec <= MAX_RATE_PER_SEC) {
        anyhow::bail!("demo rate must be above 0 and at most {MAX_RATE_PER_SEC} events/s, not {rate_per_sec}");
    }
    service::ensure_table(&pool).await.context("cannot create the demo table public.demo_orders")?;
    // Declared before the first event is written, so the relay never finds the exchange
    // missing, and a wrong AMQP_URL fails here rather than in a background task.
    let conn = engine::amqp::connect(&amqp_url, "revenant-demo-setup").await?;
    let declared = async {
        let ch = conn.create_channel().await.context("cannot open a channel")?;
        topology::declare(&ch, &names).await
    }
    .await;
    let _ = conn.close(200, "declared".into()).await;
    declared?;

    let started = Instant::now();
    tracing::info!(prefix = names.prefix(), rate_per_sec, "demo running");
    let consumers = tokio::spawn(consumers::run(amqp_url, names.clone(), started, shutdown.clone()));

    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate_per_sec));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let (mut written, mut failed) = (0u64, 0u64);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        // The thread-local RNG is not Send: draw the plan before the first await.
        let plan = Plan::random(&mut rand::rng());
        match service::write(&pool, &names, &plan).await {
            Ok(_) => {
                written += 1;
                if written % PROGRESS_EVERY == 0 {
                    tracing::info!(written, failed, "demo progress");
                }
            }
            Err(e) => {
                failed += 1;
                tracing::warn!(event_id = %plan.event_id, error = %e, "demo tick failed");
            }
        }
    }
    consumers.await.context("the demo consumers panicked")??;
    tracing::info!(written, failed, "demo stopped");
    Ok(())
}

/// What `reset` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ResetSummary {
    /// Messages still in the deleted queues.
    pub broker_messages: u64,
    pub outbox_rows: u64,
    pub dead_letters: u64,
    pub failure_groups: u64,
    pub queue_samples: u64,
    /// Replay plans that only replayed demo dead letters.
    pub replay_plans: u64,
}

/// Removes the default demo (prefix `demo`); see [`reset_with`].
pub async fn reset(pool: &PgPool, amqp_url: &str) -> anyhow::Result<ResetSummary> {
    reset_with(pool, amqp_url, &Names::default()).await
}

/// Removes what the demo under `names` created. Stop the demo first.
///
/// On the broker: the five work queues and their five DLQs (with their messages), the
/// orders exchange and the DLX. In the database, in one transaction: the table
/// `public.demo_orders`; `outbox` rows whose exchange is the demo's; `dead_letters` read
/// from the demo's DLQs, the `failure_groups` that only they belonged to, the
/// `replay_items` that replayed them and the `replay_plans` left with no item;
/// `queue_samples` of the demo's queues. The audit log is append-only and keeps whatever
/// operators did to demo messages.
pub async fn reset_with(pool: &PgPool, amqp_url: &str, names: &Names) -> anyhow::Result<ResetSummary> {
    let conn = engine::amqp::connect(amqp_url, "revenant-demo-reset").await?;
    let deleted = topology::delete(&conn, names).await;
    let _ = conn.close(200, "demo reset".into()).await;
    let mut summary = ResetSummary { broker_messages: deleted?, ..Default::default() };

    let (dlqs, queues) = (names.dlqs(), names.all_queues());
    let mut tx = pool.begin().await?;
    summary.outbox_rows = sqlx::query!("DELETE FROM outbox WHERE exchange = $1", names.exchange())
        .execute(&mut *tx)
        .await
        .context("cannot delete the demo's outbox rows")?
        .rows_affected();
    // Replays of demo dead letters refer to them; they go too, and so do plans left empty.
    // Looked up by name because the replay tables are younger than the demo's first version.
    let has_replays: bool = sqlx::query_scalar!(r#"SELECT to_regclass('replay_items') IS NOT NULL AS "has!""#)
        .fetch_one(&mut *tx)
        .await
        .context("cannot look up the replay tables")?;
    if has_replays {
        let plans: Vec<i64> = sqlx::query_scalar!(
            "DELETE FROM replay_items i USING dead_letters d
              WHERE i.dead_letter_id = d.id AND d.queue = ANY($1)
             RETURNING i.plan_id",
            &dlqs,
        )
        .fetch_all(&mut *tx)
        .await
        .context("cannot delete replays of the demo's dead letters")?;
        summary.replay_plans = sqlx::query!(
            "DELETE FROM replay_plans p WHERE p.id = ANY($1)
               AND NOT EXISTS (SELECT 1 FROM replay_items i WHERE i.plan_id = p.id)",
            &plans,
        )
        .execute(&mut *tx)
        .await
        .context("cannot delete the demo's replay plans")?
        .rows_affected();
    }
    let groups: Vec<Option<i64>> =
        sqlx::query_scalar!("DELETE FROM dead_letters WHERE queue = ANY($1) RETURNING group_id", &dlqs)
            .fetch_all(&mut *tx)
            .await
            .context("cannot delete the demo's dead letters (does another table still refer to them?)")?;
    summary.dead_letters = groups.len() as u64;
    let mut groups: Vec<i64> = groups.into_iter().flatten().collect();
    groups.sort_unstable();
    groups.dedup();
    // A fingerprint includes the original queue, so a group is normally the demo's alone;
    // the check keeps any group that other dead letters share.
    summary.failure_groups = sqlx::query!(
        "DELETE FROM failure_groups g WHERE g.id = ANY($1)
           AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.group_id = g.id)",
        &groups,
    )
    .execute(&mut *tx)
    .await
    .context("cannot delete the demo's failure groups")?
    .rows_affected();
    summary.queue_samples = sqlx::query!("DELETE FROM queue_samples WHERE queue = ANY($1)", &queues)
        .execute(&mut *tx)
        .await
        .context("cannot delete the demo's queue samples")?
        .rows_affected();
    // Runtime-checked: DDL on the demo service's own table, which is not in the migrations.
    sqlx::query("DROP TABLE IF EXISTS public.demo_orders")
        .execute(&mut *tx)
        .await
        .context("cannot drop public.demo_orders")?;
    tx.commit().await?;
    tracing::info!(prefix = names.prefix(), ?summary, "demo reset");
    Ok(summary)
}
