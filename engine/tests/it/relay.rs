//! The outbox relay against the real RabbitMQ and a fresh database per test, with uniquely
//! named exchanges and queues that each test deletes at the end.

use std::{collections::HashSet, sync::Arc, sync::atomic::Ordering::Relaxed, time::Duration};

use engine::{
    outbox::{
        relay::{self, RelayStats},
        store::{self, NewEvent},
    },
    settings::RelaySettings,
};
use lapin::{
    Channel, Connection, ExchangeKind,
    options::{BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions},
    types::{AMQPValue, FieldTable},
};
use serde_json::json;
use sqlx::PgPool;
use testkit::{Doomed, amqp_url, count_until, eventually, fresh_db, unique};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub(crate) fn cfg() -> RelaySettings {
    RelaySettings {
        window: 16,
        // Two lanes, so every relay test runs the per-key channel choice.
        channels: 2,
        batch: 50,
        lease: Duration::from_secs(30),
        max_attempts: 3,
        backoff_base: Duration::from_millis(10),
        backoff_max: Duration::from_millis(50),
        poll: Duration::from_millis(100),
        poll_min: Duration::from_millis(5),
        confirm_timeout: Duration::from_secs(5),
        mark_batch: 64,
        mark_flush: Duration::from_millis(5),
        synchronous_commit: true,
        capture: Default::default(),
        database_url: None,
    }
}

pub(crate) struct Relay {
    pub(crate) stop: CancellationToken,
    pub(crate) handle: JoinHandle<anyhow::Result<()>>,
    pub(crate) stats: Arc<RelayStats>,
}

pub(crate) fn start(pool: &PgPool, cfg: RelaySettings) -> Relay {
    let stop = CancellationToken::new();
    let stats = Arc::new(RelayStats::default());
    let handle = tokio::spawn(relay::run(pool.clone(), amqp_url(), cfg, stats.clone(), stop.clone()));
    Relay { stop, handle, stats }
}

impl Relay {
    pub(crate) async fn stop(self) -> Arc<RelayStats> {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("relay stops within 30 s")
            .expect("relay task did not panic")
            .expect("relay returns Ok on shutdown");
        self.stats
    }
}

/// An exchange, and a queue bound to it with `routing_key` (none when `None`).
struct Topology {
    /// The exchange and queue: deleted when the topology goes, a failing test's too.
    _names: Doomed,
    conn: Connection,
    ch: Channel,
    exchange: String,
    queue: String,
}

