//! The ingester's group commit against the real RabbitMQ and PostgreSQL: bursts stored in
//! batches, duplicates inside and across batches, a refused delivery in a batch, and no ack
//! before commit. A linger of a minute makes batches form only by filling, so which messages
//! share a batch is fixed by the test, not by timing.

use std::time::Duration;

use engine::{
    dead_letter::{
        ingest::IngestCounts,
        store::{self, GroupFilter},
    },
    settings::IngestSettings,
};
use lapin::{
    BasicProperties,
    types::{AMQPValue, FieldTable},
};
use testkit::fresh_db;

use super::ingest::{Running, Topology, count, start_ingest_with, wait_for_rows};

const NEVER: Duration = Duration::from_secs(60);

fn settings(queue: &str, prefetch: u16, batch: usize) -> IngestSettings {
    IngestSettings { queues: vec![queue.to_string()], auto: false, prefetch, batch, linger: NEVER, commits: 2 }
}

/// Waits (up to 15 s) until the ingester's counters satisfy `done`.
async fn wait_for(ing: &Running, what: &str, done: impl Fn(&IngestCounts) -> bool) {
    testkit::eventually(what, Duration::from_secs(15), async || {
        let counts = ing.stats.snapshot();
        if done(&counts) { Ok(()) } else { Err(counts) }
    })
    .await
}

fn failing(id: &str, error_type: &str) -> BasicProperties {
    let mut h = FieldTable::default();
    h.insert("x-exception-type".into(), AMQPValue::LongString(error_type.into()));
    BasicProperties::default().with_message_id(id.into()).with_headers(h)
}

#[tokio::test]
async fn a_burst_of_a_thousand_is_stored_exactly_once_in_four_batches_and_the_queue_ends_empty() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    for i in 0..1000 {
        t.publish(&t.dlq, format!("{{\"n\":{i}}}").as_bytes(), failing(&format!("burst-{i}"), "Boom")).await;
    }
    let ing = start_ingest_with(&db.pool, settings(&t.dlq, 500, 250));
    wait_for_rows(&db.pool, &t.dlq, 1000).await;
    wait_for(&ing, "all acked", |c| c.stored == 1000).await;
    let stats = ing.stop().await.snapshot();
    assert_eq!((stats.received, stats.stored, stats.duplicates, stats.store_errors), (1000, 1000, 0, 0));
    assert_eq!(stats.batches, 4, "batches of 250 fill; none waited for its linger");
    // Stopping closed the connection, which would have requeued anything left unacked.
    assert_eq!(t.ready(&t.dlq).await, 0);
    let distinct: i64 = count!(&db.pool, "SELECT count(DISTINCT message_id) FROM dead_letters");
    assert_eq!((count(&db.pool, &t.dlq).await, distinct), (1000, 1000));
    // Ids follow the queue's order inside each batch too.
    let ids: Vec<String> = sqlx::query_scalar!(r#"SELECT message_id AS "m!" FROM dead_letters ORDER BY id"#)
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert!(ids.iter().enumerate().all(|(i, m)| *m == format!("burst-{i}")));
    let groups = store::groups(&db.pool, &GroupFilter::default(), 10).await.unwrap();
    assert_eq!(groups.iter().map(|g| g.count).collect::<Vec<_>>(), [1000]);
    let unlinked = count!(&db.pool, "SELECT count(*) FROM dead_letters WHERE group_id IS NULL");
    assert_eq!(unlinked, 0);
    t.delete().await;
}

