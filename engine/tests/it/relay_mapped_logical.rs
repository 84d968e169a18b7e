//! A service's own outbox table relayed from the commit stream (`capture = "logical"` on a
//! mapped source) against the real PostgreSQL (wal_level = logical) and RabbitMQ: each key's
//! events in commit order under concurrent writers, rows written before the slot first, none
//! lost; a refused head holds its key only, in `revenant.relay_state` beside the table, until
//! the console's retry releases it in order; a relay killed while a key is held loses nothing.

use std::{collections::HashMap, sync::Arc, time::Duration};

use engine::{
    auth::{Principal, Role},
    outbox::{
        logical::slot::{self, Names},
        relay::{self, RelayStats, Relayed},
    },
    settings::{MappedOutbox, RelaySettings},
    sources::{
        self, Source,
        actions::{self, Actor},
    },
};
use rand::Rng;
use serde_json::json;
use sqlx::PgPool;
use testkit::{TestDb, amqp_url, blank_db, count_until, eventually, fresh_db};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use types::RowAction;

use super::relay_logical::{broker, check_order, counter_table, inversions};

/// The service's table: its own names, a jsonb body and headers, a publication timestamp.
async fn service_table(pool: &PgPool) {
    counter_table(pool).await;
    // Runtime-checked: the test's own table.
    sqlx::raw_sql(
        "CREATE TABLE public.eventos (id bigserial PRIMARY KEY, evento_id uuid NOT NULL DEFAULT gen_random_uuid(),
            tipo text NOT NULL, chave text NOT NULL, corpo jsonb NOT NULL, cabecalhos jsonb,
            criado_em timestamptz NOT NULL DEFAULT now(), publicado_em timestamptz);
         CREATE INDEX eventos_pendentes ON public.eventos (id) WHERE publicado_em IS NULL;",
    )
    .execute(pool)
    .await
    .unwrap();
}

fn mapping(url: &str, exchange: &str, order_key: &str) -> MappedOutbox {
    MappedOutbox {
        name: "pedidos".into(),
        database_url: Some(url.into()),
        relay: true,
        table: "eventos".into(),
        id_column: "id".into(),
        event_id_column: "evento_id".into(),
        type_column: "tipo".into(),
        routing_key_column: "chave".into(),
        exchange: Some(exchange.into()),
        headers_column: Some("cabecalhos".into()),
        payload_column: "corpo".into(),
        created_at_column: "criado_em".into(),
        published_at_column: Some("publicado_em".into()),
        poll_ms: 50,
        capture: Some("logical".into()),
        order_key: Some(order_key.into()),
        ..MappedOutbox::default()
    }
}

/// One service transaction: `events` events of `key` (routing key `rk`), numbered by a
/// per-key counter taken inside the transaction, with ids drawn *before* the counter's row
/// lock, so ids often disagree with commit order.
async fn write(pool: &PgPool, rk: &str, key: &str, events: usize, pause_ms: u64) -> Vec<i64> {
    let mut tx = pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..events {
        // Runtime-checked: the test's own table.
        ids.push(sqlx::query_scalar("SELECT nextval('public.eventos_id_seq')").fetch_one(&mut *tx).await.unwrap());
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
        // Runtime-checked: the test's own table.
        sqlx::query(
            "INSERT INTO public.eventos (id, tipo, chave, corpo, cabecalhos) VALUES ($1, 'pedido.mudou', $2, $3, $4)",
        )
        .bind(id)
        .bind(rk)
        .bind(body)
        .bind(json!({ "order_id": key }))
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    ids
}

struct Running {
    stop: CancellationToken,
    handle: JoinHandle<anyhow::Result<()>>,
    stats: Arc<RelayStats>,
}

fn start(own: &PgPool, source: &Source, max_attempts: i32) -> Running {
    let stop = CancellationToken::new();
    let r = Relayed { source: source.clone(), stats: Arc::default() };
    let stats = r.stats.clone();
    let cfg = RelaySettings { window: 64, batch: 100, max_attempts, ..super::relay::cfg() };
    let fut = relay::run_all(own.clone(), amqp_url(), cfg, Arc::default(), vec![r], stop.clone());
    Running { stop, handle: tokio::spawn(fut), stats }
}

impl Running {
    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle).await.expect("stops").expect("no panic").unwrap();
    }
}

