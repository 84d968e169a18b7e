//! `kill -9` of `revenant relay` reading Revenant's outbox from the commit stream
//! (`REVENANT_RELAY_CAPTURE=logical`, each key by its `order_id` header), with a second relay
//! standing by, while a key is held behind a head the broker refuses: the standby takes the
//! slot, nothing is lost, duplicates stay within the documented bound, every key's events
//! arrive in commit order, and the held key is released in order once its head gets through.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use engine::outbox::logical::slot::{self, Names};
use futures::StreamExt;
use lapin::{
    Connection,
    options::{BasicAckOptions, BasicConsumeOptions, QueueDeleteOptions},
    types::FieldTable,
};

use super::chaos::{BOUND, amqp, declare, kill9, spawn};

const KEYS: i64 = 7;
const EVENTS: i64 = 4_000;

async fn published(pool: &sqlx::PgPool) -> i64 {
    count!(pool, "SELECT count(*) FROM outbox WHERE status = 'published'")
}

/// Events `from..=to` in one transaction, key `order-(g % KEYS)`, for `queue`.
async fn write(pool: &sqlx::PgPool, queue: &str, from: i64, to: i64) {
    sqlx::query!(
        r#"INSERT INTO outbox (event_type, exchange, routing_key, payload, headers)
           SELECT 'order.changed', '', $1,
                  convert_to(json_build_object('k', 'order-' || (g % $4), 'i', g)::text, 'UTF8'),
                  jsonb_build_object('order_id', 'order-' || (g % $4))
             FROM generate_series($2::bigint, $3::bigint) g"#,
        queue,
        from,
        to,
        KEYS
    )
    .execute(pool)
    .await
    .unwrap();
}

/// One event of key `key` to `routing_key` with sequence number `i`.
async fn write_one(pool: &sqlx::PgPool, routing_key: &str, key: &str, i: i64) {
    sqlx::query!(
        r#"INSERT INTO outbox (event_type, exchange, routing_key, payload, headers)
           VALUES ('order.changed', '', $1, convert_to(json_build_object('k', $2::text, 'i', $3::bigint)::text, 'UTF8'),
                   jsonb_build_object('order_id', $2::text))"#,
        routing_key,
        key,
        i
    )
    .execute(pool)
    .await
    .unwrap();
}

/// Every message on `queue` until `expected` distinct ids came, in arrival order:
/// (message id, key, sequence number).
async fn drain(conn: &Connection, queue: &str, expected: usize) -> Vec<(String, String, i64)> {
    let ch = conn.create_channel().await.unwrap();
    let mut consumer = ch
        .basic_consume(queue.into(), "chaos".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let mut out = Vec::new();
    let mut ids = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut late = false;
    loop {
        let wait = if late || ids.len() >= expected {
            late = true;
            Duration::from_millis(500)
        } else {
            deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))
        };
        let Ok(Some(Ok(d))) = tokio::time::timeout(wait, consumer.next()).await else { break };
        let id = d.properties.message_id().as_ref().map(|s| s.to_string()).unwrap_or_default();
        let body: serde_json::Value = serde_json::from_slice(&d.data).unwrap();
        ids.insert(id.clone());
        out.push((id, body["k"].as_str().unwrap().to_string(), body["i"].as_i64().unwrap()));
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    out
}

/// Each key's first copies in increasing sequence; returns the duplicates.
fn check_order(seen: &[(String, String, i64)]) -> usize {
    let mut ids = HashSet::new();
    let mut last: HashMap<&str, i64> = HashMap::new();
    let mut dups = 0;
    for (id, k, i) in seen {
        if !ids.insert(id) {
            dups += 1;
            continue;
        }
        if let Some(prev) = last.insert(k, *i) {
            assert!(*i > prev, "key {k}: event {i} arrived after {prev}");
        }
    }
    dups
}

