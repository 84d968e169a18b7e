//! Sending a plan: the exact copy, crash and resume, pause, resume, cancel, the rate limit.

use std::time::Duration;

use engine::{
    dead_letter::store,
    replay::{CreatePlan, Selection, Target, plan, progress},
};
use lapin::{
    BasicProperties,
    types::{AMQPValue, DecimalValue, FieldTable, LongString},
};

use super::{Env, Publisher, alice, simple, statuses, wait_plan};

fn custom_headers() -> FieldTable {
    let mut nested = FieldTable::default();
    nested.insert("shard".into(), AMQPValue::LongLongInt(17));
    let mut h = FieldTable::default();
    h.insert("x-tenant".into(), AMQPValue::LongString("acme-ü".into()));
    h.insert("x-attempt".into(), AMQPValue::LongInt(3));
    h.insert("x-price".into(), AMQPValue::DecimalValue(DecimalValue { scale: 2, value: 1999 }));
    h.insert("x-raw".into(), AMQPValue::LongString(LongString::from(vec![0xffu8, 0x00, 0xc3])));
    h.insert("x-ctx".into(), AMQPValue::FieldTable(nested));
    h.insert("x-nothing".into(), AMQPValue::Void);
    h
}

#[tokio::test]
async fn a_replay_keeps_the_message_id_body_properties_and_headers_and_adds_the_replay_id() {
    let env = Env::new().await;
    let body = vec![0xffu8, 0x00, b'{', 0xfe, b'\n', 0x80];
    let props = BasicProperties::default()
        .with_message_id("evt-1".into())
        .with_correlation_id("corr-9".into())
        .with_content_type("application/octet-stream".into())
        .with_content_encoding("gzip".into())
        .with_timestamp(1_700_000_123)
        .with_app_id("billing".into())
        .with_type("invoice.created".into())
        .with_delivery_mode(2)
        .with_priority(5)
        .with_reply_to("replies".into())
        .with_headers(custom_headers());
    let ids = env.dead_letters(1, |_| (body.clone(), props.clone())).await;
    let dl = store::get(env.pool(), ids[0]).await.unwrap();
    let p = plan::create(env.pool(), &alice(), None, &CreatePlan::new(Selection::Ids(ids.clone()), Target::Original))
        .await
        .unwrap();
    let publisher = Publisher::start(env.pool());
    wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    assert_eq!(publisher.stop().await.snapshot().sent, 1);

    let got = env.get(&env.work).await;
    assert_eq!(got.data, body);
    let gp = &got.properties;
    let s = |v: &Option<lapin::types::ShortString>| v.as_ref().map(|x| x.to_string());
    assert_eq!(s(gp.message_id()).as_deref(), Some("evt-1"));
    assert_eq!(s(gp.correlation_id()).as_deref(), Some("corr-9"));
    assert_eq!(s(gp.content_type()).as_deref(), Some("application/octet-stream"));
    assert_eq!(s(gp.content_encoding()).as_deref(), Some("gzip"));
    assert_eq!(s(gp.app_id()).as_deref(), Some("billing"));
    assert_eq!(s(gp.kind()).as_deref(), Some("invoice.created"));
    assert_eq!(s(gp.reply_to()).as_deref(), Some("replies"));
    assert_eq!((*gp.timestamp(), *gp.delivery_mode(), *gp.priority()), (Some(1_700_000_123), Some(2), Some(5)));
    let headers = gp.headers().clone().unwrap();
    // Every header the dead letter had (x-death included) comes back with value and type.
    let stored = dl.properties().unwrap().headers().clone().unwrap();
    for (k, v) in stored.inner() {
        assert_eq!(headers.inner().get(k), Some(v), "header {k}");
    }
    for (k, v) in custom_headers().inner() {
        assert_eq!(headers.inner().get(k), Some(v), "header {k}");
    }
    let text = |k: &str| engine::dead_letter::headers::as_text(headers.inner().get(k).unwrap()).unwrap();
    assert_eq!(text("x-revenant-replay-id"), format!("{}:{}", p.id, ids[0]));
    assert_eq!(text("x-revenant-replayed-by"), "alice");
    assert_eq!(headers.inner().len(), stored.inner().len() + 2);
    assert_eq!(statuses(env.pool(), &ids).await, ["replayed"]);
    env.delete().await;
}

