//! `revenant bench ingest`: the ingester (store, commit, then ack each dead letter) against
//! a consumer that only acks, on two durable queues filled with the same N messages.
//!
//! The messages look like real dead letters: 1 KiB persistent bodies, an `x-death` entry
//! (rejected from `orders.work`) and an exception type and message spread over four failure
//! groups, so the ingester parses, fingerprints and counts them as it would in production.

use std::{
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::StreamExt;
use lapin::{
    BasicProperties, Channel, Confirmation, Connection,
    options::{BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions},
    types::{AMQPValue, FieldArray, FieldTable, LongString},
};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Scratch, declare_queue, delete_queues, interruptible, per_sec, ready, wait_until};
use engine::{
    dead_letter::ingest::{self, IngestStats},
    settings::{IngestSettings, Settings},
};

const BODY_BYTES: usize = 1024;
const ERRORS: [(&str, &str); 4] = [
    ("TimeoutError", "payment gateway did not answer within 5000 ms"),
    ("ValidationError", "order {} has no shipping address"),
    ("KeyError", "'customer_id'"),
    ("ConnectionResetError", "connection reset by peer"),
];

pub async fn run(settings: &Settings, messages: u32) -> anyhow::Result<()> {
    let db = Scratch::create(&settings.database_url).await?;
    let res = async {
        let conn = engine::amqp::connect(&settings.amqp_url, "revenant-bench").await?;
        let ch = conn.create_channel().await.context("cannot open a channel")?;
        ch.confirm_select(ConfirmSelectOptions::default()).await.context("cannot enable confirms")?;
        let raw = declare_queue(&ch, "revenant-bench.ack-only").await?;
        let res = match declare_queue(&ch, "revenant-bench.dlq").await {
            Ok(dlq) => {
                let res = interruptible(bench(settings, &db.pool, &conn, &ch, &raw, &dlq, messages)).await;
                delete_queues(&settings.amqp_url, &[raw, dlq]).await;
                res
            }
            Err(e) => {
                delete_queues(&settings.amqp_url, &[raw]).await;
                Err(e)
            }
        };
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
    ch: &Channel,
    raw: &str,
    dlq: &str,
    n: u32,
) -> anyhow::Result<()> {
    let prefetch = settings.ingest.prefetch;
    println!(
        "ingest bench: {n} dead letters of {BODY_BYTES} B, persistent, in each of two durable queues; prefetch {prefetch}"
    );
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let mut filled = Duration::ZERO;
    for q in [raw, dlq] {
        filled += fill(ch, q, &run_id, n).await?;
    }
    println!("  filled both queues: {:.0} messages/s published with confirms", per_sec(2 * u64::from(n), filled));

    let ack_only = consume_only(conn, raw, prefetch, n).await?;
    println!("  ack only: {n} in {:.2} s = {:.0} messages/s", ack_only.as_secs_f64(), per_sec(n.into(), ack_only));

    let stats = Arc::new(IngestStats::default());
    let cfg = IngestSettings { queues: vec![dlq.to_string()], prefetch, ..settings.ingest.clone() };
    let stop = CancellationToken::new();
    let start = Instant::now();
    let handle = tokio::spawn(ingest::run(pool.clone(), settings.amqp_url.clone(), cfg, stats.clone(), stop.clone()));
    let s = stats.clone();
    let waited = wait_until(
        "ingest",
        Duration::from_secs(30),
        || s.received.load(Relaxed) + s.stored.load(Relaxed),
        |_| s.stored.load(Relaxed) + s.duplicates.load(Relaxed) >= u64::from(n),
    )
    .await;
    let took = start.elapsed();
    stop.cancel();
    match tokio::time::timeout(Duration::from_secs(30), handle).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => return Err(e.context("the ingester failed")),
        Ok(Err(e)) => return Err(anyhow::Error::new(e).context("the ingester panicked")),
        Err(_) => anyhow::bail!("the ingester did not stop within 30 s"),
    }
    waited?;
    println!("  ingest:   {n} in {:.2} s = {:.0} messages/s", took.as_secs_f64(), per_sec(n.into(), took));

    let counts = stats.snapshot();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM dead_letters").fetch_one(pool).await?;
    let groups: i64 = sqlx::query_scalar("SELECT count(*) FROM failure_groups").fetch_one(pool).await?;
    let (left_raw, left_dlq) = (ready(conn, raw).await?, ready(conn, dlq).await?);
    let (base, rate) = (per_sec(n.into(), ack_only), per_sec(n.into(), took));
    println!();
    println!("| consumer | messages | s | messages/s | vs ack only |");
    println!("|---|--:|--:|--:|--:|");
    println!("| ack only (prefetch {prefetch}) | {n} | {:.2} | {base:.0} | 1.0× |", ack_only.as_secs_f64());
    println!(
        "| Revenant ingest: store, commit, ack (prefetch {prefetch}) | {n} | {:.2} | {rate:.0} | {:.2}× |",
        took.as_secs_f64(),
        rate / base
    );
    println!();
    println!(
        "stored rows {rows}, failure groups {groups}, duplicates {}, store errors {}, left on queues {left_raw} + {left_dlq}",
        counts.duplicates, counts.store_errors
    );
    anyhow::ensure!(
        rows == i64::from(n) && left_raw == 0 && left_dlq == 0 && counts.duplicates == 0,
        "the ingest check failed: expected {n} rows and empty queues"
    );
    Ok(())
}

