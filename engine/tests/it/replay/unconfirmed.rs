//! A confirm that does not come in time means "may have been delivered": the item is
//! unconfirmed (never failed), its dead letter stays out of triage, and it is sent again
//! under the same message id. Provoked for real: the publisher reaches RabbitMQ through a
//! TCP pass-through that, for a while, holds back everything the broker sends (its confirms).

use std::{
    sync::{Arc, atomic::Ordering::Relaxed},
    time::Duration,
};

use engine::replay::{
    CreatePlan, ReplayStats, Selection, Target, plan, progress,
    publisher::{self, PublisherConfig},
};
use tokio_util::sync::CancellationToken;

use super::{Env, alice, fast, simple, statuses, wait_plan};
use crate::pass_through::pass_through;

#[tokio::test]
async fn a_confirm_that_never_comes_leaves_the_item_unconfirmed_then_it_is_sent_again_and_nothing_fails() {
    let env = Env::new().await;
    let n = 200;
    let ids = env.dead_letters(n, simple).await;
    let mut req = CreatePlan::new(Selection::Ids(ids.clone()), Target::Original);
    req.rate_per_sec = Some(100.0);
    req.confirm_count = Some(n as i64);
    let p = plan::create(env.pool(), &alice(), None, &req).await.unwrap();

    let (port, frozen) = pass_through().await;
    let url = testkit::amqp_url().replace("127.0.0.1:5672", &format!("127.0.0.1:{port}"));
    let cfg = PublisherConfig { confirm_timeout: Duration::from_millis(800), ..fast() };
    let window = cfg.window;
    let (stats, token) = (Arc::new(ReplayStats::default()), CancellationToken::new());
    let handle = tokio::spawn(publisher::run_with(env.pool().clone(), url, cfg, stats.clone(), token.clone()));
    wait_plan(env.pool(), p.id, "under way", |p| p.sent >= 30).await;

    // The broker's answers are held for 2.5 s: confirms come, but too late.
    frozen.store(true, Relaxed);
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let during = progress::items(env.pool(), p.id, Some("unconfirmed"), None, 1000).await.unwrap();
    let failed_during = progress::get(env.pool(), p.id).await.unwrap().failed;
    let unconfirmed_ids: Vec<i64> = during.iter().map(|i| i.dead_letter_id).collect();
    let their_status = statuses(env.pool(), &unconfirmed_ids).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    frozen.store(false, Relaxed);

    let done = wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    token.cancel();
    tokio::time::timeout(Duration::from_secs(10), handle).await.unwrap().unwrap().unwrap();
    let got = env.drain_ids(&env.work).await;
    let mut distinct = got.clone();
    distinct.sort();
    distinct.dedup();
    let c = stats.snapshot();
    println!(
        "unconfirmed: items={n} unconfirmed_during={} unconfirmed_total={} delivered={} distinct={}",
        during.len(),
        c.unconfirmed,
        got.len(),
        distinct.len()
    );
    assert!(
        !during.is_empty(),
        "no item was unconfirmed while the broker's answers were held: the test proves nothing"
    );
    assert!(during.iter().all(|i| i.error.as_deref().is_some_and(|e| e.contains("may have been delivered"))));
    assert!(their_status.iter().all(|s| s == "replaying"), "an unconfirmed item's dead letter went back to triage");
    assert_eq!(failed_during, 0, "a missing confirm was recorded as a failure");
    assert_eq!((done.sent, done.failed), (n as i64, 0), "{done:?}");
    assert_eq!(statuses(env.pool(), &ids).await, vec!["replayed"; n]);
    // Every message arrived; the ones sent twice are the unconfirmed ones, same message id.
    assert_eq!(distinct.len(), n, "a message was lost");
    assert!(got.len() - n <= c.unconfirmed as usize, "{} duplicates, {} unconfirmed", got.len() - n, c.unconfirmed);
    // Once a confirm was missed, one message at a time was risked, not a window each round:
    // what was in flight then, plus one per 800 ms round of the 2.5 s.
    assert!(c.unconfirmed as usize <= window + 4, "{} unconfirmed (window {window})", c.unconfirmed);
    assert_eq!(progress::unconfirmed(env.pool(), p.id).await.unwrap(), 0);
    env.delete().await;
}
