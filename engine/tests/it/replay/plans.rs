//! Planning a replay: preview, the frozen set, atomic creation, and refusals.

use engine::{
    dead_letter::store::{self, ListFilter},
    replay::{CreatePlan, ReplayError, Selection, Target, plan, preview::preview, progress},
};
use lapin::ExchangeKind;
use testkit::amqp_url;

use super::{Env, Publisher, alice, simple, statuses, wait_plan};

#[tokio::test]
async fn a_preview_counts_the_messages_and_checks_each_target_on_the_broker() {
    let mut env = Env::new().await;
    let ids = env.dead_letters(3, simple).await;
    let sel = Selection::Filter(ListFilter { queue: Some(env.dlq.clone()), ..Default::default() });

    let p = preview(env.pool(), &amqp_url(), &sel, &Target::Original).await.unwrap();
    assert_eq!((p.count, p.without_destination, p.already_replayed), (3, 0, 0));
    assert!(!p.needs_typed_confirmation);
    assert_eq!(p.broker_error, None);
    assert_eq!(p.targets.len(), 1);
    let t = &p.targets[0];
    // Published to the work queue through the default exchange: that queue is the target.
    assert_eq!((t.exchange.as_str(), t.routing_key.as_str(), t.count), ("", env.work.as_str(), 3));
    assert_eq!((t.exists, t.queue.as_deref(), t.consumers), (Some(true), Some(env.work.as_str()), Some(0)));

    let missing = Target::Exchange { exchange: testkit::unique("revenant-test.missing"), routing_key: "k".into() };
    let p = preview(env.pool(), &amqp_url(), &Selection::Ids(ids.clone()), &missing).await.unwrap();
    assert_eq!((p.count, p.targets[0].exists, p.targets[0].consumers), (3, Some(false), None));
    let x = env.exchange(ExchangeKind::Direct).await;
    let present = Target::Exchange { exchange: x, routing_key: "k".into() };
    let p = preview(env.pool(), &amqp_url(), &Selection::Ids(ids[..1].to_vec()), &present).await.unwrap();
    assert_eq!((p.count, p.targets[0].exists), (1, Some(true)));
    env.delete().await;
}

#[tokio::test]
async fn a_filter_selects_exactly_what_the_list_shows() {
    let env = Env::new().await;
    env.dead_letters(4, |i| {
        let (_, props) = simple(i);
        (if i % 2 == 0 { b"\x00needle\xff".to_vec() } else { b"hay".to_vec() }, props)
    })
    .await;
    let filters = [
        ListFilter { body_contains: Some(b"needle\xff".to_vec()), ..Default::default() },
        ListFilter { message_id: Some("m-1".into()), reason: Some("rejected".into()), ..Default::default() },
        ListFilter { queue: Some(env.dlq.clone()), older_than: Some(chrono::Utc::now()), ..Default::default() },
    ];
    for f in filters {
        let listed = store::list(env.pool(), &f, None, 100).await.unwrap().items.len() as i64;
        let p = preview(env.pool(), &amqp_url(), &Selection::Filter(f.clone()), &Target::Original).await.unwrap();
        assert_eq!(p.count, listed, "{f:?}");
        assert!(listed > 0);
    }
    env.delete().await;
}

#[tokio::test]
async fn creating_a_plan_writes_its_items_the_status_change_and_one_audit_entry_together() {
    let env = Env::new().await;
    let ids = env.dead_letters(3, simple).await;
    let sel = Selection::Ids(ids.clone());

    // Refused at the confirmation step: nothing of it may remain.
    let mut req = CreatePlan::new(sel.clone(), Target::Original);
    req.confirm_count = Some(2);
    let err = plan::create(env.pool(), &alice(), Some("10.0.0.7"), &req).await.unwrap_err();
    assert!(matches!(err, ReplayError::Conflict(_)), "{err:?}");
    let r = sqlx::query!(
        r#"SELECT (SELECT count(*) FROM replay_plans) AS "plans!", (SELECT count(*) FROM replay_items) AS "items!",
                  (SELECT count(*) FROM audit_log WHERE action = 'replay.create') AS "audited!""#,
    )
    .fetch_one(env.pool())
    .await
    .unwrap();
    let counts = (r.plans, r.items, r.audited);
    assert_eq!(counts, (0, 0, 0));
    assert_eq!(statuses(env.pool(), &ids).await, ["awaiting"; 3]);

    req.confirm_count = Some(3);
    let p = plan::create(env.pool(), &alice(), Some("10.0.0.7"), &req).await.unwrap();
    assert_eq!((p.total, p.status.as_str(), p.created_by.as_str()), (3, "scheduled", "alice"));
    assert_eq!(statuses(env.pool(), &ids).await, ["replaying"; 3]);
    let items = progress::items(env.pool(), p.id, Some("pending"), None, 10).await.unwrap();
    assert_eq!(items.iter().map(|i| i.dead_letter_id).collect::<Vec<_>>(), ids);
    assert!(items.iter().all(|i| i.exchange.is_empty() && i.routing_key == env.work));
    let audit: Vec<(String, i64, Option<String>, Option<String>)> =
        sqlx::query!("SELECT actor, item_count, source_ip, target FROM audit_log WHERE action = 'replay.create'")
            .fetch_all(env.pool())
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.actor, r.item_count, r.source_ip, r.target))
            .collect();
    assert_eq!(audit, [("alice".to_string(), 3, Some("10.0.0.7".to_string()), Some(format!("replay_plan:{}", p.id)))]);

    // The same messages cannot be in a second plan while the first holds them.
    let again = plan::create(env.pool(), &alice(), None, &CreatePlan::new(sel, Target::Original)).await.unwrap_err();
    assert!(matches!(again, ReplayError::Invalid(_)), "{again:?}");
    env.delete().await;
}