#[tokio::test]
async fn duplicates_inside_one_batch_and_across_batches_give_one_row_and_exact_group_counts() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    // Byte-identical messages have one natural key: a redelivery, as the store sees it.
    let (a, b, c, d) = (
        (b"a".as_slice(), failing("a", "Timeout")),
        (b"b".as_slice(), failing("b", "Timeout")),
        (b"c".as_slice(), failing("c", "KeyError")),
        (b"d".as_slice(), failing("d", "KeyError")),
    );
    for (body, props) in [&a, &a, &b, &c] {
        t.publish(&t.dlq, body, props.clone()).await;
    }
    let ing = start_ingest_with(&db.pool, settings(&t.dlq, 4, 4));
    wait_for(&ing, "first batch", |s| s.batches == 1 && s.stored + s.duplicates == 4).await;
    assert_eq!((ing.stats.snapshot().stored, ing.stats.snapshot().duplicates), (3, 1));
    for (body, props) in [&a, &b, &d, &d] {
        t.publish(&t.dlq, body, props.clone()).await;
    }
    wait_for(&ing, "second batch", |s| s.batches == 2 && s.stored + s.duplicates == 8).await;
    let stats = ing.stop().await.snapshot();
    assert_eq!((stats.received, stats.stored, stats.duplicates, stats.store_errors), (8, 4, 4, 0));
    assert_eq!(count(&db.pool, &t.dlq).await, 4);
    assert_eq!(t.ready(&t.dlq).await, 0, "duplicates are acked too");
    let mut groups: Vec<(Option<String>, i64, i64)> = store::groups(&db.pool, &GroupFilter::default(), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|g| (g.error_type, g.count, g.awaiting))
        .collect();
    groups.sort();
    assert_eq!(groups, [(Some("KeyError".into()), 2, 2), (Some("Timeout".into()), 2, 2)]);
    t.delete().await;
}

#[tokio::test]
async fn a_batch_holding_a_delivery_the_store_refuses_still_stores_and_acks_the_others() {
    let db = fresh_db().await;
    // A real refusal from PostgreSQL (a check violation) for one message id only.
    sqlx::query!("ALTER TABLE dead_letters ADD CONSTRAINT refuses_poison CHECK (message_id <> 'poison')")
        .execute(&db.pool)
        .await
        .unwrap();
    let t = Topology::new(&[]).await;
    // Two batches of five: the poison in the first; the second is committed while the poison
    // waits for its nack, so acking it with `multiple` would settle (and lose) the poison.
    for i in 0..10 {
        let id = if i == 2 { "poison".to_string() } else { format!("ok-{i}") };
        t.publish(&t.dlq, id.as_bytes(), BasicProperties::default().with_message_id(id.as_str().into())).await;
    }
    let ing = start_ingest_with(&db.pool, settings(&t.dlq, 10, 5));
    // The nacked poison comes back (requeued) and waits in a batch that will not fill.
    wait_for(&ing, "the poison redelivered", |s| s.stored == 9 && s.received == 11).await;
    let stats = ing.stop().await.snapshot();
    assert_eq!((stats.stored, stats.duplicates, stats.store_errors, stats.batches), (9, 0, 1, 2));
    assert_eq!(count(&db.pool, &t.dlq).await, 9);
    assert_eq!(t.ready(&t.dlq).await, 1, "the nine are acked; the refused one is still in the queue");

    // Once the store accepts it, it is stored like any other.
    sqlx::query!("ALTER TABLE dead_letters DROP CONSTRAINT refuses_poison").execute(&db.pool).await.unwrap();
    let ing =
        start_ingest_with(&db.pool, IngestSettings { linger: Duration::from_millis(5), ..settings(&t.dlq, 10, 5) });
    wait_for_rows(&db.pool, &t.dlq, 10).await;
    ing.stop().await;
    assert_eq!(t.ready(&t.dlq).await, 0);
    t.delete().await;
}

#[tokio::test]
async fn a_batch_still_gathering_is_neither_stored_nor_acked() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    for i in 0..3 {
        t.publish(&t.dlq, b"x", BasicProperties::default().with_message_id(format!("wait-{i}").into())).await;
    }
    let ing = start_ingest_with(&db.pool, settings(&t.dlq, 10, 10));
    wait_for(&ing, "received", |s| s.received == 3).await;
    let stats = ing.stop().await.snapshot();
    assert_eq!((stats.stored, stats.batches), (0, 0));
    assert_eq!(count(&db.pool, &t.dlq).await, 0);
    assert_eq!(t.ready(&t.dlq).await, 3, "closing the connection requeued the unacked batch");
    t.delete().await;
}

#[tokio::test]
async fn a_batch_larger_than_the_prefetch_is_cut_to_the_prefetch() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    for i in 0..6 {
        t.publish(&t.dlq, b"x", BasicProperties::default().with_message_id(format!("cut-{i}").into())).await;
    }
    // Unclamped, a batch of 250 could never fill with 3 unacked at most, and would wait its minute.
    let ing = start_ingest_with(&db.pool, settings(&t.dlq, 3, 250));
    wait_for(&ing, "stored", |s| s.stored == 6).await;
    let stats = ing.stop().await.snapshot();
    assert_eq!(stats.batches, 2);
    assert_eq!(t.ready(&t.dlq).await, 0);
    t.delete().await;
}