async fn topology(routing_key: Option<&str>) -> Topology {
    let conn = engine::amqp::connect(&amqp_url(), "revenant-test").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let names = Doomed::new();
    let (exchange, queue) = (names.exchange("test.relay.x"), names.queue("test.relay.q"));
    ch.exchange_declare(
        exchange.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare(queue.as_str().into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    if let Some(rk) = routing_key {
        ch.queue_bind(
            queue.as_str().into(),
            exchange.as_str().into(),
            rk.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    Topology { _names: names, conn, ch, exchange, queue }
}

impl Topology {
    /// Takes every message now in the queue.
    async fn drain(&self) -> Vec<lapin::message::BasicGetMessage> {
        let mut out = Vec::new();
        let opts = BasicGetOptions { no_ack: true };
        while let Some(m) = self.ch.basic_get(self.queue.as_str().into(), opts).await.unwrap() {
            out.push(m);
        }
        out
    }

    /// Closes the connection; the exchange and queue go with the names.
    async fn delete(self) {
        let _ = self.conn.close(200, "test done".into()).await;
    }
}

async fn enqueue(pool: &PgPool, ev: NewEvent) -> Uuid {
    store::enqueue(pool, &ev).await.unwrap()
}

#[tokio::test]
async fn a_published_message_carries_the_event_id_headers_and_content_type_and_is_persistent() {
    let db = fresh_db().await;
    let t = topology(Some("order.placed")).await;
    let payload: Vec<u8> = vec![0xff, 0x00, 0xfe, b'{'];
    let headers = json!({"tenant": "acme", "n": 42, "ratio": 0.5, "ok": true, "gone": null, "nested": {"a": "b"}, "list": [1, "x"]});
    let ev = NewEvent::new("OrderPlaced", &t.exchange, "order.placed", payload.clone())
        .with_content_type("application/vnd.acme+octets")
        .with_headers(headers);
    let event_id = enqueue(&db.pool, ev).await;
    let relay = start(&db.pool, cfg());
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 1).await;
    let stats = relay.stop().await;

    let msgs = t.drain().await;
    assert_eq!(msgs.len(), 1);
    let p = &msgs[0].delivery.properties;
    assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some(event_id.to_string().as_str()));
    assert_eq!(p.content_type().as_ref().map(|s| s.as_str()), Some("application/vnd.acme+octets"));
    assert_eq!(p.kind().as_ref().map(|s| s.as_str()), Some("OrderPlaced"));
    assert_eq!(*p.delivery_mode(), Some(2), "persistent");
    assert!(p.timestamp().is_some());
    assert_eq!(msgs[0].delivery.data, payload, "body bytes unchanged");
    let h = p.headers().as_ref().expect("headers present").inner();
    assert_eq!(h.get("tenant"), Some(&AMQPValue::LongString("acme".into())));
    assert_eq!(h.get("n"), Some(&AMQPValue::LongLongInt(42)));
    assert_eq!(h.get("ratio"), Some(&AMQPValue::Double(0.5)));
    assert_eq!(h.get("ok"), Some(&AMQPValue::Boolean(true)));
    assert_eq!(h.get("gone"), Some(&AMQPValue::Void));
    assert!(matches!(h.get("nested"), Some(AMQPValue::FieldTable(_))));
    assert!(matches!(h.get("list"), Some(AMQPValue::FieldArray(_))));

    let row = sqlx::query!(
        r#"SELECT attempts, lease_owner IS NOT NULL AS "leased!" FROM outbox WHERE event_id = $1"#,
        event_id
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((row.attempts, row.leased), (1, false));
    assert_eq!(stats.published.load(Relaxed), 1);
    assert_eq!(stats.confirm_latency().count, 1);
    let window = sqlx::query_scalar!("SELECT detail->>'window' FROM heartbeats WHERE role = 'relay'")
        .fetch_optional(&db.pool)
        .await
        .unwrap()
        .flatten();
    assert_eq!(window.as_deref(), Some("16"), "the relay reports its window in its heartbeat");
    t.delete().await;
}

#[tokio::test]
async fn an_unroutable_row_is_never_marked_published_and_fails_with_the_brokers_reason() {
    let db = fresh_db().await;
    let t = topology(None).await;
    let event_id = enqueue(&db.pool, NewEvent::new("Lost", &t.exchange, "nowhere", b"{}".to_vec())).await;
    let relay = start(&db.pool, cfg());
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status <> 'pending'", |c| c == 1).await;
    let stats = relay.stop().await;

    let row =
        sqlx::query!("SELECT status, attempts, last_error, published_at FROM outbox WHERE event_id = $1", event_id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(row.status, "failed");
    assert_eq!(row.attempts, 3, "max_attempts");
    let err = row.last_error.unwrap_or_default();
    assert!(err.contains("NO_ROUTE") && err.contains("312"), "{err}");
    assert!(row.published_at.is_none());
    assert_eq!(stats.returned.load(Relaxed), 3);
    assert_eq!(stats.failed_final.load(Relaxed), 1);
    assert_eq!(stats.published.load(Relaxed), 0);
    t.delete().await;
}

#[tokio::test]
async fn one_bad_row_does_not_block_the_rows_behind_it() {
    let db = fresh_db().await;
    let t = topology(Some("k")).await;
    // Written by a service that bypassed `enqueue`: headers that no AMQP table can carry.
    for headers in [r#"["not", "an object"]"#, r#"{"big": 18446744073709551615}"#] {
        sqlx::query!(
            r#"INSERT INTO outbox (event_type, exchange, routing_key, payload, headers) VALUES ('Bad', $1, 'k', '\x00', $2::text::jsonb)"#,
            &t.exchange,
            headers
        )
        .execute(&db.pool)
        .await
        .unwrap();
    }
    for i in 0..5 {
        enqueue(&db.pool, NewEvent::new("Good", &t.exchange, "k", format!("{{\"i\":{i}}}"))).await;
    }
    // Strict mode: one row claimed and in flight at a time, so a stuck bad row would stop all.
    let relay = start(&db.pool, RelaySettings { window: 1, batch: 1, ..cfg() });
    count_until(
        "relay",
        &db.pool,
        "SELECT count(*) FROM outbox WHERE event_type = 'Good' AND status = 'published'",
        |c| c == 5,
    )
    .await;
    count_until(
        "relay",
        &db.pool,
        "SELECT count(*) FROM outbox WHERE event_type = 'Bad' AND status = 'failed' AND attempts = 1",
        |c| c == 2,
    )
    .await;
    let stats = relay.stop().await;

    let errors: Vec<String> =
        sqlx::query_scalar!(r#"SELECT last_error AS "e!" FROM outbox WHERE event_type = 'Bad' ORDER BY id"#)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(errors[0], "bad row: headers must be a JSON object, not an array");
    assert!(errors[1].contains("headers.big") && errors[1].contains("64-bit"), "{}", errors[1]);
    assert_eq!(t.drain().await.len(), 5);
    assert_eq!(stats.failed_final.load(Relaxed), 2);
    t.delete().await;
}

#[tokio::test]
async fn a_missing_exchange_fails_its_row_without_stalling_the_others() {
    let db = fresh_db().await;
    let t = topology(Some("k")).await;
    let missing = unique("test.relay.missing");
    let lost = enqueue(&db.pool, NewEvent::new("Lost", &missing, "k", b"{}".to_vec())).await;
    for _ in 0..20 {
        enqueue(&db.pool, NewEvent::new("Good", &t.exchange, "k", b"{}".to_vec())).await;
    }
    let relay = start(&db.pool, cfg());
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 20).await;
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'failed'", |c| c == 1).await;
    relay.stop().await;
    let err = sqlx::query_scalar!("SELECT last_error FROM outbox WHERE event_id = $1", lost)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(err.as_deref().unwrap_or_default().contains("NOT_FOUND"), "{err:?}");
    assert_eq!(t.drain().await.len(), 20);
    t.delete().await;
}

#[tokio::test]
async fn two_relays_over_2000_rows_publish_every_event_exactly_once() {
    let db = fresh_db().await;
    let t = topology(Some("bulk")).await;
    bulk(&db.pool, &t.exchange, "bulk", 2000).await;
    let c = RelaySettings { window: 32, batch: 100, ..cfg() };
    let (a, b) = (start(&db.pool, c.clone()), start(&db.pool, c));
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 2000).await;
    let (sa, sb) = (a.stop().await, b.stop().await);

    let expected: HashSet<String> = sqlx::query_scalar::<_, Uuid>("SELECT event_id FROM outbox")
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .iter()
        .map(Uuid::to_string)
        .collect();
    let got: Vec<String> =
        t.drain().await.iter().map(|m| m.delivery.properties.message_id().as_ref().unwrap().to_string()).collect();
    let distinct: HashSet<String> = got.iter().cloned().collect();
    assert_eq!(distinct, expected, "every event id reached the queue");
    assert_eq!(got.len(), 2000, "and none twice");
    let (pa, pb) = (sa.published.load(Relaxed), sb.published.load(Relaxed));
    assert_eq!(pa + pb, 2000);
    assert!(pa > 0 && pb > 0, "both relays took a share: {pa} / {pb}");
    t.delete().await;
}

#[tokio::test]
async fn an_expired_lease_from_a_crashed_relay_is_reclaimed_and_a_live_one_is_respected() {
    let db = fresh_db().await;
    let t = topology(Some("k")).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(enqueue(&db.pool, NewEvent::new("E", &t.exchange, "k", b"{}".to_vec())).await);
    }
    let crashed = Uuid::new_v4();
    sqlx::query!(
        "UPDATE outbox SET lease_owner = $1, lease_expires_at = now() - interval '1 second' WHERE event_id = ANY($2)",
        crashed,
        &ids[..2]
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query!(
        "UPDATE outbox SET lease_owner = $1, lease_expires_at = now() + interval '1 hour' WHERE event_id = $2",
        Uuid::new_v4(),
        ids[2]
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let relay = start(&db.pool, cfg());
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 2).await;
    // Give the relay time to (wrongly) take the live lease too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    relay.stop().await;
    let status =
        sqlx::query_scalar!("SELECT status FROM outbox WHERE event_id = $1", ids[2]).fetch_one(&db.pool).await.unwrap();
    assert_eq!(status, "pending", "a row under another relay's live lease is left alone");
    let got: HashSet<String> =
        t.drain().await.iter().map(|m| m.delivery.properties.message_id().as_ref().unwrap().to_string()).collect();
    assert_eq!(got, ids[..2].iter().map(Uuid::to_string).collect());
    t.delete().await;
}

#[tokio::test]
async fn shutdown_waits_for_confirms_in_flight_and_releases_the_unsent_leases() {
    let db = fresh_db().await;
    let t = topology(Some("k")).await;
    bulk(&db.pool, &t.exchange, "k", 2000).await;
    // One claim leases every row and only 4 go out at a time, so most are unsent at the stop.
    let relay = start(&db.pool, RelaySettings { window: 4, batch: 2000, ..cfg() });
    count_until("relay", &db.pool, "SELECT least(count(*), 5) FROM outbox WHERE status = 'published'", |c| c == 5)
        .await;
    relay.stop().await;

    let published: i64 = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM outbox WHERE status = 'published'"#)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let leased = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM outbox WHERE lease_owner IS NOT NULL"#)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(published < 2000, "the stop came too late to test anything");
    assert_eq!(leased, 0, "every lease was released or cleared by a mark");
    assert_eq!(t.drain().await.len() as i64, published, "each message that reached the queue is marked published");
    t.delete().await;
}

/// Closes, through the management API, every broker connection named `name`; returns how many.
pub(crate) async fn kill_connections(name: &str) -> usize {
    #[derive(serde::Deserialize)]
    struct Conn {
        name: String,
        #[serde(default)]
        client_properties: serde_json::Value,
    }
    let http = reqwest::Client::new();
    let conns: Vec<Conn> = http
        .get("http://127.0.0.1:15672/api/connections")
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut killed = 0;
    for c in conns.iter().filter(|c| c.client_properties["connection_name"] == name) {
        let url = format!("http://127.0.0.1:15672/api/connections/{}", c.name.replace(' ', "%20").replace('>', "%3E"));
        let resp = http.delete(url).basic_auth("guest", Some("guest")).send().await.unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
        killed += 1;
    }
    killed
}

#[tokio::test]
async fn the_relay_reconnects_after_the_broker_drops_its_connection() {
    let db = fresh_db().await;
    let t = topology(Some("k")).await;
    enqueue(&db.pool, NewEvent::new("Before", &t.exchange, "k", b"{}".to_vec())).await;
    let relay = start(&db.pool, cfg());
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 1).await;
    let instance: Uuid =
        sqlx::query_scalar!("SELECT instance FROM heartbeats WHERE role = 'relay'").fetch_one(&db.pool).await.unwrap();
    // The management API lists a new connection a moment after it opens.
    let killed = eventually("the relay's connection listed and closed", Duration::from_secs(10), async || {
        let n = kill_connections(&format!("revenant-relay {instance}")).await;
        if n > 0 { Ok(n) } else { Err(n) }
    })
    .await;
    assert_eq!(killed, 1, "the relay's connection was found and closed");
    for _ in 0..5 {
        enqueue(&db.pool, NewEvent::new("After", &t.exchange, "k", b"{}".to_vec())).await;
    }
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 6).await;
    relay.stop().await;
    assert_eq!(t.drain().await.len(), 6);
    t.delete().await;
}

async fn bulk(pool: &PgPool, exchange: &str, routing_key: &str, n: i64) {
    sqlx::query!(
        "INSERT INTO outbox (event_type, exchange, routing_key, payload)
         SELECT 'Bulk', $1, $2, convert_to(g::text, 'UTF8') FROM generate_series(1, $3::bigint) g",
        exchange,
        routing_key,
        n
    )
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn confirmed_rows_are_marked_in_group_commits_not_one_commit_each() {
    let db = fresh_db().await;
    let t = topology(Some("grouped")).await;
    bulk(&db.pool, &t.exchange, "grouped", 1000).await;
    let relay = start(&db.pool, RelaySettings { window: 64, batch: 200, mark_batch: 128, ..cfg() });
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 1000).await;
    let stats = relay.stop().await;
    let (published, flushes) = (stats.published.load(Relaxed), stats.mark_flushes.load(Relaxed));
    assert_eq!(published, 1000);
    assert!(flushes < 500, "1 000 marks took {flushes} commits: they were not grouped");
    assert_eq!(stats.unflushed_marks.load(Relaxed), 0, "a clean stop leaves no mark unflushed");
    assert_eq!(t.drain().await.len(), 1000, "each event once");
    t.delete().await;
}

#[tokio::test]
async fn the_strict_mode_commits_each_mark_before_the_next_publish() {
    let db = fresh_db().await;
    let t = topology(Some("strict")).await;
    bulk(&db.pool, &t.exchange, "strict", 50).await;
    let relay = start(&db.pool, RelaySettings { window: 1, batch: 10, mark_batch: 1, ..cfg() });
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 50).await;
    let stats = relay.stop().await;
    assert_eq!(stats.published.load(Relaxed), 50);
    assert_eq!(stats.mark_flushes.load(Relaxed), 50, "one commit per mark in the strict mode");
    t.delete().await;
}