async fn published(pool: &PgPool) -> i64 {
    // Runtime-checked: the test's own table.
    sqlx::query_scalar("SELECT count(*) FROM public.eventos WHERE publicado_em IS NOT NULL")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn slot_made(service: &TestDb) {
    let names = Names::for_source(&format!("{}_pedidos", service.name));
    eventually("the relay's slot, with a position", Duration::from_secs(20), async || {
        match slot::status(&service.pool, &names.slot).await.unwrap() {
            Some(s) if s.confirmed.is_some() => Ok(()),
            seen => Err(seen),
        }
    })
    .await
}

#[tokio::test]
async fn a_mapped_tables_keys_arrive_in_commit_order_under_concurrent_writers_backlog_first_and_none_is_lost() {
    let own = fresh_db().await;
    let service = blank_db().await;
    service_table(&service.pool).await;
    let b = broker(&["orders"]).await;
    let source = sources::open(&mapping(&service.url, &b.exchange, "header:order_id"), &own.pool).await.unwrap();
    // Rows written before the relay (and its slot) go out first, in id order per key.
    let mut written = HashMap::new();
    for i in 0..30 {
        let key = format!("order-{}", i % 5);
        for id in write(&service.pool, "orders", &key, 1, 0).await {
            written.insert(id, (key.clone(), 0));
        }
    }
    let relay = start(&own.pool, &source, 10);
    slot_made(&service).await;
    let mut writers = Vec::new();
    for _ in 0..8 {
        let pool = service.pool.clone();
        writers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for _ in 0..40 {
                let (key, events, pause) = {
                    let mut r = rand::rng();
                    (format!("order-{}", r.random_range(0..12)), r.random_range(1..=2), r.random_range(0..4))
                };
                for id in write(&pool, "orders", &key, events, pause).await {
                    out.push((id, key.clone()));
                }
            }
            out
        }));
    }
    for w in writers {
        for (id, key) in w.await.unwrap() {
            written.insert(id, (key, 0));
        }
    }
    let total = written.len() as i64;
    eventually("all published", Duration::from_secs(60), async || match published(&service.pool).await {
        n if n == total => Ok(()),
        n => Err(n),
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = b.drain().await;
    let (_, dups) = check_order(&seen, &written);
    assert_eq!(dups, 0, "a clean run sends each event once");
    assert!(inversions(&seen) > 0, "no key had events whose ids disagree with their commit order");
    // Runtime-checked: the relay's state beside the service's table.
    let waiting: i64 =
        sqlx::query_scalar("SELECT count(*) FROM revenant.relay_state WHERE status IN ('pending', 'failed')")
            .fetch_one(&service.pool)
            .await
            .unwrap();
    assert_eq!(waiting, 0, "nothing is left held");
    let card = engine::outbox::stream_card(&source).await.unwrap();
    assert!(card.status.is_some(), "the card names the slot: {card:?}");
    assert_eq!((card.held_events, card.failed_heads), (0, 0));
    relay.stop().await;
    b.delete().await;
}

#[tokio::test]
async fn a_mapped_tables_refused_head_holds_its_key_only_across_a_killed_relay_until_the_console_retries_it() {
    let own = fresh_db().await;
    let service = blank_db().await;
    service_table(&service.pool).await;
    let b = broker(&["ok"]).await;
    let source = sources::open(&mapping(&service.url, &b.exchange, "routing_key"), &own.pool).await.unwrap();
    let relay = start(&own.pool, &source, 2);
    slot_made(&service).await;
    let mut nowhere = Vec::new();
    for rk in ["nowhere", "ok", "nowhere", "ok", "nowhere", "ok"] {
        let ids = write(&service.pool, rk, rk, 1, 0).await;
        if rk == "nowhere" {
            nowhere.extend(ids);
        }
    }
    count_until("ok published", &service.pool, "SELECT count(*) FROM eventos WHERE publicado_em IS NOT NULL", |c| {
        c == 3
    })
    .await;
    count_until(
        "the head failed",
        &service.pool,
        "SELECT count(*) FROM revenant.relay_state WHERE status = 'failed'",
        |c| c == 1,
    )
    .await;
    // Runtime-checked: the relay's state beside the service's table.
    let state: Vec<(i64, String, i32, bool, Option<String>)> = sqlx::query_as(
        "SELECT row_id, status, attempts, stream_lsn IS NOT NULL, last_error FROM revenant.relay_state ORDER BY row_id",
    )
    .fetch_all(&service.pool)
    .await
    .unwrap();
    assert_eq!(state.iter().map(|s| s.0).collect::<Vec<_>>(), nowhere, "only the refused key's events have state");
    assert_eq!(state.iter().map(|s| s.1.as_str()).collect::<Vec<_>>(), ["failed", "pending", "pending"]);
    assert!(state.iter().all(|s| s.3), "all three keep their commit position");
    assert_eq!((state[0].2, state[1].2, state[2].2), (2, 0, 0), "the head used its attempts; the rest were not tried");
    assert!(state[0].4.as_deref().unwrap_or("").contains("NO_ROUTE"), "{:?}", state[0].4);
    let card = engine::outbox::stream_card(&source).await.unwrap();
    assert_eq!((card.held_events, card.failed_heads), (3, 1), "the card counts the held key");
    let seen = b.drain().await;
    assert_eq!(seen.iter().map(|m| m["k"].as_str().unwrap()).collect::<Vec<_>>(), ["ok", "ok", "ok"]);

    // The relay dies while the key is held; the next one keeps holding it, also for an event
    // written after.
    relay.handle.abort();
    let _ = relay.handle.await;
    let relay = start(&own.pool, &source, 2);
    let late = write(&service.pool, "nowhere", "nowhere", 1, 0).await[0];
    nowhere.push(late);
    count_until(
        "the late event held",
        &service.pool,
        "SELECT count(*) FROM revenant.relay_state WHERE stream_lsn IS NOT NULL AND row_id = (SELECT max(id) FROM eventos)",
        |c| c == 1,
    )
    .await;

    // The route exists now; an operator retries the head through the console's action.
    b.bind("nowhere").await;
    let p = Principal { username: "olga".into(), role: Role::Operator };
    let actor = Actor { principal: &p, ip: None };
    let head = nowhere[0].to_string();
    let n = actions::act_on_ids(&own.pool, &source, RowAction::Retry, &[head], None, &actor).await.unwrap();
    assert_eq!(n, 1);
    count_until("all published", &service.pool, "SELECT count(*) FROM eventos WHERE publicado_em IS NOT NULL", |c| {
        c == 7
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = b.drain().await;
    let ids: Vec<i64> = seen.iter().map(|m| m["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, nowhere, "the held key's events, in commit order, once");
    assert!(
        relay.stats.failed_attempts.load(std::sync::atomic::Ordering::Relaxed) == 0,
        "no attempt failed after the retry"
    );
    relay.stop().await;
    b.delete().await;
}

#[tokio::test]
async fn a_mapped_tables_relay_killed_mid_stream_loses_nothing_and_a_standby_takes_the_slot_over() {
    let own = fresh_db().await;
    let service = blank_db().await;
    service_table(&service.pool).await;
    let b = broker(&["orders"]).await;
    let source = sources::open(&mapping(&service.url, &b.exchange, "header:order_id"), &own.pool).await.unwrap();
    let first = start(&own.pool, &source, 10);
    let standby = start(&own.pool, &source, 10);
    slot_made(&service).await;
    let pool = service.pool.clone();
    let writer = tokio::spawn(async move {
        let mut out = Vec::new();
        for i in 0..600 {
            let key = format!("order-{}", i % 7);
            for id in write(&pool, "orders", &key, 1 + i % 2, 0).await {
                out.push((id, (key.clone(), 0)));
            }
        }
        out
    });
    // Whichever took the slot is killed mid-stream: its task dropped with confirms in flight and
    // marks unwritten, its database sessions (and the slot's lock) closed.
    eventually("some published", Duration::from_secs(60), async || match published(&service.pool).await {
        n if n >= 100 => Ok(()),
        n => Err(n),
    })
    .await;
    let active = |r: &Running| r.stats.active.load(std::sync::atomic::Ordering::Relaxed);
    let (victim, survivor) = if active(&first) { (first, standby) } else { (standby, first) };
    victim.handle.abort();
    let _ = victim.handle.await;
    let written: HashMap<i64, (String, i64)> = writer.await.unwrap().into_iter().collect();
    let total = written.len() as i64;
    eventually("the standby published the rest", Duration::from_secs(60), async || {
        match published(&service.pool).await {
            n if n == total => Ok(()),
            n => Err(n),
        }
    })
    .await;
    assert!(active(&survivor), "the standby holds the slot");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = b.drain().await;
    let (_, dups) = check_order(&seen, &written);
    let cfg = RelaySettings { window: 64, batch: 100, ..super::relay::cfg() };
    let bound = engine::outbox::marks::duplicate_bound(&cfg);
    eprintln!("mapped stream kill: {} events, {dups} duplicates (bound {bound})", written.len());
    assert!(dups <= bound, "{dups} duplicates, bound {bound}");
    survivor.stop().await;
    b.delete().await;
}
