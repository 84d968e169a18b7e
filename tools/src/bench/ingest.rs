//! `revenant bench ingest`: the ingester (store a batch, commit, then ack it) against two
//! baselines on three durable queues filled with the same N messages: a consumer that only
//! acks (the broker's speed), and one that stores each message in its own transaction
//! (`store::insert_committed`), commits, then acks it (the speed of doing it one at a time).
//!
//! The messages look like real dead letters: 1 KiB persistent bodies, an `x-death` entry
//! (rejected from `orders.work`) and an exception type and message spread over four failure
//! groups, so the ingester parses, fingerprints and counts them as it would in production.
//! Each storing run is checked by message id (lost, stored twice, unexpected); the last two
//! lines are the ratios. With `--prefill N` the ingester then runs once more into a store
//! already holding N dead letters (loaded as `bench dead-letter-list` loads them), on a fourth
//! queue, and `ratio ingest-prefilled/ingest-empty (N rows)` shows what index upkeep on a big
//! table costs it.

use engine::settings::ExposeSecret;
use std::{
    collections::HashSet,
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::StreamExt;
use lapin::{
    BasicProperties, Channel, Confirmation, Connection,
    message::Delivery,
    options::{BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions},
    types::{AMQPValue, FieldArray, FieldTable, LongString},
};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Scratch, declare_queue, delete_queues, interruptible, per_sec, ready, wait_until};
use engine::{
    dead_letter::{
        Received,
        ingest::{self, IngestCounts, IngestStats},
        store,
    },
    settings::{IngestSettings, Settings},
};

const BODY_BYTES: usize = 1024;
const ERRORS: [(&str, &str); 4] = [
    ("TimeoutError", "payment gateway did not answer within 5000 ms"),
    ("ValidationError", "order {} has no shipping address"),
    ("KeyError", "'customer_id'"),
    ("ConnectionResetError", "connection reset by peer"),
];

