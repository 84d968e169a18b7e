//! Replay against the real RabbitMQ and PostgreSQL: real dead letters (published, rejected by
//! a "consumer", ingested), uniquely named exchanges and queues deleted at the end, a fresh
//! database per test. This file holds the harness; the tests are in `replay/`.

mod marks;
mod ordered;
mod origin;
mod plans;
mod sending;
mod story;
mod unconfirmed;

use std::{sync::Arc, time::Duration};

use engine::{
    auth::{Principal, Role},
    dead_letter::ingest::{self, IngestStats},
    replay::{
        Plan, ReplayStats, progress,
        publisher::{self, PublisherConfig},
    },
    settings::IngestSettings,
};
use lapin::{
    BasicProperties, Channel, Connection, ExchangeKind,
    message::Delivery,
    options::{
        BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
        QueueBindOptions, QueueDeclareOptions,
    },
    types::{AMQPValue, FieldTable},
};
use sqlx::PgPool;
use testkit::{Doomed, TestDb, amqp_url, eventually, fresh_db};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A DLX and its DLQ, a work queue that dead-letters into it, and whatever a test adds.
pub struct Env {
    pub db: TestDb,
    pub conn: Connection,
    pub ch: Channel,
    pub dlx: String,
    pub dlq: String,
    pub work: String,
    /// The queues and exchanges made here: deleted when the `Env` goes, a failing test's too.
    names: Doomed,
}

pub fn dead_lettering_into(dlx: &str) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString(dlx.into()));
    args
}

impl Env {
    pub async fn new() -> Self {
        let db = fresh_db().await;
        let conn = engine::amqp::connect(&amqp_url(), "revenant-test-replay").await.unwrap();
        let ch = conn.create_channel().await.unwrap();
        ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
        let mut env =
            Self { db, conn, ch, dlx: String::new(), dlq: String::new(), work: String::new(), names: Doomed::new() };
        env.dlx = env.exchange(ExchangeKind::Fanout).await;
        env.dlq = env.queue(FieldTable::default()).await;
        env.ch
            .queue_bind(
                env.dlq.as_str().into(),
                env.dlx.as_str().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        env.work = env.queue(dead_lettering_into(&env.dlx.clone())).await;
        env
    }

    pub fn pool(&self) -> &PgPool {
        &self.db.pool
    }

    /// A uniquely named queue, deleted at the end.
    pub async fn queue(&mut self, args: FieldTable) -> String {
        let name = self.names.queue("revenant-test.replay.q");
        self.ch.queue_declare(name.as_str().into(), QueueDeclareOptions::default(), args).await.unwrap();
        name
    }

    /// A uniquely named exchange, deleted at the end.
    pub async fn exchange(&mut self, kind: ExchangeKind) -> String {
        let name = self.names.exchange("revenant-test.replay.x");
        let opts = ExchangeDeclareOptions::default();
        self.ch.exchange_declare(name.as_str().into(), kind, opts, FieldTable::default()).await.unwrap();
        name
    }

    pub async fn publish(&self, queue: &str, body: &[u8], props: BasicProperties) {
        self.ch
            .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body, props)
            .await
            .unwrap()
            .await
            .unwrap();
    }

    /// Takes one message off `queue` and rejects it without requeue, as a failing consumer would.
    pub async fn reject_one(&self, queue: &str) {
        let d = self.get(queue).await;
        d.acker.nack(BasicNackOptions { requeue: false, multiple: false }).await.unwrap();
    }

    /// One message from `queue` (acked), waiting up to 5 s for it.
    pub async fn get(&self, queue: &str) -> Delivery {
        let m = eventually(&format!("a message in {queue}"), Duration::from_secs(5), async || {
            self.ch.basic_get(queue.into(), BasicGetOptions::default()).await.unwrap().ok_or("empty")
        })
        .await;
        m.delivery
    }

