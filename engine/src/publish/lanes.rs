//! One connection's confirm channels ("lanes") and the publish every path makes on them.
//!
//! Policy:
//! - `channels` channels in confirm mode on the role's connection. A message with a key always
//!   goes on the same channel (the key's hash picks it), so messages of one key reach the broker
//!   in the order they were published (RabbitMQ keeps order per channel only); a message
//!   without one goes on the next channel in turn;
//! - before the first publish to an exchange, the exchange check of [`Exchanges`] on a probe
//!   channel (a 404 must never close a channel carrying publishes): a missing exchange is a
//!   refusal without a publish;
//! - every publish is `mandatory` (an unroutable message comes back and is a refusal, never a
//!   silent drop); handing it to the client and awaiting its confirm are both bounded by the
//!   confirm timeout of unblocked time ([`within`]), and the confirm future reports how long it
//!   took. [`crate::amqp::confirm::settle`] turns what it hands back into the outcome;
//! - each channel's confirms pass through its [`returned`](super::returned) task, which gives a
//!   returned message to the publish it names (lapin alone can hand it to another publish of
//!   the same multiple ack).

use std::{
    hash::{DefaultHasher, Hash, Hasher},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::future::BoxFuture;
use lapin::{
    BasicProperties, Channel, Connection,
    options::{BasicPublishOptions, ConfirmSelectOptions},
    types::ShortString,
};

use tokio::sync::mpsc;

use super::returned::{self, Entry};
use crate::amqp::{
    blocked::{BlockState, within},
    confirm::{Awaited, Exchanges},
};

/// Confirm channels per role unless configured: one. More measured no faster on 2 cores
/// (docs/BENCHMARKS.md), and they give up order between keys: events of one aggregate often
/// carry different routing keys (`order.placed`, `order.shipped`), which on two channels may
/// arrive swapped. Raise it where one channel process is the broker's limit.
pub const DEFAULT_CHANNELS: usize = 1;

/// A publish's confirm: the caller's tag, what came back, and how long it took.
pub type Confirm<T> = BoxFuture<'static, (T, Awaited, Duration)>;

/// What a publish came to before its confirm.
pub enum Published<T> {
    /// Handed to the broker: await the confirm.
    Sent(Confirm<T>),
    /// Not published: the exchange does not exist.
    NoExchange(T, String),
}

/// Why a publish could not be handed to the broker: the lanes are unusable (reconnect).
#[derive(Debug)]
pub enum PublishError {
    /// Refused before anything was written (channel or connection closed): nothing went out.
    Lost(anyhow::Error),
    /// The client did not take it within the timeout: it may be half-written.
    Stuck,
}

impl std::fmt::Display for PublishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PublishError::Lost(e) => write!(f, "publish refused: channel or connection lost: {e:#}"),
            PublishError::Stuck => f.write_str("the client did not take a publish within the confirm timeout"),
        }
    }
}

impl std::error::Error for PublishError {}

pub struct Lanes<'a> {
    conn: &'a Connection,
    channels: Vec<Channel>,
    /// Each channel's confirm task ([`returned`]), by the same index.
    confirms: Vec<mpsc::UnboundedSender<Entry>>,
    next: usize,
    exchanges: Exchanges,
    blocks: Arc<BlockState>,
    timeout: Duration,
}

impl<'a> Lanes<'a> {
    /// Opens `channels` (at least one) confirm channels on `conn`.
    pub async fn open(
        conn: &'a Connection,
        channels: usize,
        blocks: Arc<BlockState>,
        timeout: Duration,
    ) -> anyhow::Result<Lanes<'a>> {
        let mut list = Vec::with_capacity(channels.max(1));
        for _ in 0..channels.max(1) {
            let ch = conn.create_channel().await.context("cannot open a publishing channel")?;
            ch.confirm_select(ConfirmSelectOptions::default()).await.context("cannot enable publisher confirms")?;
            list.push(ch);
        }
        let confirms = list.iter().map(|c| returned::spawn(c.clone())).collect();
        Ok(Lanes { conn, channels: list, confirms, next: 0, exchanges: Exchanges::default(), blocks, timeout })
    }

    pub fn len(&self) -> usize {
        self.channels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// Whether every channel is still open (an idle role checks it to notice a dead connection).
    pub fn connected(&self) -> bool {
        self.channels.iter().all(|c| c.status().connected())
    }

    /// The index of the channel for `key` (always the same one), or of the next in turn.
    fn pick(&mut self, key: Option<&[u8]>) -> usize {
        let n = self.channels.len();
        match key {
            Some(k) if n > 1 => {
                let mut h = DefaultHasher::new();
                k.hash(&mut h);
                (h.finish() % n as u64) as usize
            }
            _ => {
                self.next = (self.next + 1) % n;
                self.next
            }
        }
    }

    /// Publishes one message, `mandatory`. `Err` when the lanes are unusable.
    #[allow(clippy::too_many_arguments)]
    pub async fn publish<T: Send + 'static>(
        &mut self,
        key: Option<&[u8]>,
        exchange: ShortString,
        routing_key: ShortString,
        body: &[u8],
        props: BasicProperties,
        tag: T,
    ) -> Result<Published<T>, PublishError> {
        match self.exchanges.exists(self.conn, exchange.as_str()).await {
            Ok(true) => {}
            Ok(false) => {
                let reason = format!("exchange `{}` does not exist (NOT_FOUND)", exchange.as_str());
                return Ok(Published::NoExchange(tag, reason));
            }
            Err(e) => return Err(PublishError::Lost(e)),
        }
        let options = BasicPublishOptions { mandatory: true, immediate: false };
        let (blocks, timeout) = (self.blocks.clone(), self.timeout);
        let i = self.pick(key);
        let (entry_props, publish) =
            (props.clone(), self.channels[i].basic_publish(exchange, routing_key, options, body, props));
        let confirm = match within(&blocks, timeout, publish).await {
            Ok(Ok(confirm)) => confirm,
            Ok(Err(e)) => return Err(PublishError::Lost(e.into())),
            Err(_) => return Err(PublishError::Stuck),
        };
        let started = Instant::now();
        let bounded: BoxFuture<'static, Awaited> = Box::pin(async move { within(&blocks, timeout, confirm).await });
        let (entry, outcome) = Entry::new(&entry_props, bounded);
        if let Err(e) = self.confirms[i].send(entry) {
            // The task is gone (it panicked): await the confirm here, as lapin hands it back.
            return Ok(Published::Sent(Box::pin(async move { (tag, e.0.confirm.await, started.elapsed()) })));
        }
        Ok(Published::Sent(Box::pin(async move {
            let res = outcome.await.unwrap_or_else(|_| returned::no_answer());
            (tag, res, started.elapsed())
        })))
    }

    /// Closes the channels and the probe channel.
    pub async fn close(&mut self, why: &str) {
        self.exchanges.close().await;
        self.confirms.clear();
        for ch in self.channels.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(2), ch.close(200, why.into())).await;
        }
    }
}
