//! Per-key ordered replay: order kept within each routing key or header value, keys in
//! parallel, and a failed key's later messages held back while the other keys go on.

use engine::replay::{CreatePlan, Order, Selection, Target, items, plan, progress};
use lapin::{
    BasicProperties, ExchangeKind,
    options::{BasicPublishOptions, QueueBindOptions},
    types::{AMQPValue, FieldTable},
};

use super::{Env, Ingest, Publisher, alice, wait_for_new, wait_plan};

/// Publishes one message per key through `exchange` to the work queue, rejects each, ingests
/// them: dead letters whose original routing key is the key. Their ids, in order.
async fn dead_letters_by_key(env: &Env, exchange: &str, keys: &[&str]) -> Vec<i64> {
    let before: i64 = sqlx::query_scalar!(r#"SELECT coalesce(max(id), 0) AS "id!" FROM dead_letters"#)
        .fetch_one(env.pool())
        .await
        .unwrap();
    for (i, key) in keys.iter().enumerate() {
        let mut headers = FieldTable::default();
        headers.insert("order-id".into(), AMQPValue::LongString(format!("order-{key}").into()));
        let props = BasicProperties::default()
            .with_message_id(format!("m-{i}").into())
            .with_delivery_mode(2)
            .with_headers(headers);
        let opts = BasicPublishOptions::default();
        env.ch.basic_publish(exchange.into(), (*key).into(), opts, b"{}", props).await.unwrap().await.unwrap();
    }
    for _ in keys {
        env.reject_one(&env.work).await;
    }
    let ing = Ingest::start(env.pool(), vec![env.dlq.clone()]);
    let ids = wait_for_new(env.pool(), before, keys.len()).await;
    ing.stop().await;
    ids
}

#[tokio::test]
async fn a_failed_key_holds_back_its_later_messages_while_the_other_keys_go_on_in_order() {
    let mut env = Env::new().await;
    let x = env.exchange(ExchangeKind::Direct).await;
    for key in ["a", "b", "gone"] {
        let opts = QueueBindOptions::default();
        env.ch
            .queue_bind(env.work.as_str().into(), x.as_str().into(), key.into(), opts, FieldTable::default())
            .await
            .unwrap();
    }
    let keys = ["a", "gone", "b", "a", "gone", "b", "a"];
    let ids = dead_letters_by_key(&env, &x, &keys).await;
    // The binding is gone by the time of the replay: `gone` comes back unroutable.
    env.ch
        .queue_unbind(env.work.as_str().into(), x.as_str().into(), "gone".into(), FieldTable::default())
        .await
        .unwrap();

    let mut req = CreatePlan::new(Selection::Ids(ids.clone()), Target::Original);
    req.order = Order::RoutingKey;
    let p = plan::create(env.pool(), &alice(), None, &req).await.unwrap();
    assert_eq!(p.order(), Order::RoutingKey);
    let publisher = Publisher::start(env.pool());
    let done = wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    publisher.stop().await;
    assert_eq!((done.sent, done.failed, done.left()), (5, 2, 0), "{done:?}");

    let failed = progress::items(env.pool(), p.id, Some("failed"), None, 10).await.unwrap();
    assert_eq!(failed.iter().map(|i| i.dead_letter_id).collect::<Vec<_>>(), [ids[1], ids[4]]);
    assert!(failed[0].error.as_deref().is_some_and(|e| e.contains("312 NO_ROUTE")), "{failed:?}");
    let held = failed[1].error.as_deref().unwrap_or_default();
    assert!(held.starts_with("held back") && held.contains(&format!("dead letter {}", ids[1])), "{held}");
    assert_eq!(items::held_keys(env.pool(), p.id).await.unwrap(), [("gone".to_string(), ids[1])]);

    // Each key's messages arrived in their first-failure order.
    let arrived = env.drain_ids(&env.work).await;
    let of = |key: &str| -> Vec<String> {
        let mine: Vec<String> =
            keys.iter().enumerate().filter(|(_, k)| **k == key).map(|(i, _)| format!("m-{i}")).collect();
        arrived.iter().filter(|id| mine.contains(id)).cloned().collect()
    };
    assert_eq!(of("a"), ["m-0", "m-3", "m-6"]);
    assert_eq!(of("b"), ["m-2", "m-5"]);
    assert_eq!(arrived.len(), 5, "{arrived:?}");
    env.delete().await;
}

#[tokio::test]
async fn a_header_order_keys_each_item_by_the_headers_value() {
    let mut env = Env::new().await;
    let x = env.exchange(ExchangeKind::Direct).await;
    let opts = QueueBindOptions::default();
    env.ch
        .queue_bind(env.work.as_str().into(), x.as_str().into(), "k".into(), opts, FieldTable::default())
        .await
        .unwrap();
    let ids = dead_letters_by_key(&env, &x, &["k", "k", "k"]).await;
    let target = Target::Queue { queue: env.work.clone() };
    let mut req = CreatePlan::new(Selection::Ids(ids.clone()), target.clone());
    req.order = Order::Header("order-id".into());
    let p = plan::create(env.pool(), &alice(), None, &req).await.unwrap();
    let keys = sqlx::query_scalar!("SELECT order_key FROM replay_items WHERE plan_id = $1 ORDER BY seq", p.id)
        .fetch_all(env.pool())
        .await
        .unwrap();
    assert_eq!(keys, vec![Some("order-k".to_string()); 3]);
    let publisher = Publisher::start(env.pool());
    let done = wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    publisher.stop().await;
    assert_eq!((done.sent, done.failed), (3, 0));
    assert_eq!(env.drain_ids(&env.work).await, ["m-0", "m-1", "m-2"]);

    // A header name AMQP cannot carry is refused before anything is frozen.
    let mut bad = CreatePlan::new(Selection::Ids(ids), target);
    bad.order = Order::Header(" ".into());
    assert!(plan::create(env.pool(), &alice(), None, &bad).await.is_err());
    env.delete().await;
}