#[tokio::test]
async fn a_plan_above_one_hundred_messages_needs_the_count_typed() {
    let env = Env::new().await;
    env.dead_letters(101, simple).await;
    let sel = Selection::Filter(ListFilter { queue: Some(env.dlq.clone()), ..Default::default() });
    let p = preview(env.pool(), &amqp_url(), &sel, &Target::Original).await.unwrap();
    assert!(p.needs_typed_confirmation);
    let mut req = CreatePlan::new(sel, Target::Original);
    let err = plan::create(env.pool(), &alice(), None, &req).await.unwrap_err();
    assert!(matches!(&err, ReplayError::Invalid(m) if m.contains("101")), "{err:?}");
    req.confirm_count = Some(101);
    assert_eq!(plan::create(env.pool(), &alice(), None, &req).await.unwrap().total, 101);
    env.delete().await;
}

#[tokio::test]
async fn a_plans_set_is_frozen_when_it_is_created() {
    let env = Env::new().await;
    let ids = env.dead_letters(3, simple).await;
    let sel = Selection::Filter(ListFilter { queue: Some(env.dlq.clone()), ..Default::default() });
    let p = plan::create(env.pool(), &alice(), None, &CreatePlan::new(sel, Target::Original)).await.unwrap();
    // One more dead letter matching the same filter arrives after creation.
    let late = env.dead_letters(1, |_| simple(99)).await;
    assert_eq!(late.len(), 1);

    let publisher = Publisher::start(env.pool());
    let done = wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    publisher.stop().await;
    assert_eq!((done.total, done.sent, done.failed), (3, 3, 0));
    assert_eq!(statuses(env.pool(), &ids).await, ["replayed"; 3]);
    assert_eq!(statuses(env.pool(), &late).await, ["awaiting"]);
    let got: Vec<String> =
        env.drain(&env.work).await.iter().map(|d| d.properties.message_id().clone().unwrap().to_string()).collect();
    assert_eq!(got, ["m-0", "m-1", "m-2"]);
    env.delete().await;
}

#[tokio::test]
async fn an_unroutable_target_fails_items_with_no_route_and_the_dead_letters_await_again() {
    let mut env = Env::new().await;
    let ids = env.dead_letters(2, simple).await;
    let nowhere = env.exchange(ExchangeKind::Direct).await;
    let target = Target::Exchange { exchange: nowhere, routing_key: "no-binding".into() };
    let p =
        plan::create(env.pool(), &alice(), None, &CreatePlan::new(Selection::Ids(ids.clone()), target)).await.unwrap();
    // And a missing exchange, which must not take the first plan's channel down with it.
    let more = env.dead_letters(1, |_| simple(7)).await;
    let missing = Target::Exchange { exchange: testkit::unique("revenant-test.missing"), routing_key: "k".into() };
    let q = plan::create(env.pool(), &alice(), None, &CreatePlan::new(Selection::Ids(more.clone()), missing))
        .await
        .unwrap();

    let publisher = Publisher::start(env.pool());
    let done = wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    let done_q = wait_plan(env.pool(), q.id, "done", |p| p.status == "done").await;
    let stats = publisher.stop().await.snapshot();
    assert_eq!((done.sent, done.failed, done_q.failed), (0, 2, 1));
    assert_eq!((stats.returned, stats.failed, stats.sent), (2, 3, 0));
    let items = progress::items(env.pool(), p.id, Some("failed"), None, 10).await.unwrap();
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|i| i.error.as_deref().is_some_and(|e| e.contains("312 NO_ROUTE"))), "{items:?}");
    let items = progress::items(env.pool(), q.id, Some("failed"), None, 10).await.unwrap();
    assert!(items[0].error.as_deref().is_some_and(|e| e.contains("NOT_FOUND")), "{items:?}");
    assert_eq!(statuses(env.pool(), &ids).await, ["awaiting"; 2]);
    assert_eq!(statuses(env.pool(), &more).await, ["awaiting"]);
    env.delete().await;
}

#[tokio::test]
async fn an_ordered_plan_stops_at_its_first_failure_instead_of_sending_the_next_out_of_order() {
    let mut env = Env::new().await;
    let ids = env.dead_letters(5, simple).await;
    let nowhere = env.exchange(ExchangeKind::Direct).await;
    let target = Target::Exchange { exchange: nowhere, routing_key: "no-binding".into() };
    let mut req = CreatePlan::new(Selection::Ids(ids.clone()), target);
    req.order = engine::replay::Order::Plan;
    let p = plan::create(env.pool(), &alice(), None, &req).await.unwrap();
    let publisher = Publisher::start(env.pool());
    let paused = wait_plan(env.pool(), p.id, "paused", |p| p.status == "paused").await;
    publisher.stop().await;
    assert_eq!((paused.sent, paused.failed, paused.left()), (0, 1, 4), "{paused:?}");
    assert!(paused.paused_reason.as_deref().is_some_and(|r| r.contains("ordered")), "{paused:?}");
    let failed = progress::items(env.pool(), p.id, Some("failed"), None, 10).await.unwrap();
    assert_eq!(failed.iter().map(|i| i.dead_letter_id).collect::<Vec<_>>(), [ids[0]], "the first in order failed");
    env.delete().await;
}