#[tokio::test]
async fn a_crash_mid_plan_resends_what_was_not_marked_and_the_plan_still_finishes() {
    let env = Env::new().await;
    let ids = env.dead_letters(40, simple).await;
    let mut req = CreatePlan::new(Selection::Ids(ids.clone()), Target::Original);
    req.rate_per_sec = Some(20.0);
    let p = plan::create(env.pool(), &alice(), None, &req).await.unwrap();

    let crashed = Publisher::start(env.pool());
    tokio::time::sleep(Duration::from_secs(1)).await;
    crashed.handle.abort();
    let _ = crashed.handle.await;
    let mid = progress::get(env.pool(), p.id).await.unwrap();
    assert!(mid.sent > 0 && mid.sent < 40, "the crash must land mid-plan: {mid:?}");
    assert_eq!(mid.status, "running");

    // A new instance takes the plan over once the dead one's lease expires.
    let restarted = Publisher::start(env.pool());
    let done = wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    restarted.stop().await;
    assert_eq!((done.sent, done.failed, done.left()), (40, 0, 0));
    assert_eq!(statuses(env.pool(), &ids).await, vec!["replayed"; 40]);
    let mut got: Vec<String> =
        env.drain(&env.work).await.iter().map(|d| d.properties.message_id().clone().unwrap().to_string()).collect();
    assert!(got.len() >= 40, "at-least-once: {} delivered", got.len());
    got.sort();
    got.dedup();
    assert_eq!(got.len(), 40, "every message arrived");
    env.delete().await;
}

#[tokio::test]
async fn pause_stops_sending_and_resume_finishes_the_plan() {
    let env = Env::new().await;
    let ids = env.dead_letters(20, simple).await;
    let mut req = CreatePlan::new(Selection::Ids(ids.clone()), Target::Original);
    req.rate_per_sec = Some(10.0);
    let p = plan::create(env.pool(), &alice(), None, &req).await.unwrap();
    let publisher = Publisher::start(env.pool());
    wait_plan(env.pool(), p.id, "started", |p| p.sent >= 3).await;

    let paused = plan::pause(env.pool(), &alice(), Some("10.0.0.7"), p.id, Some("consumers look sick")).await.unwrap();
    assert_eq!(paused.status, "paused");
    assert!(paused.paused_reason.as_deref().is_some_and(|r| r.contains("alice") && r.contains("sick")));
    // Whatever was in flight settles within a control interval; then nothing moves.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = progress::get(env.pool(), p.id).await.unwrap().sent;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = progress::get(env.pool(), p.id).await.unwrap();
    assert_eq!((after.sent, after.status.as_str()), (before, "paused"));
    assert!(after.sent < 20);

    plan::resume(env.pool(), &alice(), None, p.id).await.unwrap();
    let done = wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    publisher.stop().await;
    assert_eq!((done.sent, done.failed), (20, 0));
    let actions = sqlx::query_scalar!(
        "SELECT action FROM audit_log WHERE target = $1 ORDER BY id",
        format!("replay_plan:{}", p.id)
    )
    .fetch_all(env.pool())
    .await
    .unwrap();
    assert_eq!(actions, ["replay.create", "replay.pause", "replay.resume"]);
    env.delete().await;
}

