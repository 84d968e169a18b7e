//! The commit-stream relay (`capture = "logical"`) against the real PostgreSQL (wal_level =
//! logical) and RabbitMQ: each key's events in commit order under concurrent writers, none
//! lost; a refused head holds its key only until it is retried; a relay killed mid-stream
//! loses nothing; a standby takes the slot over; the slot moves, also on an idle database.

use std::{
    collections::{HashMap, HashSet},
    sync::atomic::Ordering::Relaxed,
    time::Duration,
};

use engine::{
    auth::{Principal, Role},
    outbox::logical::slot::{self, Names},
    settings::{Capture, OrderKey, RelaySettings},
    sources::{
        Source,
        actions::{self, Actor},
        mapping::Cols,
    },
};
use lapin::{
    Channel, Connection, ExchangeKind,
    options::{BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions},
    types::FieldTable,
};
use rand::Rng;
use serde_json::json;
use sqlx::PgPool;
use testkit::{Doomed, amqp_url, count_until, eventually, fresh_db};
use types::RowAction;

use super::relay::start;

fn cfg(order: OrderKey) -> RelaySettings {
    RelaySettings { window: 64, batch: 100, capture: Capture::Logical { order, delete: false }, ..super::relay::cfg() }
}

pub(super) struct Broker {
    /// The exchange and queue: deleted when the broker fixture goes, a failing test's too.
    _names: Doomed,
    conn: Connection,
    ch: Channel,
    pub(super) exchange: String,
    queue: String,
}

pub(super) async fn broker(keys: &[&str]) -> Broker {
    let conn = engine::amqp::connect(&amqp_url(), "revenant-test").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let names = Doomed::new();
    let (exchange, queue) = (names.exchange("test.stream.x"), names.queue("test.stream.q"));
    let opts = ExchangeDeclareOptions::default();
    ch.exchange_declare(exchange.as_str().into(), ExchangeKind::Direct, opts, FieldTable::default()).await.unwrap();
    ch.queue_declare(queue.as_str().into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    let b = Broker { _names: names, conn, ch, exchange, queue };
    for k in keys {
        b.bind(k).await;
    }
    b
}

impl Broker {
    pub(super) async fn bind(&self, key: &str) {
        let (q, x) = (self.queue.as_str().into(), self.exchange.as_str().into());
        self.ch.queue_bind(q, x, key.into(), QueueBindOptions::default(), FieldTable::default()).await.unwrap();
    }

    /// The bodies now in the queue, in queue order, as JSON.
    pub(super) async fn drain(&self) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        while let Some(m) =
            self.ch.basic_get(self.queue.as_str().into(), BasicGetOptions { no_ack: true }).await.unwrap()
        {
            out.push(serde_json::from_slice(&m.delivery.data).unwrap());
        }
        out
    }

    /// Closes the connection; the exchange and queue go with the names.
    pub(super) async fn delete(self) {
        let _ = self.conn.close(200, "test done".into()).await;
    }
}

