//! The commit stream's building blocks against the real PostgreSQL (wal_level = logical, as
//! scripts/setup leaves it): set-up, decoding in commit order, the slot's position and lag.

use engine::outbox::{
    logical::{
        event::Layout,
        pgoutput::{Message, decode},
        slot::{self, Names, SetUp},
    },
    store::{self, NewEvent},
};
use serde_json::json;
use testkit::fresh_db;

/// Everything the slot holds now, decoded: the events in stream order (with their keys), the
/// last commit's end position, and the logical messages' prefixes.
async fn read_all(pool: &sqlx::PgPool, names: &Names) -> (Vec<(String, String)>, Option<i64>, Vec<String>) {
    let mut layout = None;
    let (mut events, mut end, mut messages) = (Vec::new(), None, Vec::new());
    for change in slot::peek(pool, names, 10_000).await.unwrap() {
        match decode(&change.data).unwrap() {
            Message::Relation(r) => layout = Some(Layout::of(&r, "routing_key").unwrap()),
            Message::Insert { relation, tuple } => {
                let l = layout.as_ref().expect("a relation message comes before its first insert");
                assert_eq!(relation, l.relation);
                let row = l.row(&tuple).unwrap();
                events.push((String::from_utf8(row.payload).unwrap(), l.key(&tuple).unwrap()));
            }
            Message::Commit { end_lsn, .. } => end = Some(end_lsn as i64),
            Message::Message { prefix, .. } => messages.push(prefix.to_string()),
            _ => {}
        }
    }
    (events, end, messages)
}

#[tokio::test]
async fn inserts_come_out_of_the_slot_in_commit_order_whole_and_the_slot_moves_only_when_told() {
    let db = fresh_db().await;
    let names = Names::for_source(&db.name);
    slot::preflight(&db.pool, &names).await.expect("scripts/setup puts PostgreSQL on wal_level = logical");
    assert_eq!(slot::ensure(&db.pool, &names, "revenant.outbox").await.unwrap(), SetUp::Created);
    assert_eq!(slot::ensure(&db.pool, &names, "revenant.outbox").await.unwrap(), SetUp::AlreadyThere);

    // A begins first and writes first, B commits first: the stream follows the commits,
    // not the ids (a1 < b1 < a2).
    let ev = |body: &str, key: &str| {
        NewEvent::new("order.placed", "orders", key, body.as_bytes().to_vec())
            .with_headers(json!({"tenant": "eu", "n": 7}))
    };
    let mut a = db.pool.begin().await.unwrap();
    let mut b = db.pool.begin().await.unwrap();
    store::enqueue(&mut *a, &ev("a1", "order.1")).await.unwrap();
    store::enqueue(&mut *b, &ev("b1", "order.1")).await.unwrap();
    b.commit().await.unwrap();
    store::enqueue(&mut *a, &ev("a2", "order.2")).await.unwrap();
    a.commit().await.unwrap();
    let ids: Vec<i64> = sqlx::query_scalar!("SELECT id FROM outbox ORDER BY id").fetch_all(&db.pool).await.unwrap();
    assert_eq!(ids.len(), 3);

    let (events, end, _) = read_all(&db.pool, &names).await;
    let order: Vec<(&str, &str)> = events.iter().map(|(p, k)| (p.as_str(), k.as_str())).collect();
    assert_eq!(order, [("b1", "order.1"), ("a1", "order.1"), ("a2", "order.2")], "commit order, not id order");

    // The row reads back as the relay would publish it.
    let mut layout = None;
    for change in slot::peek(&db.pool, &names, 10_000).await.unwrap() {
        match decode(&change.data).unwrap() {
            Message::Relation(r) => layout = Some(Layout::of(&r, "routing_key").unwrap()),
            Message::Insert { tuple, .. } => {
                let row = layout.as_ref().unwrap().row(&tuple).unwrap();
                let stored = sqlx::query!(
                    "SELECT event_id::text AS \"event_id!\", headers, created_at FROM outbox WHERE id = $1",
                    row.id
                )
                .fetch_one(&db.pool)
                .await
                .unwrap();
                assert_eq!(row.event_id, stored.event_id);
                assert_eq!(row.headers, stored.headers);
                assert_eq!(row.created_at, stored.created_at);
                assert_eq!((row.exchange.as_str(), row.content_type.as_str()), ("orders", "application/json"));
            }
            _ => {}
        }
    }

    // Peeking does not move the slot; advancing does, and what is before it is gone.
    let before = slot::status(&db.pool, &names.slot).await.unwrap().unwrap();
    assert_eq!(before.active_pid, None, "nobody reads the slot between calls");
    assert!(before.retained_bytes.unwrap() > 0, "{before:?}");
    let end = end.expect("two commits");
    slot::advance(&db.pool, &names.slot, end).await.unwrap();
    let after = slot::status(&db.pool, &names.slot).await.unwrap().unwrap();
    assert_eq!(after.confirmed, Some(end));
    let (events, _, _) = read_all(&db.pool, &names).await;
    assert!(events.is_empty(), "{events:?}");

    // On an idle database the heartbeat is what the stream carries.
    slot::heartbeat(&db.pool).await.unwrap();
    let (events, beat, messages) = read_all(&db.pool, &names).await;
    assert!(events.is_empty());
    assert_eq!(messages, ["revenant.heartbeat"]);
    let beat = beat.expect("the heartbeat commits");
    assert!(beat > end);
    slot::advance(&db.pool, &names.slot, beat).await.unwrap();
    assert_eq!(slot::status(&db.pool, &names.slot).await.unwrap().unwrap().confirmed, Some(beat), "an idle slot moves");

    slot::drop_slot(&db.pool, &names.slot).await.unwrap();
    assert_eq!(slot::status(&db.pool, &names.slot).await.unwrap(), None);
}

