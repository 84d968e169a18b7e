//! The demo consumers: one per work queue, manual acks, behaving as `behaviour` decides.
//!
//! Policy: a lost connection or channel is retried from scratch with backoff (the topology
//! is re-declared, so a broker restarted empty gets it back). A dead letter the consumer
//! republishes itself is acked only after the DLX confirmed it, so it is never lost; if the
//! broker returns or nacks that copy, the original is rejected instead and RabbitMQ
//! dead-letters it the plain way. On shutdown, held and in-progress deliveries are left
//! unacked: closing the channel hands them back to the queue.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use lapin::{
    Channel, Connection,
    message::Delivery,
    options::{
        BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
        ConfirmSelectOptions,
    },
    types::{AMQPValue, FieldTable, ShortString},
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{
    behaviour::{self, Action, Incoming},
    topology::{self, DemoQueue, Names},
};
use engine::amqp::confirm::{self, Outcome};

const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(15);

/// Runs every demo consumer until `shutdown`; `started` is the demo's clock for outages.
pub async fn run(amqp_url: String, names: Names, started: Instant, shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut delay = BACKOFF_MIN;
    while !shutdown.is_cancelled() {
        let attempt = Instant::now();
        match run_once(&amqp_url, &names, started, &shutdown).await {
            Ok(()) => return Ok(()),
            Err(e) => tracing::warn!(
                error = format!("{e:#}"),
                retry_in_ms = delay.as_millis() as u64,
                "demo consumers interrupted"
            ),
        }
        if attempt.elapsed() > BACKOFF_MAX {
            delay = BACKOFF_MIN;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(BACKOFF_MAX);
    }
    Ok(())
}

async fn run_once(url: &str, names: &Names, started: Instant, shutdown: &CancellationToken) -> anyhow::Result<()> {
    let conn = engine::amqp::connect(url, "revenant-demo-consumers").await?;
    let result = consume_all(&conn, names, started, shutdown).await;
    let _ = conn.close(200, "revenant demo stopping".into()).await;
    result
}

async fn consume_all(
    conn: &Connection,
    names: &Names,
    started: Instant,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let setup = conn.create_channel().await.context("cannot open a channel")?;
    topology::declare(&setup, names).await?;
    let _ = setup.close(200, "declared".into()).await;

    // A failing queue stops its siblings too, so the whole connection is rebuilt at once.
    let stop = shutdown.child_token();
    let mut tasks = tokio::task::JoinSet::new();
    for q in DemoQueue::ALL {
        let ch = conn.create_channel().await.context("cannot open a channel")?;
        // The stalling consumers hold one message at a time, so the rest wait in the queue
        // where TTL and max-length apply; only ready messages count toward either.
        let prefetch = if behaviour::outage(q).is_some() { 1 } else { 10 };
        ch.basic_qos(prefetch, BasicQosOptions::default()).await.context("basic.qos refused")?;
        ch.confirm_select(ConfirmSelectOptions::default()).await.context("cannot enable publisher confirms")?;
        let (names, stop) = (names.clone(), stop.clone());
        let span = tracing::info_span!("demo_consumer", queue = %names.queue(q));
        tasks.spawn(
            async move {
                let res = consume(&ch, &names, q, started, &stop).await;
                let _ = ch.close(200, "revenant demo stopping".into()).await;
                if res.is_err() {
                    stop.cancel();
                }
                res
            }
            .instrument(span),
        );
    }
    let mut first_error = None;
    while let Some(res) = tasks.join_next().await {
        if let Err(e) = res.context("a demo consumer panicked").and_then(|r| r) {
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

async fn consume(
    ch: &Channel,
    names: &Names,
    q: DemoQueue,
    started: Instant,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    let queue = names.queue(q);
    let tag = ShortString::from(format!("revenant-demo-{}", uuid::Uuid::new_v4().simple()));
    let mut consumer = ch
        .basic_consume(queue.as_str().into(), tag, BasicConsumeOptions::default(), FieldTable::default())
        .await
        .with_context(|| format!("cannot consume {queue}"))?;
    tracing::info!("consuming");
    loop {
        let next = tokio::select! {
            biased;
            _ = stop.cancelled() => return Ok(()),
            d = consumer.next() => d,
        };
        match next {
            Some(Ok(d)) => {
                let span = tracing::info_span!(
                    "delivery",
                    tag = d.delivery_tag,
                    bytes = d.data.len(),
                    message_id = d.properties.message_id().as_ref().map(|m| m.as_str()).unwrap_or(""),
                    redelivered = d.redelivered,
                );
                handle(ch, names, q, d, started, stop).instrument(span).await?;
            }
            Some(Err(e)) => return Err(e).context("consumer failed"),
            None => anyhow::bail!("the broker cancelled the consumer of {queue} (queue deleted?)"),
        }
    }
}

async fn handle(
    ch: &Channel,
    names: &Names,
    q: DemoQueue,
    d: Delivery,
    started: Instant,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    let incoming = Incoming {
        body: &d.data,
        message_id: d.properties.message_id().as_ref().map(|m| m.as_str()),
        redelivered: d.redelivered,
    };
    let nack = |requeue| BasicNackOptions { requeue, multiple: false };
    match behaviour::decide(q, &incoming, started.elapsed()) {
        Action::Ack => {
            d.acker.ack(BasicAckOptions::default()).await.context("ack failed")?;
        }
        Action::Retry => {
            tracing::info!("transient failure; requeueing");
            d.acker.nack(nack(true)).await.context("nack failed")?;
        }
        Action::Reject => {
            tracing::info!("rejected");
            d.acker.nack(nack(false)).await.context("nack failed")?;
        }
        Action::Hold(wait) => {
            tracing::info!(wait_ms = wait.as_millis() as u64, "stalled; holding the delivery");
            tokio::select! {
                // Left unacked: closing the channel requeues it.
                _ = stop.cancelled() => return Ok(()),
                _ = tokio::time::sleep(wait) => {}
            }
            d.acker.ack(BasicAckOptions::default()).await.context("ack failed")?;
        }
        Action::DeadLetter { error_type, message } => match republish(ch, names, q, &d, &error_type, &message).await {
            Ok(()) => {
                tracing::info!(error_type, "dead-lettered with exception headers");
                d.acker.ack(BasicAckOptions::default()).await.context("ack failed")?;
            }
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), "cannot republish to the DLX; rejecting instead");
                d.acker.nack(nack(false)).await.context("nack failed")?;
            }
        },
    }
    Ok(())
}

/// Publishes a copy of `d` to the DLX with the exception headers a framework would add.
async fn republish(
    ch: &Channel,
    names: &Names,
    q: DemoQueue,
    d: &Delivery,
    error_type: &str,
    message: &str,
) -> anyhow::Result<()> {
    let queue = names.queue(q);
    let mut headers = d.properties.headers().clone().unwrap_or_default();
    let mut put = |k: &str, v: &str| {
        headers.insert(k.into(), AMQPValue::LongString(v.into()));
    };
    put("x-exception-type", error_type);
    put("x-exception-message", message);
    put("x-original-exchange", d.exchange.as_str());
    put("x-original-routing-key", d.routing_key.as_str());
    put("x-original-queue", &queue);
    let props = d.properties.clone().with_headers(headers).with_delivery_mode(2);
    let opts = BasicPublishOptions { mandatory: true, ..Default::default() };
    let confirm = ch
        .basic_publish(names.dlx().into(), queue.as_str().into(), opts, &d.data, props)
        .await
        .context("publish to the DLX refused")?;
    // The outcome as the relay and replay decide it (engine::amqp::confirm).
    match confirm::settle(Ok(confirm.await)) {
        Outcome::Acked => Ok(()),
        Outcome::Refused { reason, .. } | Outcome::Unknown { reason, .. } => anyhow::bail!("{reason}"),
    }
}