pub async fn run(settings: &Settings, messages: u32, prefill: i64) -> anyhow::Result<()> {
    let db = Scratch::create(settings.database_url.expose_secret()).await?;
    let res = async {
        let conn = engine::amqp::connect(settings.amqp_url.expose_secret(), "revenant-bench").await?;
        let ch = conn.create_channel().await.context("cannot open a channel")?;
        ch.confirm_select(ConfirmSelectOptions::default()).await.context("cannot enable confirms")?;
        let mut queues = Vec::new();
        let mut res = Ok(());
        let prefixes = [
            "revenant-bench.ack-only",
            "revenant-bench.dlq",
            "revenant-bench.one-at-a-time",
            "revenant-bench.dlq-full",
        ];
        for prefix in prefixes {
            match declare_queue(&ch, prefix).await {
                Ok(q) => queues.push(q),
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        if res.is_ok() {
            let q =
                Queues { ack_only: &queues[0], ingest: &queues[1], one_at_a_time: &queues[2], prefilled: &queues[3] };
            res = interruptible(bench(settings, &db.pool, &conn, &ch, q, messages, prefill)).await;
        }
        delete_queues(settings.amqp_url.expose_secret(), &queues).await;
        let _ = conn.close(200, "bench done".into()).await;
        res
    }
    .await;
    db.drop_db().await;
    res
}

struct Queues<'a> {
    ack_only: &'a str,
    ingest: &'a str,
    one_at_a_time: &'a str,
    /// Ingested into a store already holding `--prefill` dead letters.
    prefilled: &'a str,
}

async fn bench(
    settings: &Settings,
    pool: &PgPool,
    conn: &Connection,
    ch: &Channel,
    q: Queues<'_>,
    n: u32,
    prefill: i64,
) -> anyhow::Result<()> {
    let prefetch = settings.ingest.prefetch;
    let (batch, linger) = (settings.ingest.batch, settings.ingest.linger);
    println!(
        "ingest bench: {n} dead letters of {BODY_BYTES} B, persistent, in each of three durable {} queues; \
         prefetch {prefetch}, batch {batch}, linger {} ms",
        super::queue_kind(),
        linger.as_millis()
    );
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let mut filled = Duration::ZERO;
    for queue in [q.ack_only, q.ingest, q.one_at_a_time] {
        filled += fill(ch, queue, &run_id, n).await?;
    }
    println!("  filled the three queues: {:.0} messages/s published with confirms", per_sec(3 * u64::from(n), filled));
    let expected: HashSet<String> = (0..n).map(|i| message_id(&run_id, i)).collect();

    let ack_only = consume_only(conn, q.ack_only, prefetch, n).await?;
    println!("  ack only:      {n} in {:.2} s = {:.0} messages/s", ack_only.as_secs_f64(), per_sec(n.into(), ack_only));

    let (took, counts) = ingest(settings, pool, q.ingest, n).await?;
    println!("  ingest:        {n} in {:.2} s = {:.0} messages/s", took.as_secs_f64(), per_sec(n.into(), took));
    let ingest_check = Check::of(pool, q.ingest, &expected).await?;
    let groups: i64 = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM failure_groups"#).fetch_one(pool).await?;
    println!(
        "    {ingest_check}; failure groups {groups}; batches {}, duplicates acked {}, store errors {}",
        counts.batches, counts.duplicates, counts.store_errors
    );
    // The baseline starts from an empty store too.
    sqlx::query!("TRUNCATE dead_letters, failure_groups CASCADE").execute(pool).await?;

    let one = one_at_a_time(conn, pool, q.one_at_a_time, n).await?;
    println!("  one at a time: {n} in {:.2} s = {:.0} messages/s", one.as_secs_f64(), per_sec(n.into(), one));
    let one_check = Check::of(pool, q.one_at_a_time, &expected).await?;
    println!("    {one_check}");

    let left: Vec<u32> = [q.ack_only, q.ingest, q.one_at_a_time]
        .into_iter()
        .map(|queue| ready(conn, queue))
        .collect::<futures::future::TryJoinAll<_>>()
        .await?;
    let (base, rate, one_rate) = (per_sec(n.into(), ack_only), per_sec(n.into(), took), per_sec(n.into(), one));
    println!();
    println!("| consumer | messages | s | messages/s | vs ack only |");
    println!("|---|--:|--:|--:|--:|");
    println!("| ack only (prefetch {prefetch}) | {n} | {:.2} | {base:.0} | 1.00× |", ack_only.as_secs_f64());
    println!(
        "| one at a time: store, commit, ack each (prefetch {ONE_AT_A_TIME_PREFETCH}) | {n} | {:.2} | {one_rate:.0} | {:.2}× |",
        one.as_secs_f64(),
        one_rate / base
    );
    println!(
        "| Revenant ingest: store {batch}, commit, ack multiple (prefetch {prefetch}) | {n} | {:.2} | {rate:.0} | {:.2}× |",
        took.as_secs_f64(),
        rate / base
    );
    let prefilled =
        if prefill > 0 { Some(into_full_store(settings, pool, (conn, ch), &q, n, prefill).await?) } else { None };
    println!();
    println!("left on the queues: {left:?}");
    let prefilled_ok = prefilled.as_ref().is_none_or(|p| p.exact);
    let ok = ingest_check.is_exact() && one_check.is_exact() && left.iter().all(|l| *l == 0) && prefilled_ok;
    if let Some(p) = prefilled {
        println!("ratio ingest-prefilled/ingest-empty ({prefill} rows): {:.2}", p.rate / rate);
    }
    println!("ratio ingest/ack-only: {:.2}", rate / base);
    println!("ratio ingest/one-at-a-time: {:.2}", rate / one_rate);
    anyhow::ensure!(ok, "the ingest check failed: expected every message stored once and empty queues");
    Ok(())
}

/// The ingester into a store holding `prefill` dead letters.
struct Prefilled {
    rate: f64,
    exact: bool,
}

/// Empties the store, loads `prefill` dead letters (indexes rebuilt), then ingests `n` fresh
/// messages from `q.prefilled`: what index upkeep on a big table costs the ingester.
async fn into_full_store(
    settings: &Settings,
    pool: &PgPool,
    (conn, ch): (&Connection, &Channel),
    q: &Queues<'_>,
    n: u32,
    prefill: i64,
) -> anyhow::Result<Prefilled> {
    sqlx::query!("TRUNCATE dead_letters, failure_groups CASCADE").execute(pool).await?;
    let (load, index) = super::dead_letter_list::fill::fill(pool, prefill).await?;
    sqlx::query!("VACUUM (ANALYZE) dead_letters").execute(pool).await?;
    println!("  loaded {prefill} dead letters in {load:.0} s (indexes {index:.0} s)");
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    fill(ch, q.prefilled, &run_id, n).await?;
    let expected: HashSet<String> = (0..n).map(|i| message_id(&run_id, i)).collect();
    let (took, counts) = ingest(settings, pool, q.prefilled, n).await?;
    let rate = per_sec(n.into(), took);
    println!("  ingest into {prefill}: {n} in {:.2} s = {rate:.0} messages/s", took.as_secs_f64());
    let check = Check::of(pool, q.prefilled, &expected).await?;
    println!("    {check}; batches {}, store errors {}", counts.batches, counts.store_errors);
    Ok(Prefilled { rate, exact: check.is_exact() && ready(conn, q.prefilled).await? == 0 })
}

/// The ingester on `queue` until it has settled `n` deliveries.
async fn ingest(settings: &Settings, pool: &PgPool, queue: &str, n: u32) -> anyhow::Result<(Duration, IngestCounts)> {
    let stats = Arc::new(IngestStats::default());
    let cfg = IngestSettings { queues: vec![queue.to_string()], auto: false, ..settings.ingest.clone() };
    let stop = CancellationToken::new();
    let start = Instant::now();
    let handle = tokio::spawn(ingest::run(
        pool.clone(),
        settings.amqp_url.expose_secret().to_string(),
        cfg,
        None,
        stats.clone(),
        stop.clone(),
    ));
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
    Ok((took, stats.snapshot()))
}

/// What a storing run left in `dead_letters`, by message id, against what was published.
struct Check {
    rows: i64,
    lost: usize,
    duplicates: i64,
    unexpected: usize,
}

impl Check {
    async fn of(pool: &PgPool, queue: &str, expected: &HashSet<String>) -> anyhow::Result<Check> {
        let stored = sqlx::query!(
            r#"SELECT message_id, count(*) AS "n!" FROM dead_letters WHERE queue = $1 GROUP BY message_id"#,
            queue,
        )
        .fetch_all(pool)
        .await?;
        let mut seen = HashSet::new();
        let (mut rows, mut duplicates, mut unexpected) = (0, 0, 0);
        for (id, times) in stored.into_iter().map(|r| (r.message_id, r.n)) {
            rows += times;
            duplicates += times - 1;
            match id {
                Some(id) if expected.contains(&id) => {
                    seen.insert(id);
                }
                _ => unexpected += 1,
            }
        }
        Ok(Check { rows, lost: expected.len() - seen.len(), duplicates, unexpected })
    }

    fn is_exact(&self) -> bool {
        self.lost == 0 && self.duplicates == 0 && self.unexpected == 0
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stored rows {}: lost {}, duplicates {}, unexpected {}",
            self.rows, self.lost, self.duplicates, self.unexpected
        )
    }
}