/// A dead letter as RabbitMQ hands it to a DLQ after a consumer rejected it.
fn dead_letter(run_id: &str, i: u32, now: u64) -> (BasicProperties, Vec<u8>) {
    let mut body = format!(
        r#"{{"order_id":{i},"customer_id":"cust-{}","total_cents":{},"currency":"EUR","note":""#,
        i % 977,
        (u64::from(i) * 37) % 100_000
    );
    body.extend(std::iter::repeat_n('x', BODY_BYTES.saturating_sub(body.len() + 2)));
    body.push_str("\"}");
    let mut death = FieldTable::default();
    death.insert("count".into(), AMQPValue::LongLongInt(1));
    death.insert("reason".into(), AMQPValue::LongString("rejected".into()));
    death.insert("queue".into(), AMQPValue::LongString("orders.work".into()));
    death.insert("exchange".into(), AMQPValue::LongString("orders".into()));
    let keys = vec![AMQPValue::LongString(LongString::from("order.placed"))];
    death.insert("routing-keys".into(), AMQPValue::FieldArray(FieldArray::from(keys)));
    death.insert("time".into(), AMQPValue::Timestamp(now));
    let (error_type, message) = ERRORS[i as usize % ERRORS.len()];
    let mut headers = FieldTable::default();
    headers.insert("x-death".into(), AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])));
    headers.insert("x-first-death-reason".into(), AMQPValue::LongString("rejected".into()));
    headers.insert("x-first-death-queue".into(), AMQPValue::LongString("orders.work".into()));
    headers.insert("x-first-death-exchange".into(), AMQPValue::LongString("orders".into()));
    headers.insert("x-exception-type".into(), AMQPValue::LongString(error_type.into()));
    headers.insert("x-exception-message".into(), AMQPValue::LongString(message.replace("{}", &i.to_string()).into()));
    let props = BasicProperties::default()
        .with_message_id(format!("bench-{run_id}-{i}").into())
        .with_type("order.placed".into())
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_timestamp(now)
        .with_headers(headers);
    (props, body.into_bytes())
}

/// Publishes `n` dead letters with confirms, up to 1 000 awaiting at once.
async fn fill(ch: &Channel, queue: &str, run_id: &str, n: u32) -> anyhow::Result<Duration> {
    let now = chrono::Utc::now().timestamp().max(0) as u64;
    let start = Instant::now();
    let mut pending = Vec::with_capacity(1000);
    for i in 0..n {
        let (props, body) = dead_letter(run_id, i, now);
        let confirm = ch
            .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), &body, props)
            .await
            .with_context(|| format!("cannot publish to {queue}"))?;
        pending.push(confirm);
        if pending.len() == 1000 || i + 1 == n {
            for c in pending.drain(..) {
                let c = c.await.context("confirm lost while filling")?;
                anyhow::ensure!(matches!(c, Confirmation::Ack(None)), "the broker refused a bench message: {c:?}");
            }
        }
    }
    Ok(start.elapsed())
}

/// The fastest a consumer can go on this broker: receive and ack, one ack per delivery, as
/// the ingester does, with the same prefetch.
async fn consume_only(conn: &Connection, queue: &str, prefetch: u16, n: u32) -> anyhow::Result<Duration> {
    let ch = conn.create_channel().await.context("cannot open a channel")?;
    ch.basic_qos(prefetch, BasicQosOptions::default()).await.context("basic.qos refused")?;
    let tag = format!("revenant-bench-ack-only-{}", uuid::Uuid::new_v4().simple());
    let start = Instant::now();
    let mut consumer =
        ch.basic_consume(queue.into(), tag.into(), BasicConsumeOptions::default(), FieldTable::default()).await?;
    for got in 0..n {
        let d = match tokio::time::timeout(Duration::from_secs(10), consumer.next()).await {
            Ok(Some(Ok(d))) => d,
            Ok(Some(Err(e))) => return Err(e).context("the ack-only consumer failed"),
            Ok(None) | Err(_) => anyhow::bail!("the ack-only consumer stopped at {got} of {n}"),
        };
        d.acker.ack(BasicAckOptions::default()).await.context("ack failed")?;
    }
    let took = start.elapsed();
    let _ = ch.close(200, "ack-only done".into()).await;
    Ok(took)
}