/// One service transaction: `events` events of `key`, numbered by a per-key counter taken
/// inside the transaction (so their numbers are the key's commit order), with ids drawn from
/// the sequence *before* the counter's row lock, so ids often disagree with commit order.
async fn write(pool: &PgPool, exchange: &str, routing_key: &str, key: &str, events: usize, pause_ms: u64) -> Vec<i64> {
    let mut tx = pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..events {
        ids.push(sqlx::query_scalar!(r#"SELECT nextval('outbox_id_seq') AS "id!""#).fetch_one(&mut *tx).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    // Runtime-checked: the test's own table.
    let n: i32 = sqlx::query_scalar(
        "INSERT INTO public.key_counter (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = key_counter.n + 1 RETURNING n",
    )
    .bind(key)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    for (part, id) in ids.iter().enumerate() {
        let body = json!({ "k": key, "n": n, "part": part, "id": id });
        sqlx::query!(
            "INSERT INTO outbox (id, event_type, exchange, routing_key, payload, headers) VALUES ($1, 'order.changed', $2, $3, $4, $5)",
            id,
            exchange,
            routing_key,
            body.to_string().into_bytes(),
            json!({ "order_id": key })
        )
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    ids
}

/// 600 service transactions of 1 or 2 events each, over `keys` keys: each event's id and key.
async fn write_many(pool: PgPool, exchange: String, keys: usize) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for i in 0..600 {
        let key = format!("order-{}", i % keys);
        for id in write(&pool, &exchange, "orders", &key, 1 + i % 2, 0).await {
            out.push((id, key.clone()));
        }
    }
    out
}

pub(super) async fn counter_table(pool: &PgPool) {
    // Runtime-checked: the test's own table.
    sqlx::raw_sql("CREATE TABLE public.key_counter (k text PRIMARY KEY, n int NOT NULL)").execute(pool).await.unwrap();
}

/// Each key's events as the consumer saw them: in commit order (by the key's counter, then
/// the part within the transaction), none missing. Returns (messages, duplicates).
pub(super) fn check_order(seen: &[serde_json::Value], written: &HashMap<i64, (String, i64)>) -> (usize, usize) {
    let mut last: HashMap<String, (i64, i64)> = HashMap::new();
    let mut ids = HashSet::new();
    let mut dups = 0;
    for m in seen {
        let (k, n, part, id) = (
            m["k"].as_str().unwrap(),
            m["n"].as_i64().unwrap(),
            m["part"].as_i64().unwrap(),
            m["id"].as_i64().unwrap(),
        );
        if !ids.insert(id) {
            dups += 1;
            continue;
        }
        let at = (n, part);
        if let Some(prev) = last.get(k) {
            assert!(at > *prev, "key {k}: event {at:?} (id {id}) arrived after {prev:?}");
        }
        last.insert(k.to_string(), at);
    }
    let missing: Vec<_> = written.keys().filter(|id| !ids.contains(id)).collect();
    assert!(missing.is_empty(), "{} events never arrived: {:?}", missing.len(), &missing[..missing.len().min(10)]);
    (seen.len(), dups)
}

/// How often a key's next message has a lower id than the one before it: the test did what it
/// meant to when some events of one key committed in the other order than their ids.
pub(super) fn inversions(seen: &[serde_json::Value]) -> usize {
    let mut last_id: HashMap<&str, i64> = HashMap::new();
    let mut inversions = 0;
    for m in seen {
        let (k, id) = (m["k"].as_str().unwrap_or(""), m["id"].as_i64().unwrap_or(0));
        inversions += last_id.insert(k, id).is_some_and(|prev| prev > id) as usize;
    }
    inversions
}

#[tokio::test]
async fn each_key_arrives_in_commit_order_under_concurrent_writers_and_none_is_lost() {
    let db = fresh_db().await;
    counter_table(&db.pool).await;
    let b = broker(&["orders"]).await;
    let relay = start(&db.pool, cfg(OrderKey::Header("order_id".into())));
    // Rows written before the slot exists go out in id order (docs/OUTBOX.md): start after it.
    slot_made(&db).await;

    let mut writers = Vec::new();
    for w in 0..8 {
        let (pool, exchange) = (db.pool.clone(), b.exchange.clone());
        writers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..40 {
                let (key, events, pause) = {
                    let mut r = rand::rng();
                    (format!("order-{}", r.random_range(0..12)), r.random_range(1..=2), r.random_range(0..4))
                };
                for id in write(&pool, &exchange, "orders", &key, events, pause).await {
                    out.push((id, key.clone(), (w * 1000 + i) as i64));
                }
            }
            out
        }));
    }
    let mut written = HashMap::new();
    for w in writers {
        for (id, key, t) in w.await.unwrap() {
            written.insert(id, (key, t));
        }
    }
    let total = written.len() as i64;
    count_until("all published", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == total)
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = b.drain().await;
    let (_, dups) = check_order(&seen, &written);
    assert_eq!(dups, 0, "a clean run sends each event once");
    // The test did what it meant to: some events of one key committed in the other order
    // than their ids.
    assert!(inversions(&seen) > 0, "no key had events whose ids disagree with their commit order");
    // The slot moved past everything: nothing held back.
    let names = Names::for_source(&format!("{}_{}", db.name, engine::sources::NATIVE));
    let st = slot::status(&db.pool, &names.slot).await.unwrap().expect("the relay made its slot");
    let now: i64 = sqlx::query_scalar!(r#"SELECT (pg_current_wal_lsn() - '0/0')::bigint AS "x!""#)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(st.confirmed.unwrap() > 0 && st.confirmed.unwrap() <= now);
    let held: i64 = count!(&db.pool, "SELECT count(*) FROM outbox WHERE stream_lsn IS NOT NULL");
    let s = &relay.stats;
    let (unconfirmed, refused) = (s.unconfirmed.load(Relaxed), s.failed_attempts.load(Relaxed));
    eprintln!("held {held}, unconfirmed {unconfirmed}, refused {refused}");
    assert!(held == 0 || unconfirmed + refused > 0, "{held} events held, though none was refused or unconfirmed");
    relay.stop().await;
    b.delete().await;
}

async fn slot_made(db: &testkit::TestDb) -> slot::SlotStatus {
    let names = Names::for_source(&format!("{}_{}", db.name, engine::sources::NATIVE));
    eventually("the relay's slot, with a position", Duration::from_secs(10), async || {
        // A slot being made is listed before it has a position.
        match slot::status(&db.pool, &names.slot).await.unwrap() {
            Some(s) if s.confirmed.is_some() => Ok(s),
            seen => Err(seen),
        }
    })
    .await
}

fn native_source(pool: &PgPool) -> Source {
    Source {
        name: engine::sources::NATIVE.into(),
        pool: pool.clone(),
        cols: Cols::native(),
        stuck_after: Duration::from_secs(600),
        stuck_attempts: 3,
        relay: true,
        poll: Duration::from_millis(250),
        capture: Capture::Logical { order: OrderKey::RoutingKey, delete: false },
        database_url: None,
    }
}

#[tokio::test]
async fn a_refused_head_holds_its_key_only_and_its_retry_releases_the_key_in_order() {
    let db = fresh_db().await;
    counter_table(&db.pool).await;
    let b = broker(&["ok"]).await;
    let relay = start(&db.pool, RelaySettings { max_attempts: 2, ..cfg(OrderKey::RoutingKey) });
    let mut written = HashMap::new();
    for (i, rk) in ["nowhere", "ok", "nowhere", "ok", "nowhere", "ok"].iter().enumerate() {
        for id in write(&db.pool, &b.exchange, rk, rk, 1, 0).await {
            written.insert(id, (rk.to_string(), i as i64));
        }
    }
    count_until("ok published", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 3).await;
    count_until("the head failed", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'failed'", |c| c == 1).await;
    let rows = sqlx::query!(
        r#"SELECT id, status, attempts, stream_lsn IS NOT NULL AS "held!", last_error FROM outbox WHERE routing_key = 'nowhere' ORDER BY id"#
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.iter().map(|r| r.status.as_str()).collect::<Vec<_>>(), ["failed", "pending", "pending"]);
    assert!(rows.iter().all(|r| r.held), "all three keep their commit position");
    assert_eq!(rows[0].attempts, 2, "the head used its attempts");
    assert!(rows[0].last_error.as_deref().unwrap_or("").contains("NO_ROUTE"), "{:?}", rows[0].last_error);
    let seen = b.drain().await;
    assert_eq!(
        seen.iter().map(|m| m["k"].as_str().unwrap()).collect::<Vec<_>>(),
        ["ok", "ok", "ok"],
        "other keys went on"
    );

    // The relay dies (its task dropped, its sessions closed) while the key is held; the next
    // one keeps holding it, also for an event written after.
    relay.handle.abort();
    let _ = relay.handle.await;
    let relay = start(&db.pool, RelaySettings { max_attempts: 2, ..cfg(OrderKey::RoutingKey) });
    let late = write(&db.pool, &b.exchange, "nowhere", "nowhere", 1, 0).await[0];
    count_until(
        "the late event held",
        &db.pool,
        "SELECT count(*) FROM outbox WHERE stream_lsn IS NOT NULL AND id = (SELECT max(id) FROM outbox)",
        |c| c == 1,
    )
    .await;
    let late_row =
        sqlx::query!(r#"SELECT status, attempts FROM outbox WHERE id = $1"#, late).fetch_one(&db.pool).await.unwrap();
    assert_eq!((late_row.status.as_str(), late_row.attempts), ("pending", 0), "held, not tried");
    let mut order: Vec<i64> = rows.iter().map(|r| r.id).collect();
    order.push(late);

    // The route exists now; an operator retries the head, through the console's action.
    b.bind("nowhere").await;
    let p = Principal { username: "olga".into(), role: Role::Operator };
    let actor = Actor { principal: &p, ip: None };
    let head = rows[0].id.to_string();
    let n =
        actions::act_on_ids(&db.pool, &native_source(&db.pool), RowAction::Retry, &[head], None, &actor).await.unwrap();
    assert_eq!(n, 1);
    count_until("all published", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 7).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = b.drain().await;
    let ids: Vec<i64> = seen.iter().map(|m| m["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, order, "the held key's events, in commit order, once");
    relay.stop().await;
    b.delete().await;
}

#[tokio::test]
async fn a_relay_killed_mid_stream_loses_nothing_and_a_standby_takes_the_slot_over() {
    let db = fresh_db().await;
    counter_table(&db.pool).await;
    let b = broker(&["orders"]).await;
    let c = cfg(OrderKey::Header("order_id".into()));
    let first = start(&db.pool, c.clone());
    let standby = start(&db.pool, c.clone());
    slot_made(&db).await;
    let writer = tokio::spawn(write_many(db.pool.clone(), b.exchange.clone(), 7));
    // Whichever took the slot is killed mid-stream: its task dropped with confirms in flight and
    // marks unwritten, its database sessions (and the slot's lock) closed.
    count_until("some published", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c >= 100)
        .await;
    let (victim, survivor) = if first.stats.active.load(Relaxed) { (first, standby) } else { (standby, first) };
    victim.handle.abort();
    let _ = victim.handle.await;
    let written: HashMap<i64, (String, i64)> = writer.await.unwrap().into_iter().map(|(id, k)| (id, (k, 0))).collect();
    let total = written.len() as i64;
    count_until(
        "the standby published the rest",
        &db.pool,
        "SELECT count(*) FROM outbox WHERE status = 'published'",
        |c| c == total,
    )
    .await;
    assert!(survivor.stats.active.load(Relaxed), "the standby holds the slot");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = b.drain().await;
    let (_, dups) = check_order(&seen, &written);
    let bound = engine::outbox::marks::duplicate_bound(&c);
    assert!(dups <= bound, "{dups} duplicates, bound {bound}");
    survivor.stop().await;
    b.delete().await;
}

#[tokio::test]
async fn after_publish_delete_empties_the_table_and_a_kill_neither_loses_nor_resends_past_the_bound() {
    let db = fresh_db().await;
    counter_table(&db.pool).await;
    let b = broker(&["orders"]).await;
    let c = RelaySettings {
        capture: Capture::Logical { order: OrderKey::Header("order_id".into()), delete: true },
        ..cfg(OrderKey::RoutingKey)
    };
    let first = start(&db.pool, c.clone());
    let standby = start(&db.pool, c.clone());
    slot_made(&db).await;
    // One unroutable event: refused, it stays in the table (failed, then held), not deleted.
    let lost = write(&db.pool, &b.exchange, "nowhere", "order-lost", 1, 0).await;
    let writer = tokio::spawn(write_many(db.pool.clone(), b.exchange.clone(), 5));
    // Rows leave the table as they are published; whichever relay streams is killed midway.
    count_until(
        "some deleted",
        &db.pool,
        "SELECT (SELECT last_value FROM outbox_id_seq) - (SELECT count(*) FROM outbox)",
        |c| c >= 100,
    )
    .await;
    let (victim, survivor) = if first.stats.active.load(Relaxed) { (first, standby) } else { (standby, first) };
    victim.handle.abort();
    let _ = victim.handle.await;
    let written: HashMap<i64, (String, i64)> = writer.await.unwrap().into_iter().map(|(id, k)| (id, (k, 0))).collect();
    count_until("every routable row published and deleted", &db.pool, "SELECT count(*) FROM outbox", |c| c == 1).await;
    let left: i64 = sqlx::query_scalar!(r#"SELECT id AS "id!" FROM outbox"#).fetch_one(&db.pool).await.unwrap();
    assert_eq!(left, lost[0], "only the refused event is left");
    assert!(survivor.stats.active.load(Relaxed), "the standby holds the slot");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = b.drain().await;
    let (_, dups) = check_order(&seen, &written);
    let bound = engine::outbox::marks::duplicate_bound(&c);
    assert!(dups <= bound, "{dups} duplicates, bound {bound}");
    survivor.stop().await;
    b.delete().await;
}

#[tokio::test]
async fn an_idle_database_still_moves_the_slot() {
    let db = fresh_db().await;
    let b = broker(&["orders"]).await;
    let relay = start(&db.pool, cfg(OrderKey::RoutingKey));
    let names = Names::for_source(&format!("{}_{}", db.name, engine::sources::NATIVE));
    let before = slot_made(&db).await.confirmed.expect("a logical slot has a position");
    // Between its reads the relay's session is the slot's reader: not "nobody reads it", and
    // an admin cannot drop it from under the relay.
    let listed = engine::outbox::logical::slots::list(&db.pool).await.unwrap();
    let ours = listed.iter().find(|s| s.name == names.slot).expect("the slot is listed");
    assert!(ours.active_pid.is_some(), "the relay reads its slot: {ours:?}");
    // Write-ahead log from elsewhere in the cluster, none of it the outbox's.
    // Runtime-checked: a table of the test's own.
    sqlx::raw_sql("CREATE TABLE public.other (x int); INSERT INTO public.other SELECT generate_series(1, 1000)")
        .execute(&db.pool)
        .await
        .unwrap();
    eventually(&format!("the heartbeat moves the slot past {before}"), Duration::from_secs(30), async || {
        let after = slot::status(&db.pool, &names.slot).await.unwrap().and_then(|s| s.confirmed).unwrap_or(0);
        if after > before { Ok(()) } else { Err(after) }
    })
    .await;
    relay.stop().await;
    b.delete().await;
}

#[tokio::test]
async fn rows_written_before_the_slot_go_out_in_id_order_per_key() {
    let db = fresh_db().await;
    counter_table(&db.pool).await;
    let b = broker(&["orders"]).await;
    // Written while the outbox was polled (or before the relay first ran): not in the stream.
    let mut ids = Vec::new();
    for _ in 0..400 {
        ids.extend(write(&db.pool, &b.exchange, "orders", "one-hot-key", 1, 0).await);
    }
    let relay = start(&db.pool, cfg(OrderKey::RoutingKey));
    count_until("all published", &db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'", |c| c == 400)
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen: Vec<i64> = b.drain().await.iter().map(|m| m["id"].as_i64().unwrap()).collect();
    assert_eq!(seen, ids, "one key's backlog, in id order, once");
    relay.stop().await;
    b.delete().await;
}

/// Retry and archive on Revenant's schema installed in a service's database act on that
/// database's rows, one by one and as a frozen selection, and are audited in Revenant's.
#[tokio::test]
async fn console_actions_on_a_service_databases_outbox_change_its_rows_and_are_audited_in_revenants() {
    use engine::{
        outbox::{
            install::install,
            store::{self, NewEvent},
        },
        settings::MappedOutbox,
        sources::{self, query::Filter},
    };
    let own = fresh_db().await;
    let svc = testkit::blank_db().await;
    install(&svc.pool).await.unwrap();
    // The same id (1) failed in both databases: only the service's may change.
    for pool in [&own.pool, &svc.pool] {
        let ev = NewEvent::new("order.placed", "", "orders", b"{}".to_vec());
        let sql = "UPDATE revenant.outbox SET status = 'failed', attempts = 3 WHERE id = 1";
        store::enqueue(pool, &ev).await.unwrap_or_else(|_| panic!("enqueue"));
        // Runtime-checked: the schema-qualified table, the same statement on both databases.
        sqlx::query(sql).execute(pool).await.unwrap();
    }
    let m = MappedOutbox {
        name: "billing".into(),
        database_url: Some(svc.url.clone()),
        native: true,
        relay: true,
        capture: Some("logical".into()),
        ..MappedOutbox::default()
    };
    let src = sources::open(&m, &own.pool).await.unwrap();
    let p = Principal { username: "olga".into(), role: Role::Operator };
    let actor = Actor { principal: &p, ip: None };
    let n = actions::act_on_ids(&own.pool, &src, RowAction::Retry, &["1".into()], None, &actor).await.unwrap();
    assert_eq!(n, 1);
    let status = |pool: &PgPool| {
        let pool = pool.clone();
        async move { sqlx::query_scalar!("SELECT status FROM revenant.outbox WHERE id = 1").fetch_one(&pool).await.unwrap() }
    };
    assert_eq!((status(&svc.pool).await, status(&own.pool).await), ("pending".to_string(), "failed".to_string()));
    // Held for the commit-stream relay, which never saw it fail.
    let held: Option<i64> =
        sqlx::query_scalar!("SELECT stream_lsn FROM revenant.outbox WHERE id = 1").fetch_one(&svc.pool).await.unwrap();
    assert_eq!(held, Some(0));
    // A frozen selection: archive everything pending in the service's outbox.
    let frozen =
        actions::freeze(&own.pool, &src, &Filter::default(), RowAction::Archive, Some("retired"), &p).await.unwrap();
    let n = actions::execute(&own.pool, std::slice::from_ref(&src), frozen.selection_id, &actor).await.unwrap();
    assert_eq!(n, 1);
    assert_eq!((status(&svc.pool).await, status(&own.pool).await), ("archived".to_string(), "failed".to_string()));
    let audited: i64 = count!(&own.pool, "SELECT count(*) FROM audit_log WHERE target = 'outbox source billing'");
    assert_eq!(audited, 2, "both actions audited in Revenant's database");
}
