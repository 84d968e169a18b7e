//! Dead-letter ingest against the real RabbitMQ and PostgreSQL: uniquely named queues and
//! exchanges (deleted at the end), a fresh database per test.

use std::{sync::Arc, time::Duration};

use engine::{
    dead_letter::{
        Received, depth,
        ingest::{self, IngestStats},
        store::{self, GroupFilter, ListFilter},
    },
    settings::IngestSettings,
};
use lapin::{
    BasicProperties, Channel, Connection, ExchangeKind,
    options::{
        BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
        QueueBindOptions, QueueDeclareOptions,
    },
    types::{AMQPValue, DecimalValue, FieldTable, LongString, ShortString},
};
use sqlx::PgPool;
use testkit::{Doomed, amqp_url, eventually, fresh_db, unique};
use tokio_util::sync::CancellationToken;

/// A dead-letter exchange, its DLQ, and a work queue that dead-letters into it.
pub(crate) struct Topology {
    /// The exchange and queues: deleted when the topology goes, a failing test's too.
    _names: Doomed,
    conn: Connection,
    pub(crate) ch: Channel,
    dlx: String,
    pub(crate) dlq: String,
    pub(crate) work: String,
}

impl Topology {
    pub(crate) async fn new(work_args: &[(&str, AMQPValue)]) -> Self {
        let conn = engine::amqp::connect(&amqp_url(), "revenant-test").await.unwrap();
        let ch = conn.create_channel().await.unwrap();
        ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
        let names = Doomed::new();
        let (dlx, dlq, work) =
            (names.exchange("revenant-test.dlx"), names.queue("revenant-test.dlq"), names.queue("revenant-test.work"));
        let exchange = ShortString::from(dlx.as_str());
        ch.exchange_declare(
            exchange.clone(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        ch.queue_declare(dlq.as_str().into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
        ch.queue_bind(dlq.as_str().into(), exchange, "".into(), QueueBindOptions::default(), FieldTable::default())
            .await
            .unwrap();
        let mut args = FieldTable::default();
        args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString(dlx.as_str().into()));
        for (k, v) in work_args {
            args.insert((*k).into(), v.clone());
        }
        ch.queue_declare(work.as_str().into(), QueueDeclareOptions::default(), args).await.unwrap();
        Self { _names: names, conn, ch, dlx, dlq, work }
    }

    pub(crate) async fn publish(&self, queue: &str, body: &[u8], props: BasicProperties) {
        self.ch
            .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body, props)
            .await
            .unwrap()
            .await
            .unwrap();
    }

    /// Takes one message off the work queue and rejects it without requeue, as a failing
    /// consumer would; RabbitMQ then dead-letters it with reason `rejected`.
    async fn reject_one(&self) {
        let m = eventually("a message in the work queue", Duration::from_secs(2), async || {
            self.ch.basic_get(self.work.as_str().into(), BasicGetOptions::default()).await.unwrap().ok_or("empty")
        })
        .await;
        m.delivery.acker.nack(BasicNackOptions { requeue: false, multiple: false }).await.unwrap();
    }

    /// Ready messages in `queue`, from a passive declare.
    pub(crate) async fn ready(&self, queue: &str) -> u32 {
        let ch = self.conn.create_channel().await.unwrap();
        let opts = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
        let n = ch.queue_declare(queue.into(), opts, FieldTable::default()).await.unwrap().message_count();
        let _ = ch.close(200, "".into()).await;
        n
    }

    /// Closes the connection; the exchange and queues go with the names.
    pub(crate) async fn delete(self) {
        let _ = self.conn.close(200, "test done".into()).await;
    }
}

pub(crate) struct Running {
    token: CancellationToken,
    handle: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub(crate) stats: Arc<IngestStats>,
}

pub(crate) fn start_ingest(pool: &PgPool, queues: Vec<String>) -> Running {
    start_ingest_with(
        pool,
        IngestSettings { queues, auto: false, prefetch: 50, batch: 50, linger: Duration::from_millis(5), commits: 2 },
    )
}

pub(crate) fn start_ingest_with(pool: &PgPool, cfg: IngestSettings) -> Running {
    let token = CancellationToken::new();
    let stats = Arc::new(IngestStats::default());
    let handle = tokio::spawn(ingest::run(pool.clone(), amqp_url(), cfg, None, stats.clone(), token.clone()));
    Running { token, handle, stats }
}

impl Running {
    pub(crate) async fn stop(self) -> Arc<IngestStats> {
        self.token.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.handle).await.unwrap().unwrap().unwrap();
        self.stats
    }
}