#[tokio::test]
async fn a_slot_of_the_same_name_in_another_database_is_refused_by_name() {
    let (one, two) = (fresh_db().await, fresh_db().await);
    let names = Names::for_source(&one.name);
    slot::ensure(&one.pool, &names, "revenant.outbox").await.unwrap();
    let err = slot::ensure(&two.pool, &names, "revenant.outbox").await.unwrap_err().to_string();
    assert!(err.contains(&names.slot) && err.contains(&one.name), "{err}");
}

#[tokio::test]
async fn an_admin_drops_a_slot_nobody_reads_and_the_audit_log_says_what_it_held_back() {
    use engine::{
        audit::Actor,
        auth::{Principal, Role},
        outbox::logical::slots::{self, DropError},
    };
    let db = fresh_db().await;
    let names = Names::for_source(&db.name);
    slot::ensure(&db.pool, &names, "revenant.outbox").await.unwrap();
    store::enqueue(&db.pool, &NewEvent::new("order.placed", "orders", "order.1", b"{}".to_vec())).await.unwrap();
    let listed = slots::list(&db.pool).await.unwrap();
    let ours = listed.iter().find(|s| s.name == names.slot).expect("the slot is listed");
    assert_eq!(
        (ours.database.as_str(), ours.plugin.as_deref(), ours.active_pid),
        (db.name.as_str(), Some("pgoutput"), None)
    );
    assert!(ours.retained_bytes.unwrap() > 0);

    let admin = Principal { username: "ada".into(), role: Role::Admin };
    let actor = Actor { principal: &admin, ip: Some("10.0.0.7") };
    let freed = slots::drop_audited(&db.pool, &db.pool, "revenant", &names.slot, &actor).await.unwrap();
    // Read again at the drop: the log (cluster-wide) may have grown since the list.
    assert!(freed >= ours.retained_bytes, "{freed:?} < {:?}", ours.retained_bytes);
    assert!(slots::list(&db.pool).await.unwrap().iter().all(|s| s.name != names.slot));
    let audit = sqlx::query!(
        "SELECT actor, action, target, (detail->>'retained_bytes')::bigint AS retained FROM audit_log WHERE action = 'outbox.slot_drop'"
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (audit.actor.as_str(), audit.target.as_deref()),
        ("ada", Some(format!("outbox source revenant slot {}", names.slot).as_str()))
    );
    assert_eq!(audit.retained, freed);

    let again = slots::drop_audited(&db.pool, &db.pool, "revenant", &names.slot, &actor).await.unwrap_err();
    assert!(matches!(again, DropError::NotFound(_)), "{again}");
}
