//! The kit's own promises, against the real PostgreSQL and RabbitMQ: what a failing test made
//! is gone after it, and a wait that never comes true fails saying what it saw.

use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use sqlx::{Connection, PgConnection};

#[test]
fn a_failing_tests_database_and_queues_are_gone_after_it() {
    let (made_tx, made_rx) = std::sync::mpsc::channel();
    let failed = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let db = testkit::fresh_db().await;
            let names = testkit::Doomed::new();
            let queue = names.queue("revenant-test.kit");
            let conn = engine::amqp::connect(&testkit::amqp_url(), "revenant-test-kit").await.unwrap();
            let ch = conn.create_channel().await.unwrap();
            ch.queue_declare(queue.as_str().into(), QueueDeclareOptions::default(), Default::default()).await.unwrap();
            made_tx.send((db.name.clone(), queue)).unwrap();
            panic!("the test fails here, holding its database and queue");
        })
    })
    .join();
    assert!(failed.is_err(), "the test panicked");
    let (db, queue) = made_rx.recv().unwrap();

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut admin = PgConnection::connect(&testkit::admin_url()).await.unwrap();
        let left: bool =
            sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS "e!""#, &db)
                .fetch_one(&mut admin)
                .await
                .unwrap();
        assert!(!left, "database {db} was dropped while the test unwound");
        let conn = engine::amqp::connect(&testkit::amqp_url(), "revenant-test-kit").await.unwrap();
        let ch = conn.create_channel().await.unwrap();
        let passive = QueueDeclareOptions { passive: true, ..Default::default() };
        let found = ch.queue_declare(queue.as_str().into(), passive, Default::default()).await;
        assert!(found.is_err(), "queue {queue} was deleted while the test unwound");
    });
}

#[tokio::test]
async fn eventually_answers_with_the_first_ok() {
    let mut tries = 0;
    let got = testkit::eventually("the third try", Duration::from_secs(5), async || {
        tries += 1;
        if tries == 3 { Ok(tries * 10) } else { Err(tries) }
    })
    .await;
    assert_eq!(got, 30);
}

#[tokio::test]
#[should_panic(expected = "a count that stays at 3: not within 200ms; last seen: 3")]
async fn eventually_fails_naming_what_it_last_saw() {
    testkit::eventually("a count that stays at 3", Duration::from_millis(200), async || Err::<(), _>(3)).await;
}