pub(crate) async fn count(pool: &PgPool, queue: &str) -> i64 {
    count!(pool, "SELECT count(*) FROM dead_letters WHERE queue = $1", queue)
}

/// Waits until `n` dead letters from `queue` are stored.
pub(crate) async fn wait_for_rows(pool: &PgPool, queue: &str, n: i64) {
    eventually(&format!("{n} dead letters from {queue}"), Duration::from_secs(15), async || {
        let stored = count(pool, queue).await;
        if stored >= n { Ok(()) } else { Err(stored) }
    })
    .await
}

fn custom_headers() -> FieldTable {
    let mut nested = FieldTable::default();
    nested.insert("tenant".into(), AMQPValue::LongString("acme".into()));
    nested.insert("shard".into(), AMQPValue::LongLongInt(17));
    let mut h = FieldTable::default();
    h.insert("x-tenant".into(), AMQPValue::LongString("acme-ü".into()));
    h.insert("x-attempt".into(), AMQPValue::LongInt(3));
    h.insert("x-big".into(), AMQPValue::LongLongInt(-9_000_000_000));
    h.insert("x-flag".into(), AMQPValue::Boolean(true));
    h.insert("x-ratio".into(), AMQPValue::Double(0.25));
    h.insert("x-price".into(), AMQPValue::DecimalValue(DecimalValue { scale: 2, value: 1999 }));
    h.insert("x-when".into(), AMQPValue::Timestamp(1_700_000_000));
    h.insert("x-raw".into(), AMQPValue::LongString(LongString::from(vec![0xffu8, 0x00, 0xc3])));
    h.insert("x-blob".into(), AMQPValue::ByteArray(vec![1u8, 2, 0xff].into()));
    h.insert("x-ctx".into(), AMQPValue::FieldTable(nested));
    h.insert(
        "x-list".into(),
        AMQPValue::FieldArray(vec![AMQPValue::LongString("a".into()), AMQPValue::LongInt(2)].into()),
    );
    h.insert("x-nothing".into(), AMQPValue::Void);
    h
}

#[tokio::test]
async fn a_rejected_message_is_stored_with_every_property_header_and_body_byte() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    let body = vec![0xffu8, 0x00, b'{', 0xfe, b'\n', 0x80];
    let props = BasicProperties::default()
        .with_message_id("evt-1".into())
        .with_correlation_id("corr-9".into())
        .with_content_type("application/octet-stream".into())
        .with_content_encoding("gzip".into())
        .with_timestamp(1_700_000_123)
        .with_app_id("billing".into())
        .with_type("invoice.created".into())
        .with_user_id("guest".into())
        .with_delivery_mode(2)
        .with_priority(5)
        .with_reply_to("replies".into())
        .with_headers(custom_headers());
    t.publish(&t.work, &body, props).await;
    t.reject_one().await;

    let ing = start_ingest(&db.pool, vec![t.dlq.clone()]);
    wait_for_rows(&db.pool, &t.dlq, 1).await;
    let stats = ing.stop().await.snapshot();
    assert_eq!((stats.received, stats.stored, stats.store_errors), (1, 1, 0));

    let page = store::list(&db.pool, &ListFilter { queue: Some(t.dlq.clone()), ..Default::default() }, None, 10)
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    let dl = store::get(&db.pool, page.items[0].id).await.unwrap();
    assert_eq!(dl.reason, "rejected");
    assert_eq!(dl.original_queue.as_deref(), Some(t.work.as_str()));
    assert_eq!(dl.original_routing_keys, vec![t.work.clone()]);
    assert_eq!(dl.death_count, 1);
    assert!(dl.first_death_at.is_some());
    assert_eq!(dl.exchange, t.dlx);
    assert_eq!(dl.body, body);
    assert_eq!(dl.body_size, 6);
    assert_eq!(dl.status, "awaiting");
    assert!(dl.group_id.is_some());

    let p = dl.properties().unwrap();
    assert_eq!(p.message_id().as_ref().map(|v| v.as_str()), Some("evt-1"));
    assert_eq!(p.correlation_id().as_ref().map(|v| v.as_str()), Some("corr-9"));
    assert_eq!(p.content_type().as_ref().map(|v| v.as_str()), Some("application/octet-stream"));
    assert_eq!(p.content_encoding().as_ref().map(|v| v.as_str()), Some("gzip"));
    assert_eq!(*p.timestamp(), Some(1_700_000_123));
    assert_eq!(p.app_id().as_ref().map(|v| v.as_str()), Some("billing"));
    assert_eq!(p.kind().as_ref().map(|v| v.as_str()), Some("invoice.created"));
    assert_eq!(p.user_id().as_ref().map(|v| v.as_str()), Some("guest"));
    assert_eq!((*p.delivery_mode(), *p.priority()), (Some(2), Some(5)));
    assert_eq!(p.reply_to().as_ref().map(|v| v.as_str()), Some("replies"));
    // Every published header comes back with its value and its AMQP type.
    let stored = p.headers().clone().unwrap();
    for (k, v) in custom_headers().inner() {
        assert_eq!(stored.inner().get(k), Some(v), "header {k}");
    }
    assert!(stored.contains_key("x-death"));
    t.delete().await;
}

