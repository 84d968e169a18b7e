//! What no message may do to the ingester (design invariant 10): a message PostgreSQL keeps
//! refusing is stored raw after `QUARANTINE_AFTER` refusals and its queue moves on, the queue
//! is reported stuck meanwhile, and rows stored before header depth was bounded are repaired
//! so they read back.

use std::time::Duration;

use engine::{
    dead_letter::{ingest::QUARANTINE_AFTER, store},
    settings::IngestSettings,
};
use lapin::BasicProperties;
use testkit::{eventually, fresh_db};

use super::ingest::{Topology, count, start_ingest_with};

#[tokio::test]
async fn a_message_the_store_refuses_again_and_again_is_stored_raw_and_the_queue_moves_on() {
    let db = fresh_db().await;
    // A real refusal from PostgreSQL (a check violation), for one message id only, for good.
    sqlx::query!("ALTER TABLE dead_letters ADD CONSTRAINT refuses_poison CHECK (message_id <> 'poison')")
        .execute(&db.pool)
        .await
        .unwrap();
    let t = Topology::new(&[]).await;
    for id in ["before", "poison", "after"] {
        t.publish(
            &t.dlq,
            format!("{{\"id\":\"{id}\"}}").as_bytes(),
            BasicProperties::default().with_message_id(id.into()),
        )
        .await;
    }
    let cfg = IngestSettings {
        queues: vec![t.dlq.clone()],
        auto: false,
        prefetch: 10,
        batch: 5,
        linger: Duration::from_millis(5),
        commits: 2,
    };
    let ing = start_ingest_with(&db.pool, cfg);
    let mut seen_stuck = false;
    eventually("the poison quarantined", Duration::from_secs(10), async || {
        seen_stuck |= ing.stats.stuck().iter().any(|s| s.queue == t.dlq && s.reason.contains("refuses"));
        let s = ing.stats.snapshot();
        if s.quarantined == 1 { Ok(()) } else { Err(s) }
    })
    .await;
    let stats = ing.stats.snapshot();
    assert!(seen_stuck, "the queue was reported stuck while the poison was retried");
    assert!(stats.store_errors >= u64::from(QUARANTINE_AFTER), "{stats:?}");
    // The stuck mark is cleared by the consumer after the quarantined row's commit, a moment
    // after the count above moves.
    eventually("moving again once the poison is stored", Duration::from_secs(10), async || {
        let stuck = ing.stats.stuck();
        if stuck.is_empty() { Ok(()) } else { Err(stuck) }
    })
    .await;
    ing.stop().await;
    assert_eq!(count(&db.pool, &t.dlq).await, 3);
    assert_eq!(t.ready(&t.dlq).await, 0, "nothing left in the queue");

    let raw = sqlx::query!(
        r#"SELECT id, message_id, unreadable, body FROM dead_letters WHERE queue = $1 AND message_id IS NULL"#,
        &t.dlq
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(raw.body, b"{\"id\":\"poison\"}", "the body is kept as it was");
    let note = raw.unreadable.unwrap_or_default();
    assert!(note.starts_with("stored raw: the store refused it repeatedly"), "{note}");
    assert!(note.contains("refuses_poison"), "{note}");
    // Its properties are kept, as hex inside the marker header, and the row reads back.
    let d = store::get(&db.pool, raw.id).await.unwrap();
    let hexed = d.headers.as_ref().and_then(|h| h["x-unreadable-amqp-field"]["v"]["json"]["hex"].as_str()).unwrap();
    let props: serde_json::Value = serde_json::from_slice(&hex::decode(hexed).unwrap()).unwrap();
    assert_eq!(props["message_id"], "poison");
    t.delete().await;
}

#[tokio::test]
async fn headers_stored_too_deep_to_read_back_are_repaired_and_keep_their_json() {
    let db = fresh_db().await;
    // A row as an ingester before the bound stored it: 150 tables deep, 300 JSON levels.
    let mut deep = String::from(r#"{"t":"longstr","v":"bottom"}"#);
    for _ in 0..150 {
        deep = format!(r#"{{"t":"table","v":{{"a":{deep}}}}}"#);
    }
    let headers = format!(r#"{{"x-deep":{deep}}}"#);
    let id = sqlx::query_scalar!(
        "INSERT INTO dead_letters (queue, natural_key, body, body_size, headers, exchange, routing_key, reason, fingerprint)
         VALUES ('legacy.dlq', 'k-legacy', 'x', 1, $1::text::jsonb, '', 'legacy.dlq', 'rejected', 'fp') RETURNING id",
        &headers
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(store::get(&db.pool, id).await.is_err(), "unreadable before the repair");
    let repaired: i64 =
        sqlx::query_scalar!(r#"SELECT dead_letters_repair_deep_headers() AS "n!""#).fetch_one(&db.pool).await.unwrap();
    assert_eq!(repaired, 1);
    let d = store::get(&db.pool, id).await.expect("reads back");
    assert!(d.unreadable.as_deref().is_some_and(|n| n.contains("nested deeper than the console reads")));
    let kept = d.headers.as_ref().and_then(|h| h["x-unreadable-amqp-field"]["v"]["json"]["v"].as_str()).unwrap();
    assert!(kept.starts_with(r#"{"x-deep": {"t": "table""#), "{}", &kept[..40]);
    let again: i64 =
        sqlx::query_scalar!(r#"SELECT dead_letters_repair_deep_headers() AS "n!""#).fetch_one(&db.pool).await.unwrap();
    assert_eq!(again, 0, "a repaired row is shallow");
}
