//! Group-committed marks: every item marked once, nothing lost on a crash and no more than
//! the window plus `mark_batch` sent twice, and every confirmed mark flushed on a pause.

use std::{collections::HashSet, time::Duration};

use engine::replay::{CreatePlan, Plan, Selection, Target, marks::duplicate_bound, plan, progress};
use lapin::types::FieldTable;
use sqlx::PgPool;

use super::{Env, Publisher, alice, fast, statuses, wait_plan};

/// A plan of `ids` to `queue`, no rate limit unless `rate` is given.
async fn plan_to(env: &Env, ids: &[i64], queue: &str, rate: Option<f32>) -> Plan {
    let mut req = CreatePlan::new(Selection::Ids(ids.to_vec()), Target::Queue { queue: queue.to_string() });
    req.confirm_count = Some(ids.len() as i64);
    req.rate_per_sec = rate;
    plan::create(env.pool(), &alice(), None, &req).await.unwrap()
}

/// `(pending, sent, failed, cancelled)` items of the plan, counted from the items themselves.
async fn item_counts(pool: &PgPool, plan_id: i64) -> (i64, i64, i64, i64) {
    let r = sqlx::query!(
        r#"SELECT count(*) FILTER (WHERE status = 'pending') AS "pending!", count(*) FILTER (WHERE status = 'sent') AS "sent!",
                  count(*) FILTER (WHERE status = 'failed') AS "failed!", count(*) FILTER (WHERE status = 'cancelled') AS "cancelled!"
           FROM replay_items WHERE plan_id = $1"#,
        plan_id
    )
    .fetch_one(pool)
    .await
    .unwrap();
    (r.pending, r.sent, r.failed, r.cancelled)
}

/// Waits until no publisher holds the plan's lease (its sender has stopped and released it).
async fn wait_released(pool: &PgPool, plan_id: i64) {
    testkit::eventually(&format!("plan {plan_id} releases its lease"), Duration::from_secs(60), async || {
        let owner = sqlx::query_scalar!("SELECT lease_owner FROM replay_plans WHERE id = $1", plan_id)
            .fetch_one(pool)
            .await
            .unwrap();
        match owner {
            None => Ok(()),
            Some(held_by) => Err(held_by),
        }
    })
    .await
}

fn expected_ids(n: usize) -> HashSet<String> {
    (1..=n).map(|i| format!("m-{i}")).collect()
}

#[tokio::test]
async fn a_plan_of_two_thousand_items_is_sent_and_marked_once_each_and_every_message_arrives_once() {
    let mut env = Env::new().await;
    let target = env.queue(FieldTable::default()).await;
    let ids = env.stored_dead_letters(2_000).await;
    let p = plan_to(&env, &ids, &target, None).await;
    let publisher = Publisher::start(env.pool());
    let done = wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    let stats = publisher.stop().await.snapshot();

    assert_eq!((done.sent, done.failed, done.cancelled, done.left()), (2_000, 0, 0, 0));
    assert_eq!(item_counts(env.pool(), p.id).await, (0, 2_000, 0, 0));
    assert_eq!(stats.sent, 2_000, "each item counted once, when its group committed");
    assert_eq!(statuses(env.pool(), &ids).await, vec!["replayed"; 2_000]);
    let got = env.drain_ids(&target).await;
    assert_eq!(got.len(), 2_000, "no message lost and none sent twice");
    assert_eq!(got.into_iter().collect::<HashSet<_>>(), expected_ids(2_000));
    env.delete().await;
}

#[tokio::test]
async fn a_crash_mid_plan_loses_nothing_and_resends_at_most_the_window_plus_the_unflushed_marks() {
    let mut env = Env::new().await;
    let target = env.queue(FieldTable::default()).await;
    let ids = env.stored_dead_letters(3_000).await;
    // A small window and long-lingering groups, so the crash leaves marks unflushed.
    let cfg = engine::replay::publisher::PublisherConfig {
        window: 16,
        mark_batch: 64,
        mark_flush: Duration::from_millis(100),
        ..fast()
    };
    let bound = duplicate_bound(cfg.window, &cfg);
    let p = plan_to(&env, &ids, &target, None).await;

    let crashed = Publisher::start_with(env.pool(), cfg.clone());
    wait_plan(env.pool(), p.id, "started", |p| p.sent >= 200).await;
    crashed.handle.abort();
    let _ = crashed.handle.await;
    let mid = progress::get(env.pool(), p.id).await.unwrap();
    assert!(mid.status == "running" && mid.sent < 3_000, "the crash must land mid-plan: {mid:?}");

    // A new instance takes the plan over once the dead one's lease expires.
    let restarted = Publisher::start_with(env.pool(), cfg);
    let done = wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    restarted.stop().await;
    assert_eq!((done.sent, done.failed, done.left()), (3_000, 0, 0));
    assert_eq!(item_counts(env.pool(), p.id).await, (0, 3_000, 0, 0));
    let got = env.drain_ids(&target).await;
    let unique: HashSet<String> = got.iter().cloned().collect();
    assert_eq!(unique, expected_ids(3_000), "nothing lost");
    let twice = got.len() - unique.len();
    assert!(twice <= bound, "{twice} sent twice; the bound is window + mark_batch = {bound}");
    env.delete().await;
}

#[tokio::test]
async fn a_pause_mid_plan_flushes_every_confirmed_mark_so_the_counts_agree_with_what_arrived() {
    let mut env = Env::new().await;
    let target = env.queue(FieldTable::default()).await;
    let ids = env.stored_dead_letters(1_000).await;
    // Groups that linger long enough to hold many marks when the pause lands.
    let cfg = engine::replay::publisher::PublisherConfig { mark_flush: Duration::from_millis(500), ..fast() };
    let p = plan_to(&env, &ids, &target, Some(250.0)).await;
    let publisher = Publisher::start_with(env.pool(), cfg);
    wait_plan(env.pool(), p.id, "started", |p| p.sent >= 50).await;

    plan::pause(env.pool(), &alice(), None, p.id, Some("checking")).await.unwrap();
    wait_released(env.pool(), p.id).await;
    let paused = progress::get(env.pool(), p.id).await.unwrap();
    let (pending, sent, _, _) = item_counts(env.pool(), p.id).await;
    assert_eq!(paused.status, "paused");
    assert!(paused.sent < 1_000, "the pause must land mid-plan: {paused:?}");
    let arrived: HashSet<String> = env.drain_ids(&target).await.into_iter().collect();
    assert_eq!((paused.sent, sent, pending), (arrived.len() as i64, arrived.len() as i64, 1_000 - sent));
    let marked: HashSet<String> = sqlx::query_scalar!(
        r#"SELECT d.message_id AS "m!" FROM replay_items i JOIN dead_letters d ON d.id = i.dead_letter_id
           WHERE i.plan_id = $1 AND i.status = 'sent'"#,
        p.id
    )
    .fetch_all(env.pool())
    .await
    .unwrap()
    .into_iter()
    .collect();
    assert_eq!(marked, arrived, "exactly what arrived is marked sent");

    // Resumed, the plan sends only the rest: nothing that arrived before the pause again.
    plan::resume(env.pool(), &alice(), None, p.id).await.unwrap();
    let done = wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    publisher.stop().await;
    assert_eq!((done.sent, done.failed), (1_000, 0));
    let rest = env.drain_ids(&target).await;
    assert_eq!(rest.len() + arrived.len(), 1_000, "no message sent twice across the pause");
    let all: HashSet<String> = rest.into_iter().chain(arrived).collect();
    assert_eq!(all, expected_ids(1_000));
    env.delete().await;
}