#[tokio::test]
async fn unroutable_rows_are_failed_in_groups_with_the_brokers_reason_and_routable_ones_still_publish() {
    let db = fresh_db().await;
    let t = topology(Some("routed")).await;
    bulk(&db.pool, &t.exchange, "routed", 200).await;
    bulk(&db.pool, &t.exchange, "nowhere", 200).await;
    let relay = start(&db.pool, RelaySettings { max_attempts: 1, mark_batch: 64, ..cfg() });
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 200).await;
    count_until(
        "relay",
        &db.pool,
        "SELECT count(*) FROM outbox WHERE status = 'failed' AND last_error LIKE 'returned by the broker: 312%'",
        |c| c == 200,
    )
    .await;
    let stats = relay.stop().await;
    assert_eq!(stats.failed_final.load(Relaxed), 200);
    assert_eq!(t.drain().await.len(), 200);
    t.delete().await;
}

#[tokio::test]
async fn the_heartbeat_reports_the_crash_duplicate_bound() {
    let db = fresh_db().await;
    let relay = start(&db.pool, RelaySettings { window: 16, mark_batch: 32, ..cfg() });
    count_until("relay", &db.pool, "SELECT count(*) FROM heartbeats WHERE role = 'relay'", |c| c == 1).await;
    let detail: serde_json::Value =
        sqlx::query_scalar!("SELECT detail FROM heartbeats WHERE role = 'relay'").fetch_one(&db.pool).await.unwrap();
    assert_eq!(detail["duplicate_bound"], 47, "window 16 + mark_batch 32 - 1: {detail}");
    assert_eq!(detail["mark_batch"], 32);
    relay.stop().await;
}