#[tokio::test]
async fn an_expired_message_is_stored_with_reason_expired() {
    let db = fresh_db().await;
    let t = Topology::new(&[("x-message-ttl", AMQPValue::LongInt(1))]).await;
    t.publish(&t.work, b"late", BasicProperties::default().with_message_id("ttl-1".into())).await;
    let ing = start_ingest(&db.pool, vec![t.dlq.clone()]);
    wait_for_rows(&db.pool, &t.dlq, 1).await;
    ing.stop().await;
    let page = store::list(&db.pool, &ListFilter::default(), None, 10).await.unwrap();
    let dl = store::get(&db.pool, page.items[0].id).await.unwrap();
    assert_eq!((dl.reason.as_str(), dl.original_queue.as_deref()), ("expired", Some(t.work.as_str())));
    t.delete().await;
}

#[tokio::test]
async fn a_max_length_overflow_is_stored_with_reason_maxlen() {
    let db = fresh_db().await;
    let t = Topology::new(&[("x-max-length", AMQPValue::LongInt(1))]).await;
    t.publish(&t.work, b"first", BasicProperties::default().with_message_id("m-1".into())).await;
    t.publish(&t.work, b"second", BasicProperties::default().with_message_id("m-2".into())).await;
    let ing = start_ingest(&db.pool, vec![t.dlq.clone()]);
    wait_for_rows(&db.pool, &t.dlq, 1).await;
    ing.stop().await;
    let page = store::list(&db.pool, &ListFilter::default(), None, 10).await.unwrap();
    assert_eq!(page.items.len(), 1);
    let dl = store::get(&db.pool, page.items[0].id).await.unwrap();
    // The default overflow policy drops the head: the first message is the one dead-lettered.
    assert_eq!(
        (dl.reason.as_str(), dl.message_id.as_deref(), dl.body.as_slice()),
        ("maxlen", Some("m-1"), &b"first"[..])
    );
    t.delete().await;
}

#[tokio::test]
async fn a_message_published_straight_to_the_dlq_is_stored_with_reason_none() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    t.publish(&t.dlq, b"{\"by\":\"hand\"}", BasicProperties::default()).await;
    let ing = start_ingest(&db.pool, vec![t.dlq.clone()]);
    wait_for_rows(&db.pool, &t.dlq, 1).await;
    ing.stop().await;
    let page = store::list(&db.pool, &ListFilter { reason: Some("none".into()), ..Default::default() }, None, 10)
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    let dl = store::get(&db.pool, page.items[0].id).await.unwrap();
    assert_eq!((dl.original_queue, dl.death_count, dl.headers), (None, 0, None));
    t.delete().await;
}