#[tokio::test]
async fn a_commit_stream_relay_killed_mid_stream_while_a_key_is_held_loses_nothing_and_keeps_each_keys_order() {
    let db = testkit::fresh_db().await;
    let conn = amqp().await;
    let queue = testkit::unique("chaos.stream");
    let nowhere = testkit::unique("chaos.stream.later");
    declare(&conn, &queue).await;
    // The refused head keeps retrying (backoff up to 1 s) until its queue exists.
    let extra = [
        ("REVENANT_RELAY_CAPTURE", "logical"),
        ("REVENANT_RELAY_ORDER_KEY", "header:order_id"),
        ("REVENANT_RELAY_MAX_ATTEMPTS", "1000"),
    ];
    let mut first = spawn("relay", &db.url, &extra);
    let names = Names::for_source(&format!("{}_{}", db.name, engine::sources::NATIVE));
    let pool = db.pool.clone();
    testkit::until("the relay's slot", Duration::from_secs(60), async || {
        slot::status(&pool, &names.slot).await.unwrap().is_some_and(|s| s.confirmed.is_some())
    })
    .await;
    // A key whose first event goes to a queue that does not exist yet: refused, it holds the
    // key's next three events behind it, through the kill, until the queue is declared.
    // (Written once the head's refusal is recorded: events in flight with a refused head that
    // the broker accepts are not called back, docs/OUTBOX.md.)
    write_one(&db.pool, &nowhere, "held", 0).await;
    testkit::until("the head refused", Duration::from_secs(30), async || {
        count!(&pool, "SELECT count(*) FROM outbox WHERE attempts > 0 AND stream_lsn IS NOT NULL") == 1
    })
    .await;
    for i in 1..=3 {
        write_one(&db.pool, &queue, "held", i).await;
    }
    let writer = {
        let (pool, queue) = (db.pool.clone(), queue.clone());
        tokio::spawn(async move {
            for from in (1..=EVENTS).step_by(10) {
                write(&pool, &queue, from, from + 9).await;
            }
        })
    };
    testkit::until("some events published", Duration::from_secs(60), async || published(&pool).await >= EVENTS / 8)
        .await;
    let mut standby = spawn("relay", &db.url, &extra);
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill9(&mut first);
    let at_kill = published(&db.pool).await;
    writer.await.unwrap();
    assert!(at_kill < EVENTS, "the relay finished before it was killed; the test proves nothing");
    testkit::eventually("the standby published every other key", Duration::from_secs(120), async || {
        let rows = sqlx::query!(
            r#"SELECT status, stream_lsn IS NOT NULL AS "held!", count(*) AS "n!" FROM outbox GROUP BY 1, 2 ORDER BY 1, 2"#
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let n = rows.iter().filter(|r| r.status == "published").map(|r| r.n).sum::<i64>();
        if n == EVENTS {
            Ok(())
        } else {
            Err(rows.iter().map(|r| format!("{} held={} {}", r.status, r.held, r.n)).collect::<Vec<_>>())
        }
    })
    .await;
    let held = count!(&db.pool, "SELECT count(*) FROM outbox WHERE stream_lsn IS NOT NULL AND status = 'pending'");
    assert_eq!(held, 4, "the refused head and the three behind it are held");

    // The head's queue exists now: its next retry gets through, and its key follows in order.
    declare(&conn, &nowhere).await;
    testkit::until("the held key released", Duration::from_secs(60), async || published(&pool).await == EVENTS + 4)
        .await;
    standby.kill().ok();
    standby.wait().ok();
    let seen = drain(&conn, &queue, EVENTS as usize + 3).await;
    let ids: HashSet<&str> = seen.iter().map(|s| s.0.as_str()).collect();
    let expected = count!(&db.pool, "SELECT count(*) FROM outbox WHERE routing_key = $1", &queue);
    assert_eq!(ids.len() as i64, expected, "every event on the queue, none lost");
    let duplicates = check_order(&seen);
    let held_order: Vec<i64> = seen.iter().filter(|s| s.1 == "held").map(|s| s.2).collect();
    assert_eq!(&held_order[..3], [1, 2, 3], "the held key's events in commit order");
    println!(
        "commit-stream relay crash run: events={EVENTS} published_at_kill={at_kill} lost=0 duplicates={duplicates} bound={BOUND}"
    );
    assert!(duplicates <= BOUND, "{duplicates} duplicates exceed the bound of {BOUND}");
    let ch = conn.create_channel().await.unwrap();
    for q in [&queue, &nowhere] {
        ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default()).await.ok();
    }
}
