//! Archiving dead letters: picked ones, or a frozen filter set; audited once, reason required.

use engine::audit::Actor;
use engine::auth::{Principal, Role};
use engine::dead_letter::store::ListFilter;
use engine::triage::{self, TriageError};
use sqlx::PgPool;

async fn seed(pool: &PgPool, n: i64, queue: &str, error_type: &str) {
    sqlx::query(
        "INSERT INTO dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason, fingerprint, error_type)
         SELECT $1, md5(random()::text || g), convert_to('{\"n\":' || g || '}', 'UTF8'), 8, 'dlx', 'k', 'rejected', 'fp', $2
         FROM generate_series(1, $3) g",
    )
    .bind(queue)
    .bind(error_type)
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
}

fn op() -> Principal {
    Principal { username: "omar".into(), role: Role::Operator }
}

async fn archived(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM dead_letters WHERE status = 'archived'").fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn archiving_picked_messages_needs_a_reason_and_is_audited_once() {
    let db = engine::testing::fresh_db().await;
    seed(&db.pool, 3, "orders.dlq", "KeyError").await;
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM dead_letters").fetch_all(&db.pool).await.unwrap();
    let p = op();
    let actor = Actor { principal: &p, ip: Some("10.0.0.7") };
    let err = triage::archive_ids(&db.pool, &ids, " ", &actor).await.unwrap_err();
    assert!(matches!(err, TriageError::Invalid(_)));
    assert_eq!(archived(&db.pool).await, 0);
    let n = triage::archive_ids(&db.pool, &ids[..2], "poison, will fail again", &actor).await.unwrap();
    assert_eq!(n, 2);
    assert_eq!(archived(&db.pool).await, 2);
    let (entries, items): (i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(item_count), 0)::bigint FROM audit_log WHERE action = 'dead_letter.archive'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((entries, items), (1, 2));
    db.drop_db().await;
}

#[tokio::test]
async fn a_bulk_archive_touches_only_the_frozen_set() {
    let db = engine::testing::fresh_db().await;
    seed(&db.pool, 25, "orders.dlq", "KeyError").await;
    seed(&db.pool, 5, "orders.dlq", "Timeout").await;
    let f = ListFilter { error_text: Some("keyerror".into()), ..Default::default() };
    let p = op();
    let frozen = triage::freeze_archive(&db.pool, &f, "renamed field", &p).await.unwrap();
    assert_eq!(frozen.count, 25);
    seed(&db.pool, 4, "orders.dlq", "KeyError").await;
    let actor = Actor { principal: &p, ip: None };
    assert_eq!(triage::execute_archive(&db.pool, frozen.selection_id, &actor).await.unwrap(), 25);
    assert_eq!(archived(&db.pool).await, 25, "the 4 late KeyErrors and the Timeouts stay");
    let again = triage::execute_archive(&db.pool, frozen.selection_id, &actor).await.unwrap_err();
    assert!(matches!(again, TriageError::SelectionGone));
    db.drop_db().await;
}