#[tokio::test]
async fn a_redelivery_after_a_crash_between_commit_and_ack_yields_exactly_one_row() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    t.publish(&t.work, b"once", BasicProperties::default().with_message_id("crash-1".into())).await;
    t.reject_one().await;

    // The "crashed" ingester: stores and commits, then dies before its ack.
    let ch = t.conn.create_channel().await.unwrap();
    let got = eventually("the dead letter in the DLQ", Duration::from_secs(2), async || {
        ch.basic_get(t.dlq.as_str().into(), BasicGetOptions::default()).await.unwrap().ok_or("empty")
    })
    .await;
    let first = Received::from_delivery(&t.dlq, &got.delivery);
    assert!(matches!(store::insert_committed(&db.pool, &first).await.unwrap(), store::InsertOutcome::Inserted(_)));
    ch.close(200, "crash".into()).await.unwrap();
    assert_eq!(t.ready(&t.dlq).await, 1, "RabbitMQ must have the unacked message back");

    let ing = start_ingest(&db.pool, vec![t.dlq.clone()]);
    eventually("the redelivery counted as a duplicate", Duration::from_secs(10), async || {
        let s = ing.stats.snapshot();
        if s.duplicates == 1 { Ok(()) } else { Err(s) }
    })
    .await;
    let stats = ing.stop().await.snapshot();
    assert_eq!((stats.duplicates, stats.stored), (1, 0));
    assert_eq!(count(&db.pool, &t.dlq).await, 1);
    assert_eq!(t.ready(&t.dlq).await, 0, "the redelivery is acked once known to be stored");
    let groups = store::groups(&db.pool, &GroupFilter::default(), 10).await.unwrap();
    assert_eq!(groups[0].count, 1, "a duplicate must not count twice in its group");
    t.delete().await;
}

#[tokio::test]
async fn nothing_is_acked_when_the_database_refuses_the_insert() {
    let broken = fresh_db().await;
    sqlx::query!("DROP TABLE dead_letters CASCADE").execute(&broken.pool).await.unwrap();
    let t = Topology::new(&[]).await;
    t.publish(&t.dlq, b"precious", BasicProperties::default().with_message_id("keep-me".into())).await;

    let ing = start_ingest(&broken.pool, vec![t.dlq.clone()]);
    eventually("the refused insert retried", Duration::from_secs(10), async || {
        let s = ing.stats.snapshot();
        if s.store_errors >= 2 { Ok(()) } else { Err(s) }
    })
    .await;
    let stats = ing.stop().await.snapshot();
    assert_eq!(stats.stored, 0);
    assert_eq!(t.ready(&t.dlq).await, 1, "the message must still be in the queue");

    // And a working store then gets it, whole.
    let db = fresh_db().await;
    let ing = start_ingest(&db.pool, vec![t.dlq.clone()]);
    wait_for_rows(&db.pool, &t.dlq, 1).await;
    ing.stop().await;
    let page =
        store::list(&db.pool, &ListFilter { message_id: Some("keep-me".into()), ..Default::default() }, None, 10)
            .await
            .unwrap();
    assert_eq!(page.items[0].body_head, b"precious");
    t.delete().await;
}

#[tokio::test]
async fn a_missing_queue_does_not_stop_ingest_of_the_others() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    t.publish(&t.dlq, b"x", BasicProperties::default()).await;
    let ing = start_ingest(&db.pool, vec![unique("revenant-test.missing"), t.dlq.clone()]);
    wait_for_rows(&db.pool, &t.dlq, 1).await;
    ing.stop().await;
    t.delete().await;
}

