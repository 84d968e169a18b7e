//! `revenant demo` against the real RabbitMQ and a fresh database per test. Every test uses
//! its own topology prefix, so a demo a developer runs on the same broker is never touched,
//! and deletes its topology at the end.

use std::time::Duration;

use engine::{
    dead_letter::{Received, store as dl_store},
    outbox::store::{NewEvent, StoreError, enqueue},
};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ExchangeKind,
    message::BasicGetMessage,
    options::{
        BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueDeclareOptions,
    },
    types::{AMQPValue, FieldTable},
};
use sqlx::PgPool;
use testkit::{amqp_url, eventually, fresh_db, unique};
use tokio_util::sync::CancellationToken;
use tools::demo::{
    self, DemoError, Names,
    service::{self, Plan, Shape, Step},
    topology::{self, DemoQueue},
};

async fn broker() -> (Connection, Channel, Names) {
    let conn = engine::amqp::connect(&amqp_url(), "revenant-test-demo").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    (conn, ch, Names::new(&unique("demo-t")).unwrap())
}

async fn cleanup(conn: Connection, names: &Names) {
    let _ = topology::delete(&conn, names).await;
    let _ = conn.close(200, "test done".into()).await;
}

/// Publishes with `mandatory` and returns the broker's confirmation.
async fn publish(ch: &Channel, exchange: &str, key: &str, body: &[u8], props: BasicProperties) -> Confirmation {
    let opts = BasicPublishOptions { mandatory: true, ..Default::default() };
    ch.basic_publish(exchange.into(), key.into(), opts, body, props).await.unwrap().await.unwrap()
}

async fn queue_exists(conn: &Connection, queue: &str) -> bool {
    let ch = conn.create_channel().await.unwrap();
    let opts = QueueDeclareOptions { passive: true, ..Default::default() };
    let ok = ch.queue_declare(queue.into(), opts, FieldTable::default()).await.is_ok();
    let _ = ch.close(200, "".into()).await;
    ok
}

async fn exchange_exists(conn: &Connection, exchange: &str) -> bool {
    let ch = conn.create_channel().await.unwrap();
    let opts = ExchangeDeclareOptions { passive: true, ..Default::default() };
    let ok = ch.exchange_declare(exchange.into(), ExchangeKind::Topic, opts, FieldTable::default()).await.is_ok();
    let _ = ch.close(200, "".into()).await;
    ok
}

/// Waits up to 10 s for a message in `queue`, and acks it.
async fn get(ch: &Channel, queue: &str) -> BasicGetMessage {
    eventually(&format!("a message in {queue}"), Duration::from_secs(10), async || {
        ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.unwrap().ok_or("empty")
    })
    .await
}

fn header(m: &BasicGetMessage, name: &str) -> Option<String> {
    match m.delivery.properties.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongString(s) => Some(s.to_string()),
        other => panic!("{name} is {other:?}"),
    }
}