#[tokio::test]
async fn marks_with_synchronous_commit_off_still_publish_and_mark_every_row() {
    let db = fresh_db().await;
    let t = topology(Some("async")).await;
    bulk(&db.pool, &t.exchange, "async", 300).await;
    let relay = start(&db.pool, RelaySettings { synchronous_commit: false, ..cfg() });
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 300).await;
    let stats = relay.stop().await;
    assert_eq!(stats.published.load(Relaxed), 300);
    assert_eq!(t.drain().await.len(), 300);
    t.delete().await;
}

#[tokio::test]
async fn on_several_channels_the_rows_of_one_routing_key_arrive_in_claim_order() {
    let db = fresh_db().await;
    let t = topology(Some("k0")).await;
    let keys = ["k0", "k1", "k2", "k3"];
    for k in &keys[1..] {
        let opts = QueueBindOptions::default();
        t.ch.queue_bind(t.queue.as_str().into(), t.exchange.as_str().into(), (*k).into(), opts, FieldTable::default())
            .await
            .unwrap();
    }
    let n = 800;
    let mut tx = db.pool.begin().await.unwrap();
    for i in 0..n {
        let key = keys[i % keys.len()];
        store::enqueue(&mut *tx, &NewEvent::new("Seq", &t.exchange, key, i.to_string().into_bytes())).await.unwrap();
    }
    tx.commit().await.unwrap();
    let relay = start(&db.pool, RelaySettings { window: 128, channels: 3, batch: 200, ..cfg() });
    count_until("relay", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == n as i64).await;
    relay.stop().await;

    let msgs = t.drain().await;
    assert_eq!(msgs.len(), n, "every row arrived once");
    let mut last: std::collections::HashMap<String, i64> = Default::default();
    for m in &msgs {
        let seq: i64 = std::str::from_utf8(&m.delivery.data).unwrap().parse().unwrap();
        let key = m.delivery.routing_key.as_str().to_string();
        let prev = last.insert(key.clone(), seq).unwrap_or(-1);
        assert!(seq > prev, "key {key}: {seq} arrived after {prev}");
    }
    t.delete().await;
}