#[tokio::test]
async fn three_hundred_forty_messages_failing_the_same_way_form_one_group() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    for i in 0..340 {
        let mut h = FieldTable::default();
        h.insert("x-exception-type".into(), AMQPValue::LongString("PaymentDeclined".into()));
        let msg = format!("payment {} for order {} declined", uuid::Uuid::new_v4(), 1000 + i);
        h.insert("x-exception-message".into(), AMQPValue::LongString(msg.into()));
        let props = BasicProperties::default().with_message_id(format!("pay-{i}").into()).with_headers(h);
        t.publish(&t.work, format!("{{\"order\":{}}}", 1000 + i).as_bytes(), props).await;
    }
    for _ in 0..340 {
        t.reject_one().await;
    }
    let ing = start_ingest(&db.pool, vec![t.dlq.clone()]);
    wait_for_rows(&db.pool, &t.dlq, 340).await;
    ing.stop().await;

    let groups = store::groups(&db.pool, &GroupFilter { only_awaiting: true, ..Default::default() }, 10).await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!((groups[0].count, groups[0].awaiting), (340, 340));
    assert_eq!(groups[0].error_type.as_deref(), Some("PaymentDeclined"));
    assert_eq!(groups[0].original_queue.as_deref(), Some(t.work.as_str()));

    // Keyset pages of 50 walk all 340, newest first, each exactly once.
    let filter = ListFilter { group_id: Some(groups[0].id), ..Default::default() };
    let (mut seen, mut cursor, mut pages) = (Vec::new(), None, 0);
    loop {
        let page = store::list(&db.pool, &filter, cursor, 50).await.unwrap();
        pages += 1;
        seen.extend(page.items.iter().map(|r| (r.ingested_at, r.id)));
        match page.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!((seen.len(), pages), (340, 7));
    assert!(seen.windows(2).all(|w| w[0] > w[1]));
    t.delete().await;
}

#[tokio::test]
async fn list_filters_narrow_by_reason_error_text_body_bytes_origin_and_status() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    let mut h = FieldTable::default();
    h.insert("x-error".into(), AMQPValue::LongString("Timeout: 100% of tries_used".into()));
    t.publish(&t.work, b"\x00needle\xff", BasicProperties::default().with_message_id("a".into()).with_headers(h)).await;
    t.reject_one().await;
    t.publish(&t.dlq, b"hay", BasicProperties::default().with_message_id("b".into())).await;
    let ing = start_ingest(&db.pool, vec![t.dlq.clone()]);
    wait_for_rows(&db.pool, &t.dlq, 2).await;
    ing.stop().await;

    let ids = |p: store::Page| p.items.into_iter().map(|r| r.message_id.unwrap()).collect::<Vec<_>>();
    let list = |f: ListFilter| {
        let pool = db.pool.clone();
        async move { ids(store::list(&pool, &f, None, 10).await.unwrap()) }
    };
    assert_eq!(list(ListFilter { reason: Some("rejected".into()), ..Default::default() }).await, ["a"]);
    assert_eq!(list(ListFilter { error_text: Some("100% OF TRIES_".into()), ..Default::default() }).await, ["a"]);
    assert!(list(ListFilter { error_text: Some("1_0%".into()), ..Default::default() }).await.is_empty());
    assert_eq!(list(ListFilter { body_contains: Some(b"needle\xff".to_vec()), ..Default::default() }).await, ["a"]);
    assert_eq!(list(ListFilter { message_id: Some("b".into()), ..Default::default() }).await, ["b"]);
    // The DLQ and the queue a message died in are two filters: "a" died in the work queue.
    assert_eq!(list(ListFilter { origin: Some(t.work.clone()), ..Default::default() }).await, ["a"]);
    assert!(list(ListFilter { queue: Some(t.work.clone()), ..Default::default() }).await.is_empty());
    assert_eq!(list(ListFilter { queue: Some(t.dlq.clone()), ..Default::default() }).await.len(), 2);
    let future = chrono::Utc::now() + chrono::Duration::hours(1);
    assert!(list(ListFilter { newer_than: Some(future), ..Default::default() }).await.is_empty());
    assert_eq!(list(ListFilter { older_than: Some(future), ..Default::default() }).await.len(), 2);

    let b = store::list(&db.pool, &ListFilter { message_id: Some("b".into()), ..Default::default() }, None, 1)
        .await
        .unwrap()
        .items[0]
        .id;
    assert_eq!(store::archive(&db.pool, &[b], "test noise").await.unwrap(), vec![b]);
    let archived = Some(store::Status::Archived);
    assert_eq!(list(ListFilter { status: archived, ..Default::default() }).await, ["b"]);
    assert_eq!(list(ListFilter { status: Some(store::Status::Awaiting), ..Default::default() }).await, ["a"]);
    // Guarded transition: only awaiting rows move to replaying.
    let moved =
        store::set_status(&db.pool, &[b], Some(store::Status::Awaiting), store::Status::Replaying).await.unwrap();
    assert!(moved.is_empty());
    t.delete().await;
}

