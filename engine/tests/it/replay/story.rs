//! A replayed message that dies again: lineage, the timeline, and the auto-pause brake.

use engine::replay::{
    CreatePlan, Selection, Target,
    lineage::{self, Event},
    plan,
    preview::preview,
};
use lapin::types::AMQPValue;
use testkit::amqp_url;

use super::{Env, Ingest, Publisher, alice, dead_lettering_into, simple, wait_for_new, wait_plan};

#[tokio::test]
async fn a_replayed_message_that_dies_again_links_to_the_earlier_dead_letter_in_its_story() {
    let env = Env::new().await;
    let ids = env.dead_letters(1, simple).await;
    let first = ids[0];
    let p = plan::create(env.pool(), &alice(), None, &CreatePlan::new(Selection::Ids(ids), Target::Original))
        .await
        .unwrap();
    let publisher = Publisher::start(env.pool());
    wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    publisher.stop().await;

    // The consumer rejects the replay too.
    env.reject_one(&env.work).await;
    let ing = Ingest::start(env.pool(), vec![env.dlq.clone()]);
    let again = wait_for_new(env.pool(), first, 1).await[0];
    ing.stop().await;
    let replay_of = sqlx::query_scalar!("SELECT replay_of FROM dead_letters WHERE id = $1", again)
        .fetch_one(env.pool())
        .await
        .unwrap();
    assert_eq!(replay_of, Some(first));

    let story = lineage::story(env.pool(), first).await.unwrap();
    let kinds: Vec<(i64, &str)> = story
        .iter()
        .map(|e| {
            let k = match &e.event {
                Event::DeadLettered { .. } => "dead_lettered",
                Event::ReplayPlanned { .. } => "planned",
                Event::Replayed { .. } => "replayed",
                Event::ReplayFailed { .. } => "failed",
                Event::ReplayCancelled { .. } => "cancelled",
            };
            (e.dead_letter_id, k)
        })
        .collect();
    assert_eq!(kinds, [(first, "dead_lettered"), (first, "planned"), (first, "replayed"), (again, "dead_lettered")]);
    assert!(matches!(&story[2].event, Event::Replayed { by, plan_id, .. } if by == "alice" && *plan_id == p.id));
    assert!(matches!(&story[3].event, Event::DeadLettered { replay_of: Some(r), .. } if *r == first));
    assert_eq!(lineage::story(env.pool(), again).await.unwrap(), story, "the same story from either end");
    assert!(lineage::story(env.pool(), again + 1000).await.is_err());

    // The operator is told this one was replayed before.
    let pv = preview(env.pool(), &amqp_url(), &Selection::Ids(vec![again]), &Target::Original).await.unwrap();
    assert_eq!((pv.count, pv.already_replayed), (1, 1));
    env.delete().await;
}

#[tokio::test]
async fn a_plan_pauses_itself_when_most_replayed_messages_die_again() {
    let mut env = Env::new().await;
    let ids = env.dead_letters(30, simple).await;
    // Everything sent here expires at once and is dead-lettered back into the DLQ.
    let mut args = dead_lettering_into(&env.dlx.clone());
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(0));
    let deadly = env.queue(args).await;
    let mut req = CreatePlan::new(Selection::Ids(ids.clone()), Target::Queue { queue: deadly });
    req.rate_per_sec = Some(10.0);
    req.auto_pause_share = Some(0.5);
    req.auto_pause_window_secs = 60;
    let p = plan::create(env.pool(), &alice(), None, &req).await.unwrap();

    let ing = Ingest::start(env.pool(), vec![env.dlq.clone()]);
    let publisher = Publisher::start(env.pool());
    let paused = wait_plan(env.pool(), p.id, "paused", |p| p.status == "paused").await;
    let stats = publisher.stop().await.snapshot();
    ing.stop().await;
    assert!(paused.paused_reason.as_deref().is_some_and(|r| r.starts_with("auto-paused")), "{paused:?}");
    assert!(paused.sent < 30, "{paused:?}");
    assert_eq!(stats.auto_paused, 1);
    let actor = sqlx::query_scalar!("SELECT actor FROM audit_log WHERE action = 'replay.pause'")
        .fetch_one(env.pool())
        .await
        .unwrap();
    assert_eq!(actor, "system:replay");
    env.delete().await;
}