const ONE_AT_A_TIME_PREFETCH: u16 = 100;

/// A manual-ack consumer on `queue`, tagged with the baseline's name.
async fn consume(ch: &Channel, queue: &str, who: &str) -> anyhow::Result<lapin::Consumer> {
    let tag = format!("revenant-bench-{who}-{}", uuid::Uuid::new_v4().simple());
    Ok(ch.basic_consume(queue.into(), tag.into(), BasicConsumeOptions::default(), FieldTable::default()).await?)
}

/// The next delivery, or an error naming the baseline and how far it got (10 s of silence).
async fn next_delivery(consumer: &mut lapin::Consumer, who: &str, got: u32, n: u32) -> anyhow::Result<Delivery> {
    match tokio::time::timeout(Duration::from_secs(10), consumer.next()).await {
        Ok(Some(Ok(d))) => Ok(d),
        Ok(Some(Err(e))) => Err(e).with_context(|| format!("the {who} consumer failed")),
        Ok(None) | Err(_) => anyhow::bail!("the {who} consumer stopped at {got} of {n}"),
    }
}

/// The plain way: for each delivery in turn, the real single-message store in its own
/// transaction, commit, then ack.
async fn one_at_a_time(conn: &Connection, pool: &PgPool, queue: &str, n: u32) -> anyhow::Result<Duration> {
    let ch = conn.create_channel().await.context("cannot open a channel")?;
    ch.basic_qos(ONE_AT_A_TIME_PREFETCH, BasicQosOptions::default()).await.context("basic.qos refused")?;
    let start = Instant::now();
    let mut consumer = consume(&ch, queue, "one-at-a-time").await?;
    for got in 0..n {
        let d = next_delivery(&mut consumer, "one-at-a-time", got, n).await?;
        let r = Received::from_delivery(queue, &d);
        store::insert_committed(pool, &r).await.context("the one-at-a-time store failed")?;
        d.acker.ack(BasicAckOptions::default()).await.context("ack failed")?;
    }
    let took = start.elapsed();
    let _ = ch.close(200, "one-at-a-time done".into()).await;
    Ok(took)
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
        .with_message_id(message_id(run_id, i).into())
        .with_type("order.placed".into())
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_timestamp(now)
        .with_headers(headers);
    (props, body.into_bytes())
}

fn message_id(run_id: &str, i: u32) -> String {
    format!("bench-{run_id}-{i}")
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
    let start = Instant::now();
    let mut consumer = consume(&ch, queue, "ack-only").await?;
    for got in 0..n {
        let d = next_delivery(&mut consumer, "ack-only", got, n).await?;
        d.acker.ack(BasicAckOptions::default()).await.context("ack failed")?;
    }
    let took = start.elapsed();
    let _ = ch.close(200, "ack-only done".into()).await;
    Ok(took)
}