#[tokio::test]
async fn the_depth_sampler_records_ready_messages_consumers_and_unacked() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    for _ in 0..3 {
        t.publish(&t.dlq, b"x", BasicProperties::default()).await;
    }
    let http = reqwest::Client::new();
    let queues = vec![t.dlq.clone(), unique("revenant-test.missing")];
    let written = depth::sample_once(&db.pool, &t.conn, &http, None, "/", &queues).await.unwrap();
    assert_eq!(written, 1, "a missing queue is skipped");
    let missing = engine::dead_letter::missing::all(&db.pool).await.unwrap();
    assert_eq!(missing.keys().collect::<Vec<_>>(), [&queues[1]], "and recorded as missing");
    let again = engine::dead_letter::missing::record(&db.pool, &queues[1], false).await.unwrap();
    assert!(!again, "missing already: not news");
    let latest = depth::latest(&db.pool).await.unwrap();
    assert_eq!(latest.len(), 1);
    let s = &latest[0];
    assert_eq!((s.queue.as_str(), s.ready, s.consumers, s.unacked), (t.dlq.as_str(), 3, 0, None));

    // Hold one message unacked: only the management API can see it, once its stats tick.
    let holder = t.conn.create_channel().await.unwrap();
    let held = holder.basic_get(t.dlq.as_str().into(), BasicGetOptions::default()).await.unwrap();
    assert!(held.is_some());
    let mgmt = Some("http://guest:guest@127.0.0.1:15672");
    let last = eventually("a sample with the held message unacked", Duration::from_secs(15), async || {
        depth::sample_once(&db.pool, &t.conn, &http, mgmt, "/", &queues[..1]).await.unwrap();
        match depth::latest(&db.pool).await.unwrap().pop() {
            Some(s) if s.unacked == Some(1) => Ok(s),
            seen => Err(seen),
        }
    })
    .await;
    assert_eq!((last.ready, last.unacked), (2, Some(1)));

    let since = chrono::Utc::now() - chrono::Duration::minutes(1);
    let series = depth::series(&db.pool, &t.dlq, since).await.unwrap();
    assert!(series.len() >= 2 && series.windows(2).all(|w| w[0].at <= w[1].at));
    sqlx::query!("UPDATE queue_samples SET at = now() - interval '8 days'").execute(&db.pool).await.unwrap();
    assert_eq!(depth::prune(&db.pool).await.unwrap(), series.len() as u64);
    assert!(depth::latest(&db.pool).await.unwrap().is_empty());
    // A missing queue that is declared again is present again.
    let ch = t.conn.create_channel().await.unwrap();
    ch.queue_declare(queues[1].as_str().into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    depth::sample_once(&db.pool, &t.conn, &http, None, "/", &queues).await.unwrap();
    assert!(engine::dead_letter::missing::all(&db.pool).await.unwrap().is_empty());
    ch.queue_delete(queues[1].as_str().into(), Default::default()).await.unwrap();
    drop(held);
    t.delete().await;
}

#[tokio::test]
async fn a_message_whose_id_and_headers_hold_nul_bytes_is_still_stored() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    let mut h = FieldTable::default();
    h.insert("k\0ey".into(), AMQPValue::LongString("v\0al".into()));
    let props = BasicProperties::default().with_message_id("id\0nul".into()).with_headers(h.clone());
    t.publish(&t.dlq, b"\0", props).await;
    let ing = start_ingest(&db.pool, vec![t.dlq.clone()]);
    wait_for_rows(&db.pool, &t.dlq, 1).await;
    let stats = ing.stop().await.snapshot();
    assert_eq!(stats.store_errors, 0);
    let page = store::list(&db.pool, &ListFilter::default(), None, 10).await.unwrap();
    let dl = store::get(&db.pool, page.items[0].id).await.unwrap();
    assert_eq!(dl.message_id.as_deref(), Some("id\u{FFFD}nul"));
    assert_eq!(dl.properties().unwrap().headers().clone(), Some(h), "headers stay exact");
    assert_eq!(dl.body, b"\0");
    t.delete().await;
}