async fn demo_orders(pool: &PgPool) -> i64 {
    // Runtime-checked: the demo's own table is made by `revenant demo`, not by the migrations.
    sqlx::query_scalar("SELECT count(*) FROM public.demo_orders").fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn declaring_the_demo_topology_twice_is_idempotent_and_routes_each_key() {
    let (conn, ch, names) = broker().await;
    topology::declare(&ch, &names).await.unwrap();
    topology::declare(&ch, &names).await.unwrap();

    for q in names.all_queues() {
        assert!(queue_exists(&conn, &q).await, "{q} missing");
    }
    let routed = publish(&ch, &names.exchange(), "order.shipped", b"{}", BasicProperties::default()).await;
    assert!(matches!(routed, Confirmation::Ack(None)), "order.shipped: {routed:?}");
    let refund = publish(&ch, &names.exchange(), "order.refunded", b"{}", BasicProperties::default()).await;
    assert!(matches!(refund, Confirmation::Ack(Some(_))), "order.refunded should be returned: {refund:?}");
    // The audit trail sees every routed event; notifications only shipments.
    get(&ch, &names.queue(DemoQueue::AuditTrail)).await;
    get(&ch, &names.queue(DemoQueue::Notifications)).await;
    cleanup(conn, &names).await;
}

#[tokio::test]
async fn one_service_tick_writes_the_order_and_its_outbox_event_together() {
    let db = fresh_db().await;
    let names = Names::new(&unique("demo-t")).unwrap();
    service::ensure_table(&db.pool).await.unwrap();
    service::ensure_table(&db.pool).await.unwrap();

    let created = service::write(&db.pool, &names, &Plan::new(Step::Create, Shape::Valid)).await.unwrap();
    let paid = service::write(&db.pool, &names, &Plan::new(Step::Pay, Shape::Valid)).await.unwrap();
    assert_eq!((paid.order_id, paid.step), (created.order_id, Step::Pay), "paying advances the created order");

    // Runtime-checked: the demo's own table.
    let status: String = sqlx::query_scalar("SELECT status FROM public.demo_orders WHERE id = $1")
        .bind(created.order_id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(status, "paid");
    let row =
        sqlx::query!("SELECT exchange, routing_key, payload, headers FROM outbox WHERE event_id = $1", paid.event_id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let (exchange, key, payload, headers) = (row.exchange, row.routing_key, row.payload, row.headers);
    assert_eq!((exchange.as_str(), key.as_str()), (names.exchange().as_str(), "order.paid"));
    let body: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(body["orderId"], created.order_id);
    assert!(headers["x-tenant"].is_string() && headers["traceparent"].is_string(), "{headers}");
    assert!(headers["x-order-id"].is_string(), "the aggregate, for the commit-stream relay's order: {headers}");
}

#[tokio::test]
async fn when_the_event_cannot_be_enqueued_the_order_is_rolled_back() {
    let db = fresh_db().await;
    let names = Names::new(&unique("demo-t")).unwrap();
    service::ensure_table(&db.pool).await.unwrap();
    let taken = enqueue(&db.pool, &NewEvent::new("Other", "other", "k", b"{}".to_vec())).await.unwrap();

    let plan = Plan { event_id: taken, ..Plan::new(Step::Create, Shape::Valid) };
    let err = service::write(&db.pool, &names, &plan).await.unwrap_err();
    assert!(matches!(err, DemoError::Outbox(StoreError::DuplicateEvent(id)) if id == taken), "{err:?}");
    assert_eq!(demo_orders(&db.pool).await, 0, "the order outlived its event");
}

#[tokio::test]
async fn when_the_order_cannot_be_written_no_event_is_enqueued() {
    let db = fresh_db().await;
    let names = Names::new(&unique("demo-t")).unwrap();
    service::ensure_table(&db.pool).await.unwrap();

    let plan = Plan { amount_cents: 0, ..Plan::new(Step::Create, Shape::Valid) };
    let err = service::write(&db.pool, &names, &plan).await.unwrap_err();
    assert!(matches!(err, DemoError::Db(_)), "{err:?}");
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM outbox"), 0);
}

struct Consumers {
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

fn start_consumers(names: &Names) -> Consumers {
    let stop = CancellationToken::new();
    let started = std::time::Instant::now();
    let handle = tokio::spawn(demo::consumers::run(amqp_url(), names.clone(), started, stop.clone()));
    Consumers { stop, handle }
}

impl Consumers {
    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.handle).await.unwrap().unwrap().unwrap();
    }
}

#[tokio::test]
async fn the_consumers_dead_letter_a_poison_message_into_its_own_dlq_with_exception_headers() {
    let (conn, ch, names) = broker().await;
    topology::declare(&ch, &names).await.unwrap();
    let consumers = start_consumers(&names);

    let props = BasicProperties::default().with_message_id("evt-1".into());
    let c = publish(&ch, &names.exchange(), "order.paid", br#"{"order_id":1234}"#, props).await;
    assert!(matches!(c, Confirmation::Ack(None)), "{c:?}");

    let dlq = names.dlq(DemoQueue::OrdersPaid);
    let m = get(&ch, &dlq).await;
    assert_eq!(header(&m, "x-exception-type").as_deref(), Some("ValidationError"));
    assert_eq!(header(&m, "x-exception-message").as_deref(), Some("field orderId missing in order 1234"));
    assert_eq!(header(&m, "x-original-queue"), Some(names.queue(DemoQueue::OrdersPaid)));
    assert_eq!(m.delivery.properties.message_id().as_ref().map(|s| s.as_str()), Some("evt-1"));
    assert_eq!(m.delivery.data, br#"{"order_id":1234}"#);
    // What the ingester will make of it: a failure group that says why.
    let derived = Received::from_delivery(&dlq, &m.delivery).derive();
    assert_eq!(derived.error_type.as_deref(), Some("ValidationError"));
    // order.paid also feeds shipping, which dead-letters into its own DLQ, not billing's.
    let shipped = get(&ch, &names.dlq(DemoQueue::Shipping)).await;
    assert_eq!(header(&shipped, "x-original-queue"), Some(names.queue(DemoQueue::Shipping)));
    consumers.stop().await;
    assert!(ch.basic_get(dlq.as_str().into(), BasicGetOptions::default()).await.unwrap().is_none());
    cleanup(conn, &names).await;
}

#[tokio::test]
async fn a_body_that_is_not_json_is_rejected_into_its_dlq_without_exception_headers() {
    let (conn, ch, names) = broker().await;
    topology::declare(&ch, &names).await.unwrap();
    let consumers = start_consumers(&names);

    let c = publish(&ch, &names.exchange(), "order.created", b"order 7 created", BasicProperties::default()).await;
    assert!(matches!(c, Confirmation::Ack(None)), "{c:?}");
    let dlq = names.dlq(DemoQueue::OrdersCreated);
    let m = get(&ch, &dlq).await;
    let derived = Received::from_delivery(&dlq, &m.delivery).derive();
    assert_eq!(derived.reason, "rejected");
    assert_eq!(derived.original_queue, Some(names.queue(DemoQueue::OrdersCreated)));
    assert_eq!(header(&m, "x-exception-type"), None);
    consumers.stop().await;
    cleanup(conn, &names).await;
}

#[tokio::test]
async fn the_demo_writes_events_at_its_rate_and_stops_cleanly() {
    let db = fresh_db().await;
    let names = Names::new(&unique("demo-t")).unwrap();
    let stop = CancellationToken::new();
    let run = tokio::spawn(demo::run_with(db.pool.clone(), amqp_url(), names.clone(), 20.0, stop.clone()));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), run).await.unwrap().unwrap().unwrap();

    let exchange = names.exchange();
    let events = count!(&db.pool, "SELECT count(*) FROM outbox WHERE exchange = $1", &exchange);
    assert!((10..=40).contains(&events), "{events} events in 1.5 s at 20/s");
    let orders = demo_orders(&db.pool).await;
    assert!(orders > 0 && orders <= events, "{orders} orders for {events} events");
    assert!(demo::run_with(db.pool.clone(), amqp_url(), names.clone(), 0.0, CancellationToken::new()).await.is_err());

    let conn = engine::amqp::connect(&amqp_url(), "revenant-test-demo").await.unwrap();
    cleanup(conn, &names).await;
}

#[tokio::test]
async fn reset_removes_the_demo_topology_and_only_the_demo_rows() {
    let db = fresh_db().await;
    let (conn, ch, names) = broker().await;
    topology::declare(&ch, &names).await.unwrap();
    service::ensure_table(&db.pool).await.unwrap();
    service::write(&db.pool, &names, &Plan::new(Step::Create, Shape::Valid)).await.unwrap();
    enqueue(&db.pool, &NewEvent::new("Other", "billing", "invoice.sent", b"{}".to_vec())).await.unwrap();
    for queue in [names.dlq(DemoQueue::Shipping), "billing.dlq".to_string()] {
        let r = Received {
            queue: queue.clone(),
            exchange: "x".into(),
            routing_key: "k".into(),
            properties: BasicProperties::default().with_message_id(queue.as_str().into()),
            body: b"{}".to_vec(),
        };
        let dl_store::InsertOutcome::Inserted(id) = dl_store::insert_committed(&db.pool, &r).await.unwrap() else {
            panic!("{queue}: not inserted");
        };
        // An operator replayed it: the replay refers to the dead letter.
        let plan = sqlx::query_scalar!(
            "INSERT INTO replay_plans (created_by, source, target_mode) VALUES ('ada', '{}', 'original') RETURNING id",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        sqlx::query!(
            "INSERT INTO replay_items (plan_id, dead_letter_id, seq, exchange, routing_key) VALUES ($1, $2, 1, 'x', 'k')",
            plan,
            id
        )
        .execute(&db.pool)
        .await
        .unwrap();
        sqlx::query!("INSERT INTO queue_samples (queue, ready, consumers) VALUES ($1, 1, 0)", &queue)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let c = publish(&ch, &names.exchange(), "order.created", b"{}", BasicProperties::default()).await;
    assert!(matches!(c, Confirmation::Ack(None)));

    let summary = demo::reset_with(&db.pool, &amqp_url(), &names).await.unwrap();
    assert_eq!(
        (summary.outbox_rows, summary.dead_letters, summary.failure_groups, summary.queue_samples),
        (1, 1, 1, 1)
    );
    assert_eq!(summary.replay_plans, 1);
    assert!(summary.broker_messages >= 2, "{summary:?}");
    for q in names.all_queues() {
        assert!(!queue_exists(&conn, &q).await, "{q} survived the reset");
    }
    for x in [names.exchange(), names.dlx()] {
        assert!(!exchange_exists(&conn, &x).await, "{x} survived the reset");
    }
    let table: Option<String> =
        sqlx::query_scalar!("SELECT to_regclass('public.demo_orders')::text").fetch_one(&db.pool).await.unwrap();
    assert_eq!(table, None);
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM outbox"), 1, "the non-demo event must stay");
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM dead_letters"), 1);
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM failure_groups"), 1);
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM queue_samples"), 1);
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM replay_items"), 1);
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM replay_plans"), 1);
    // A second reset finds nothing left and does not fail.
    assert_eq!(demo::reset_with(&db.pool, &amqp_url(), &names).await.unwrap(), demo::ResetSummary::default());
    let _ = conn.close(200, "test done".into()).await;
}
