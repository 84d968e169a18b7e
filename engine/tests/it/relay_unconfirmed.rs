//! A confirm that does not come in time is unknown, not a failure: the relay records no
//! attempt, the row keeps its lease and is sent again when the lease ends. Provoked for real
//! with a pass-through that holds back the broker's answers.

use std::{
    sync::{Arc, atomic::Ordering::Relaxed},
    time::Duration,
};

use engine::outbox::relay::{self, RelayStats};
use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use testkit::{amqp_url, fresh_db, unique};
use tokio_util::sync::CancellationToken;

use crate::pass_through::{pass_through, url_through};

#[tokio::test]
async fn a_missed_confirm_is_no_attempt_and_the_row_is_sent_again_when_its_lease_ends() {
    let db = fresh_db().await;
    let conn = engine::amqp::connect(&amqp_url(), "revenant-test").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let queue = unique("relay.unconfirmed");
    let opts = QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare(queue.as_str().into(), opts, Default::default()).await.unwrap();

    let (port, frozen) = pass_through().await;
    let cfg = engine::settings::RelaySettings {
        lease: Duration::from_secs(3),
        confirm_timeout: Duration::from_millis(600),
        ..crate::relay::cfg()
    };
    let (stats, stop) = (Arc::new(RelayStats::default()), CancellationToken::new());
    let handle = tokio::spawn(relay::run(db.pool.clone(), url_through(port), cfg, stats.clone(), stop.clone()));
    testkit::until("the relay connects through the pass-through", Duration::from_secs(10), async || {
        stats.connected.load(Relaxed)
    })
    .await;

    // The broker's answers are held while 100 events are written and published.
    frozen.store(true, Relaxed);
    let n: i64 = 100;
    let ids: Vec<String> = sqlx::query_scalar!(
        r#"INSERT INTO outbox (event_type, exchange, routing_key, payload)
           SELECT 'unconfirmed', '', $1, convert_to('{"n":' || g || '}', 'UTF8') FROM generate_series(1, $2::bigint) g
           RETURNING event_id::text AS "id!""#,
        queue,
        n
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let failed_during = stats.failed_attempts.load(Relaxed);
    let unconfirmed_during = stats.unconfirmed.load(Relaxed);
    frozen.store(false, Relaxed);

    testkit::eventually("every event published once the broker answered again", Duration::from_secs(30), async || {
        let published = count!(&db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'");
        if published == n { Ok(()) } else { Err(published) }
    })
    .await;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), handle).await.unwrap().unwrap().unwrap();
    let retried: i64 = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM outbox WHERE attempts <> 1"#)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let mut got: Vec<String> = Vec::new();
    while let Some(m) = ch.basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true }).await.unwrap() {
        got.push(m.delivery.properties.message_id().as_ref().map(|s| s.to_string()).unwrap_or_default());
    }
    let mut distinct = got.clone();
    distinct.sort();
    distinct.dedup();
    let unconfirmed = stats.unconfirmed.load(Relaxed);
    println!(
        "relay unconfirmed: events={n} unconfirmed_during={unconfirmed_during} unconfirmed={unconfirmed} delivered={} distinct={}",
        got.len(),
        distinct.len()
    );
    assert!(unconfirmed_during > 0, "no publish went unconfirmed while the answers were held: the test proves nothing");
    assert_eq!(failed_during, 0, "a missed confirm was counted as a failed attempt");
    assert_eq!(retried, 0, "an event's attempts were counted for missed confirms");
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(distinct, expected, "an event was lost");
    assert!(
        got.len() as u64 - n as u64 <= unconfirmed,
        "{} duplicates, {unconfirmed} unconfirmed",
        got.len() as i64 - n
    );
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await.ok();
}
