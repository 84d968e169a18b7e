//! The watched set, live: queues started and stopped while an ingester runs, with no restart;
//! stopping drops nothing; the config seeds the set once and a stopped queue stays stopped.

use std::time::Duration;

use engine::dead_letter::watch::{self, Origin};
use lapin::BasicProperties;
use testkit::{fresh_db, until};

use crate::ingest::{Topology, count, start_ingest};

#[tokio::test]
async fn a_queue_added_while_running_is_ingested_and_a_removed_one_keeps_its_messages() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    let admin = engine::audit::cli_principal();
    // Running with nothing to watch.
    let running = start_ingest(&db.pool, vec![]);
    for i in 0..20 {
        t.publish(&t.dlq, format!("m{i}").as_bytes(), BasicProperties::default()).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(count(&db.pool, &t.dlq).await, 0, "not watched yet: nothing is taken");

    let done = watch::set(&db.pool, &admin, None, std::slice::from_ref(&t.dlq), true, Origin::Cli).await.unwrap();
    assert_eq!(done.changed, vec![t.dlq.clone()]);
    let took = until("the added queue's messages stored", Duration::from_secs(30), async || {
        count(&db.pool, &t.dlq).await == 20
    })
    .await;
    assert!(took <= Duration::from_secs(10), "picked up within the refresh, took {took:?}");
    until("the heartbeat names the consumed queue", Duration::from_secs(15), async || {
        watch::ingesting(&db.pool).await.unwrap().contains(&t.dlq)
    })
    .await;

    // Stop: the consumer closes, later messages stay in RabbitMQ, none is stored or lost.
    let again = watch::set(&db.pool, &admin, None, std::slice::from_ref(&t.dlq), false, Origin::Console).await.unwrap();
    assert_eq!(again.changed, vec![t.dlq.clone()]);
    until("the consumer closed", Duration::from_secs(15), async || running.stats.consuming_queues().is_empty()).await;
    for i in 20..30 {
        t.publish(&t.dlq, format!("m{i}").as_bytes(), BasicProperties::default()).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(count(&db.pool, &t.dlq).await, 20, "a stopped queue is not ingested");
    assert_eq!(t.ready(&t.dlq).await, 10, "its messages wait in RabbitMQ");

    // The config seed does not restart a queue an admin stopped; `set` does.
    assert_eq!(watch::seed(&db.pool, std::slice::from_ref(&t.dlq), Origin::Config).await.unwrap(), 0);
    let listed = watch::list(&db.pool).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(!listed[0].watching && listed[0].origin == watch::Origin::Console);
    watch::set(&db.pool, &admin, None, std::slice::from_ref(&t.dlq), true, Origin::Cli).await.unwrap();
    until("the rest stored after restarting it", Duration::from_secs(30), async || count(&db.pool, &t.dlq).await == 30)
        .await;

    let audit: Vec<(String, i64)> =
        sqlx::query!("SELECT action, item_count FROM audit_log WHERE action LIKE 'dlq.%' ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.action, r.item_count))
            .collect();
    assert_eq!(
        audit,
        vec![("dlq.watch".into(), 1), ("dlq.unwatch".into(), 1), ("dlq.watch".into(), 1)],
        "every start and stop is audited"
    );
    running.stop().await;
    t.delete().await;
}

#[tokio::test]
async fn bad_queue_names_are_refused_and_change_nothing() {
    let db = fresh_db().await;
    let admin = engine::audit::cli_principal();
    for bad in ["", "a\nb", &"q".repeat(256)] {
        let err = watch::set(&db.pool, &admin, None, &[bad.to_string()], true, Origin::Cli).await.unwrap_err();
        assert!(err.to_string().contains("not a queue name"), "{err}");
    }
    assert!(watch::list(&db.pool).await.unwrap().is_empty());
    // Starting a watched queue again changes nothing, and says so.
    let q = vec!["orders.dlq".to_string()];
    assert_eq!(watch::seed(&db.pool, &q, Origin::Config).await.unwrap(), 1);
    let done = watch::set(&db.pool, &admin, None, &q, true, Origin::Cli).await.unwrap();
    assert_eq!((done.changed.len(), done.unchanged), (0, q.clone()));
}