#[tokio::test]
async fn cancel_returns_the_unsent_dead_letters_to_awaiting() {
    let env = Env::new().await;
    let ids = env.dead_letters(20, simple).await;
    let mut req = CreatePlan::new(Selection::Ids(ids.clone()), Target::Original);
    req.rate_per_sec = Some(10.0);
    let p = plan::create(env.pool(), &alice(), None, &req).await.unwrap();
    let publisher = Publisher::start(env.pool());
    wait_plan(env.pool(), p.id, "started", |p| p.sent >= 3).await;

    let cancelled = plan::cancel(env.pool(), &alice(), None, p.id).await.unwrap();
    assert_eq!(cancelled.status, "cancelled");
    tokio::time::sleep(Duration::from_millis(500)).await;
    publisher.stop().await;
    let end = progress::get(env.pool(), p.id).await.unwrap();
    assert!(end.cancelled > 0 && end.sent >= 3, "{end:?}");
    assert_eq!((end.sent + end.cancelled, end.left()), (20, 0));
    let sent: Vec<i64> = progress::items(env.pool(), p.id, Some("sent"), None, 100)
        .await
        .unwrap()
        .iter()
        .map(|i| i.dead_letter_id)
        .collect();
    let back: Vec<i64> = progress::items(env.pool(), p.id, Some("cancelled"), None, 100)
        .await
        .unwrap()
        .iter()
        .map(|i| i.dead_letter_id)
        .collect();
    assert_eq!(statuses(env.pool(), &sent).await, vec!["replayed"; sent.len()]);
    assert_eq!(statuses(env.pool(), &back).await, vec!["awaiting"; back.len()]);
    assert_eq!(env.drain(&env.work).await.len(), sent.len(), "no cancelled item was sent");
    let count = sqlx::query_scalar!("SELECT item_count FROM audit_log WHERE action = 'replay.cancel'")
        .fetch_one(env.pool())
        .await
        .unwrap();
    assert_eq!(count, back.len() as i64);
    assert!(plan::resume(env.pool(), &alice(), None, p.id).await.is_err(), "a cancelled plan stays cancelled");
    env.delete().await;
}

#[tokio::test]
async fn the_rate_limit_spaces_the_messages_of_a_plan() {
    let env = Env::new().await;
    let ids = env.dead_letters(20, simple).await;
    let mut req = CreatePlan::new(Selection::Ids(ids.clone()), Target::Original);
    req.rate_per_sec = Some(10.0);
    let p = plan::create(env.pool(), &alice(), None, &req).await.unwrap();
    let publisher = Publisher::start(env.pool());
    wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    publisher.stop().await;
    // 20 sends 100 ms apart span 1.9 s; a lower bound only, never an upper one.
    let span = sqlx::query_scalar!(
        r#"SELECT extract(epoch FROM max(sent_at) - min(sent_at))::float8 AS "span!" FROM replay_items WHERE plan_id = $1"#,
        p.id
    )
    .fetch_one(env.pool())
    .await
    .unwrap();
    assert!(span >= 1.5, "20 messages at 10/s took only {span:.2} s");
    env.delete().await;
}

#[tokio::test]
async fn the_replay_publisher_reports_itself_in_heartbeats_and_says_when_it_stopped() {
    let db = testkit::fresh_db().await;
    let publisher = Publisher::start(&db.pool);
    let detail = testkit::eventually("a replay heartbeat saying connected", Duration::from_secs(10), async || {
        let detail = sqlx::query_scalar::<_, serde_json::Value>("SELECT detail FROM heartbeats WHERE role = 'replay'")
            .fetch_optional(&db.pool)
            .await
            .unwrap();
        match detail {
            Some(d) if d["connected"] == true => Ok(d),
            seen => Err(seen),
        }
    })
    .await;
    assert_eq!(detail["plans_running"], 0, "{detail}");
    publisher.stop().await;
    let stopped: serde_json::Value =
        sqlx::query_scalar!("SELECT detail FROM heartbeats WHERE role = 'replay'").fetch_one(&db.pool).await.unwrap();
    assert_eq!(stopped["stopped"], true, "a clean stop is written: {stopped}");
}