    /// `n` dead letters written straight into the store (message ids `m-1` … `m-n`), for
    /// plans too large to dead-letter one by one through the broker. Their ids, oldest first.
    pub async fn stored_dead_letters(&self, n: i64) -> Vec<i64> {
        sqlx::query_scalar!(
            r#"INSERT INTO dead_letters (queue, natural_key, message_id, body, body_size, exchange, routing_key,
                                         reason, original_queue, original_exchange, original_routing_keys,
                                         fingerprint, delivery_mode)
               SELECT $1, 'test-' || g, 'm-' || g, convert_to('{"n":' || g || '}', 'UTF8'), 8, '', $1,
                      'rejected', $2, '', ARRAY[$2], 'test', 2
               FROM generate_series(1, $3::bigint) g ORDER BY g RETURNING id"#,
            &self.dlq,
            &self.work,
            n
        )
        .fetch_all(self.pool())
        .await
        .unwrap()
    }

    /// The message ids of every message now in `queue` (taken off it), in arrival order.
    pub async fn drain_ids(&self, queue: &str) -> Vec<String> {
        let got = self.drain(queue).await;
        let id = |d: &Delivery| d.properties.message_id().clone().expect("every replayed message has a message id");
        got.iter().map(|d| id(d).to_string()).collect()
    }

    /// Every message now in `queue`, acked.
    pub async fn drain(&self, queue: &str) -> Vec<Delivery> {
        let opts = BasicGetOptions { no_ack: true };
        let mut out = Vec::new();
        while let Some(m) = self.ch.basic_get(queue.into(), opts).await.unwrap() {
            out.push(m.delivery);
        }
        out
    }

    /// `n` real dead letters: published to the work queue, rejected, ingested. Their ids, oldest first.
    pub async fn dead_letters(&self, n: usize, make: impl Fn(usize) -> (Vec<u8>, BasicProperties)) -> Vec<i64> {
        let before: i64 = sqlx::query_scalar!(r#"SELECT coalesce(max(id), 0) AS "id!" FROM dead_letters"#)
            .fetch_one(self.pool())
            .await
            .unwrap();
        for i in 0..n {
            let (body, props) = make(i);
            self.publish(&self.work, &body, props).await;
        }
        for _ in 0..n {
            self.reject_one(&self.work).await;
        }
        let ing = Ingest::start(self.pool(), vec![self.dlq.clone()]);
        let ids = wait_for_new(self.pool(), before, n).await;
        ing.stop().await;
        ids
    }

    /// Closes the connection; the queues and exchanges go with `names`.
    pub async fn delete(self) {
        let _ = self.conn.close(200, "test done".into()).await;
    }
}

/// Waits until `n` dead letters with an id above `after` are stored; their ids in order.
pub async fn wait_for_new(pool: &PgPool, after: i64, n: usize) -> Vec<i64> {
    testkit::eventually(&format!("{n} new dead letters"), Duration::from_secs(15), async || {
        let ids = sqlx::query_scalar!("SELECT id FROM dead_letters WHERE id > $1 ORDER BY id", after)
            .fetch_all(pool)
            .await
            .unwrap();
        if ids.len() >= n { Ok(ids) } else { Err(ids.len()) }
    })
    .await
}

pub fn simple(i: usize) -> (Vec<u8>, BasicProperties) {
    (
        format!("{{\"n\":{i}}}").into_bytes(),
        BasicProperties::default().with_message_id(format!("m-{i}").into()).with_delivery_mode(2),
    )
}

pub struct Ingest {
    token: CancellationToken,
    handle: JoinHandle<anyhow::Result<()>>,
}

impl Ingest {
    pub fn start(pool: &PgPool, queues: Vec<String>) -> Self {
        let token = CancellationToken::new();
        let cfg = IngestSettings {
            queues,
            auto: false,
            prefetch: 50,
            batch: 50,
            linger: Duration::from_millis(5),
            commits: 2,
        };
        let stats = Arc::new(IngestStats::default());
        let handle = tokio::spawn(ingest::run(pool.clone(), amqp_url(), cfg, None, stats, token.clone()));
        Self { token, handle }
    }

    pub async fn stop(self) {
        self.token.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.handle).await.unwrap().unwrap().unwrap();
    }
}

/// Short lease and quick control checks, so takeovers and pauses happen within a test.
pub fn fast() -> PublisherConfig {
    PublisherConfig {
        poll: Duration::from_millis(100),
        lease: Duration::from_secs(2),
        control_every: Duration::from_millis(100),
        confirm_timeout: Duration::from_secs(5),
        ..PublisherConfig::default()
    }
}

pub struct Publisher {
    pub token: CancellationToken,
    pub handle: JoinHandle<anyhow::Result<()>>,
    pub stats: Arc<ReplayStats>,
}

impl Publisher {
    pub fn start(pool: &PgPool) -> Self {
        Self::start_with(pool, fast())
    }

    pub fn start_with(pool: &PgPool, cfg: PublisherConfig) -> Self {
        let token = CancellationToken::new();
        let stats = Arc::new(ReplayStats::default());
        let run = publisher::run_with(pool.clone(), amqp_url(), cfg, stats.clone(), token.clone());
        Self { token, handle: tokio::spawn(run), stats }
    }

    pub async fn stop(self) -> Arc<ReplayStats> {
        self.token.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.handle).await.unwrap().unwrap().unwrap();
        self.stats
    }
}

pub fn alice() -> Principal {
    Principal { username: "alice".into(), role: Role::Operator }
}

/// Waits (up to 60 s: a shared machine can be slow) until the plan satisfies `ok`.
pub async fn wait_plan(pool: &PgPool, id: i64, what: &str, ok: impl Fn(&Plan) -> bool) -> Plan {
    eventually(&format!("plan {id} {what}"), Duration::from_secs(60), async || {
        let plan = progress::get(pool, id).await.unwrap();
        if ok(&plan) { Ok(plan) } else { Err(plan) }
    })
    .await
}

pub async fn statuses(pool: &PgPool, ids: &[i64]) -> Vec<String> {
    sqlx::query_scalar!("SELECT status FROM dead_letters WHERE id = ANY($1) ORDER BY id", ids)
        .fetch_all(pool)
        .await
        .unwrap()
}
