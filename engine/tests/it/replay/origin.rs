//! The default target: the queue each message died in, through the default exchange, so the
//! sibling queues bound to the same routing key (whose consumers already processed the
//! message) get no copy. For DLX dead letters (`x-death`) and for application-republished
//! ones that name their origin in failure headers alike.

use engine::replay::{CreatePlan, Selection, Target, plan, preview::preview};
use lapin::{
    BasicProperties, ExchangeKind,
    options::{BasicPublishOptions, QueueBindOptions},
    types::{AMQPValue, FieldTable},
};

use super::{Env, Ingest, Publisher, alice, wait_for_new, wait_plan};
use testkit::amqp_url;

#[tokio::test]
async fn the_default_replay_reaches_only_the_origin_queue_not_its_siblings() {
    let mut env = Env::new().await;
    let x = env.exchange(ExchangeKind::Direct).await;
    let sibling = env.queue(FieldTable::default()).await;
    for q in [env.work.clone(), sibling.clone()] {
        env.ch
            .queue_bind(
                q.as_str().into(),
                x.as_str().into(),
                "order.created".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
    let before: i64 = sqlx::query_scalar!(r#"SELECT coalesce(max(id), 0) AS "id!" FROM dead_letters"#)
        .fetch_one(env.pool())
        .await
        .unwrap();
    for i in 0..3 {
        let props = BasicProperties::default().with_message_id(format!("o-{i}").into());
        env.ch
            .basic_publish(x.as_str().into(), "order.created".into(), BasicPublishOptions::default(), b"{}", props)
            .await
            .unwrap()
            .await
            .unwrap();
    }
    // The sibling's consumer processed its copies; the work queue's consumer rejected them.
    assert_eq!(env.drain(&sibling).await.len(), 3);
    for _ in 0..3 {
        env.reject_one(&env.work).await;
    }
    // And one a Spring-style recoverer republished straight to the DLQ: no x-death, its
    // origin in failure headers.
    let mut h = FieldTable::default();
    h.insert("x-original-exchange".into(), AMQPValue::LongString(x.as_str().into()));
    h.insert("x-original-routingKey".into(), AMQPValue::LongString("order.created".into()));
    h.insert("x-original-queue".into(), AMQPValue::LongString(env.work.as_str().into()));
    h.insert("x-exception-message".into(), AMQPValue::LongString("Listener threw exception".into()));
    env.publish(&env.dlq, b"{}", BasicProperties::default().with_message_id("spring-1".into()).with_headers(h)).await;
    let ing = Ingest::start(env.pool(), vec![env.dlq.clone()]);
    let ids = wait_for_new(env.pool(), before, 4).await;
    ing.stop().await;
    // By message id: RabbitMQ dead-letters the rejected copies asynchronously, so the
    // Spring-style one, published straight to the DLQ, may arrive before them.
    let conventions: Vec<Option<String>> =
        sqlx::query_scalar!("SELECT convention FROM dead_letters WHERE id = ANY($1) ORDER BY message_id", &ids)
            .fetch_all(env.pool())
            .await
            .unwrap();
    assert_eq!(conventions, [None, None, None, Some("spring".to_string())]);

    let sel = Selection::Ids(ids.clone());
    let p = preview(env.pool(), &amqp_url(), &sel, &Target::Origin).await.unwrap();
    assert_eq!((p.count, p.without_destination), (4, 0));
    assert_eq!(p.origin_queues, [env.work.clone()]);
    assert_eq!(p.targets.len(), 1);
    assert_eq!((p.targets[0].exchange.as_str(), p.targets[0].queue.as_deref()), ("", Some(env.work.as_str())));

    let created = plan::create(env.pool(), &alice(), None, &CreatePlan::new(sel, Target::Origin)).await.unwrap();
    assert_eq!(created.target_mode, "origin");
    let publisher = Publisher::start(env.pool());
    let done = wait_plan(env.pool(), created.id, "done", |p| p.status == "done").await;
    publisher.stop().await;
    assert_eq!((done.sent, done.failed), (4, 0));
    let mut got = env.drain_ids(&env.work).await;
    got.sort();
    assert_eq!(got, ["o-0", "o-1", "o-2", "spring-1"]);
    assert!(env.drain(&sibling).await.is_empty(), "no sibling got a copy");
    env.delete().await;
}

#[tokio::test]
async fn a_message_naming_no_origin_queue_is_refused_for_the_origin_target_with_the_reason() {
    let env = Env::new().await;
    let before: i64 = sqlx::query_scalar!(r#"SELECT coalesce(max(id), 0) AS "id!" FROM dead_letters"#)
        .fetch_one(env.pool())
        .await
        .unwrap();
    env.publish(&env.dlq, b"plain", BasicProperties::default()).await;
    let ing = Ingest::start(env.pool(), vec![env.dlq.clone()]);
    let ids = wait_for_new(env.pool(), before, 1).await;
    ing.stop().await;
    let sel = Selection::Ids(ids);
    let p = preview(env.pool(), &amqp_url(), &sel, &Target::Origin).await.unwrap();
    assert_eq!((p.count, p.without_destination), (1, 1));
    let err = plan::create(env.pool(), &alice(), None, &CreatePlan::new(sel, Target::Origin)).await.unwrap_err();
    assert!(err.to_string().contains("queue they died in"), "{err}");
    env.delete().await;
}
