//! Edit and replay: an edited dead letter is replayed as its latest edit (same message id,
//! `x-revenant-edited`), the original row is kept as it was, and the edit is audited once.

use engine::{
    auth::{Principal, Role},
    dead_letter::{headers, store},
    replay::{
        CreatePlan, Selection, Target,
        edit::{self, EDITED_HEADER, EditError},
        plan,
    },
};
use lapin::{
    BasicProperties,
    types::{AMQPValue, FieldTable, LongString},
};
use serde_json::json;
use sqlx::PgPool;

use crate::replay::{Env, Publisher, alice, statuses, wait_plan};

fn original_headers() -> FieldTable {
    let mut h = FieldTable::default();
    h.insert("x-tenant".into(), AMQPValue::LongString("acme".into()));
    h.insert("x-attempt".into(), AMQPValue::LongInt(3));
    h.insert("x-drop".into(), AMQPValue::LongString("bye".into()));
    h
}

async fn edit_entries(pool: &PgPool, id: i64) -> (i64, i64) {
    let r = sqlx::query!(
        r#"SELECT count(*) AS "entries!", coalesce(sum(item_count), 0)::bigint AS "items!" FROM audit_log
           WHERE action = 'dead_letter.edit' AND target = $1"#,
        format!("dead letter #{id}")
    )
    .fetch_one(pool)
    .await
    .unwrap();
    (r.entries, r.items)
}

#[tokio::test]
async fn an_edited_dead_letter_replays_with_the_edited_body_and_headers_and_the_same_message_id() {
    let env = Env::new().await;
    let props = BasicProperties::default()
        .with_message_id("evt-7".into())
        .with_correlation_id("corr-1".into())
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_headers(original_headers());
    let ids = env.dead_letters(1, |_| (b"{\"sku\": \"A-1\"}\n".to_vec(), props.clone())).await;
    let id = ids[0];
    let before = store::get(env.pool(), id).await.unwrap();

    let mut plain = edit::table_to_plain(before.headers.as_ref());
    let map = plain.as_object_mut().unwrap();
    map.insert("x-tenant".into(), json!("globex"));
    map.remove("x-drop");
    map.insert("x-fixed".into(), json!(true));
    let new_body = b"{\"sku\": \"A-2\"}\n".to_vec();
    let e = edit::save_edit(env.pool(), &alice(), Some("10.0.0.9"), id, new_body.clone(), plain, Some("renamed sku"))
        .await
        .unwrap();
    assert_eq!(edit::latest_edit(env.pool(), id).await.unwrap().map(|l| l.id), Some(e.id));
    let d = edit::diff::diff(&before.body, before.headers.as_ref(), &e.body, e.headers.as_ref());
    let changed: Vec<&str> = d.headers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(changed, ["x-drop", "x-fixed", "x-tenant"]);

    let p = plan::create(env.pool(), &alice(), None, &CreatePlan::new(Selection::Ids(ids.clone()), Target::Original))
        .await
        .unwrap();
    let publisher = Publisher::start(env.pool());
    wait_plan(env.pool(), p.id, "done", |p| p.status == "done").await;
    assert_eq!(publisher.stop().await.snapshot().sent, 1);

    let got = env.get(&env.work).await;
    assert_eq!(got.data, new_body);
    let gp = &got.properties;
    let s = |v: &Option<lapin::types::ShortString>| v.as_ref().map(|x| x.to_string());
    assert_eq!(s(gp.message_id()).as_deref(), Some("evt-7"));
    assert_eq!(s(gp.correlation_id()).as_deref(), Some("corr-1"));
    assert_eq!(s(gp.content_type()).as_deref(), Some("application/json"));
    let h = gp.headers().clone().unwrap();
    let h = h.inner();
    assert_eq!(h.get("x-tenant"), Some(&AMQPValue::LongString(LongString::from("globex"))));
    assert_eq!(h.get("x-attempt"), Some(&AMQPValue::LongInt(3)), "an untouched header keeps its AMQP type");
    assert_eq!(h.get("x-fixed"), Some(&AMQPValue::Boolean(true)));
    assert!(h.get("x-drop").is_none());
    assert!(h.get("x-death").is_some(), "untouched x-death is sent as it was");
    assert_eq!(h.get(EDITED_HEADER).and_then(headers::as_text), Some(e.id.to_string()));
    assert_eq!(h.get("x-revenant-replay-id").and_then(headers::as_text), Some(format!("{}:{id}", p.id)));
    assert_eq!(statuses(env.pool(), &ids).await, ["replayed"]);

    let after = store::get(env.pool(), id).await.unwrap();
    assert_eq!((after.body, after.headers), (before.body, before.headers), "the original row is unchanged");
    assert_eq!(edit_entries(env.pool(), id).await, (1, 1));
    env.delete().await;
}

async fn seed_one(pool: &PgPool, status: &str) -> i64 {
    sqlx::query_scalar!(
        r#"INSERT INTO dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason, fingerprint,
              headers, status)
           VALUES ('q.dlq', md5(random()::text), '\x7b7d', 2, 'dlx', 'k', 'rejected', 'fp',
              '{"a": {"t": "i32", "v": 1}}', $1) RETURNING id"#,
        status
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn an_edit_that_changes_nothing_or_of_a_message_being_replayed_is_refused_and_not_audited() {
    let db = testkit::fresh_db().await;
    let by = Principal { username: "omar".into(), role: Role::Operator };
    let id = seed_one(&db.pool, "awaiting").await;
    let same = edit::save_edit(&db.pool, &by, None, id, b"{}".to_vec(), json!({"a": 1}), None).await;
    assert!(matches!(same, Err(EditError::Invalid(_))), "{same:?}");
    let not_object = edit::save_edit(&db.pool, &by, None, id, b"{}".to_vec(), json!([1]), None).await;
    assert!(matches!(not_object, Err(EditError::Invalid(_))), "{not_object:?}");
    let too_big = vec![b'x'; edit::MAX_BODY_BYTES + 1];
    let big = edit::save_edit(&db.pool, &by, None, id, too_big, json!({}), None).await;
    assert!(matches!(big, Err(EditError::Invalid(_))), "{big:?}");
    let busy = seed_one(&db.pool, "replaying").await;
    let replaying = edit::save_edit(&db.pool, &by, None, busy, b"[]".to_vec(), json!({"a": 1}), None).await;
    assert!(matches!(replaying, Err(EditError::Conflict(_))), "{replaying:?}");
    let missing = edit::save_edit(&db.pool, &by, None, 999_999, b"[]".to_vec(), json!({}), None).await;
    assert!(matches!(missing, Err(EditError::NotFound(999_999))), "{missing:?}");
    assert_eq!(edit_entries(&db.pool, id).await, (0, 0));
    assert_eq!(edit_entries(&db.pool, busy).await, (0, 0));

    // A headers-only edit of a message keeps the body; the next edit builds on it.
    let first = edit::save_edit(&db.pool, &by, None, id, b"{}".to_vec(), json!({"a": 2}), Some("bump")).await.unwrap();
    assert_eq!(first.headers, Some(json!({"a": {"t": "i64", "v": 2}})));
    let cur = edit::current(&db.pool, id).await.unwrap();
    assert_eq!((cur.edit_id, cur.body.as_slice()), (Some(first.id), &b"{}"[..]));
}
