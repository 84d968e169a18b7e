//! Archiving dead letters: picked ones, or a frozen filter set; audited once, reason required.
//! Restoring archived ones, and purging archived ones past a retention, in batches.

use engine::audit::Actor;
use engine::auth::{Principal, Role};
use engine::dead_letter::store::ListFilter;
use engine::triage::{self, TriageError};
use sqlx::PgPool;

async fn seed(pool: &PgPool, n: i64, queue: &str, error_type: &str) {
    sqlx::query!(
        r#"INSERT INTO dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason, fingerprint, error_type)
           SELECT $1, md5(random()::text || g), convert_to('{"n":' || g || '}', 'UTF8'), 8, 'dlx', 'k', 'rejected', 'fp', $2
           FROM generate_series(1, $3::bigint) g"#,
        queue,
        error_type,
        n
    )
    .execute(pool)
    .await
    .unwrap();
}

fn op() -> Principal {
    Principal { username: "omar".into(), role: Role::Operator }
}

async fn archived(pool: &PgPool) -> i64 {
    sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM dead_letters WHERE status = 'archived'"#)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn archiving_picked_messages_needs_a_reason_and_is_audited_once() {
    let db = testkit::fresh_db().await;
    seed(&db.pool, 3, "orders.dlq", "KeyError").await;
    let ids = ids_where(&db.pool, "true").await;
    let p = op();
    let actor = Actor { principal: &p, ip: Some("10.0.0.7") };
    let err = triage::archive_ids(&db.pool, &ids, " ", &actor).await.unwrap_err();
    assert!(matches!(err, TriageError::Invalid(_)));
    assert_eq!(archived(&db.pool).await, 0);
    let n = triage::archive_ids(&db.pool, &ids[..2], "poison, will fail again", &actor).await.unwrap();
    assert_eq!(n, 2);
    assert_eq!(archived(&db.pool).await, 2);
    let (entries, items) = audit_sum(&db.pool, "dead_letter.archive").await;
    assert_eq!((entries, items), (1, 2));
}

#[tokio::test]
async fn a_bulk_archive_touches_only_the_frozen_set() {
    let db = testkit::fresh_db().await;
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
}

async fn audit_sum(pool: &PgPool, action: &str) -> (i64, i64) {
    let r = sqlx::query!(
        r#"SELECT count(*) AS "entries!", coalesce(sum(item_count), 0)::bigint AS "items!" FROM audit_log WHERE action = $1"#,
        action
    )
    .fetch_one(pool)
    .await
    .unwrap();
    (r.entries, r.items)
}

async fn ids_where(pool: &PgPool, cond: &str) -> Vec<i64> {
    // Runtime-checked: the condition is each assertion's own.
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY id")))
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn restoring_returns_archived_messages_to_awaiting_with_one_audit_entry() {
    let db = testkit::fresh_db().await;
    seed(&db.pool, 3, "orders.dlq", "KeyError").await;
    seed(&db.pool, 1, "orders.dlq", "Timeout").await;
    let ids = ids_where(&db.pool, "error_type = 'KeyError'").await;
    let p = op();
    let actor = Actor { principal: &p, ip: Some("10.0.0.7") };
    triage::archive_ids(&db.pool, &ids, "looked like poison", &actor).await.unwrap();
    let awaiting_one = ids_where(&db.pool, "error_type = 'Timeout'").await;
    let picked = [ids[0], ids[1], awaiting_one[0]];
    assert_eq!(triage::restore_ids(&db.pool, &picked, &actor).await.unwrap(), 2, "only archived ones are restored");
    assert_eq!(ids_where(&db.pool, "status = 'archived'").await, [ids[2]]);
    assert_eq!(ids_where(&db.pool, "status = 'awaiting' AND archived_reason IS NULL").await.len(), 3);
    assert_eq!(audit_sum(&db.pool, "dead_letter.restore").await, (1, 2));
    assert!(matches!(triage::restore_ids(&db.pool, &[], &actor).await, Err(TriageError::Invalid(_))));
}

#[tokio::test]
async fn a_purge_deletes_only_archived_messages_older_than_the_retention_that_match_the_filter() {
    let db = testkit::fresh_db().await;
    seed(&db.pool, 5, "orders.dlq", "old-archived").await;
    seed(&db.pool, 3, "billing.dlq", "old-archived").await;
    seed(&db.pool, 2, "orders.dlq", "new-archived").await;
    seed(&db.pool, 4, "orders.dlq", "old-awaiting").await;
    sqlx::query!(
        "UPDATE dead_letters SET status = CASE WHEN error_type LIKE '%archived' THEN 'archived' ELSE 'awaiting' END,
            ingested_at = CASE WHEN error_type LIKE 'old%' THEN now() - interval '40 days' ELSE now() - interval '2 days' END",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let doomed = ids_where(&db.pool, "error_type = 'old-archived' AND queue = 'orders.dlq'").await;
    let survivor = ids_where(&db.pool, "error_type = 'old-awaiting'").await[0];
    // What points at a purged message: a replay item, an edit, a later dead letter's lineage.
    let plan = sqlx::query_scalar!(
        "INSERT INTO replay_plans (created_by, source, target_mode) VALUES ('t', '{}', 'original') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    sqlx::query!(
        "INSERT INTO replay_items (plan_id, dead_letter_id, seq, exchange, routing_key, status) VALUES ($1, $2, 1, 'x', 'k', 'sent')",
        plan,
        doomed[0]
    )
    .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query!(
        r#"INSERT INTO dead_letter_edits (dead_letter_id, body, edited_by) VALUES ($1, '\x00', 't')"#,
        doomed[1]
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query!("UPDATE dead_letters SET replay_of = $1 WHERE id = $2", doomed[0], survivor)
        .execute(&db.pool)
        .await
        .unwrap();

    let f = ListFilter { queue: Some("orders.dlq".into()), ..Default::default() };
    assert_eq!(triage::purge_count(&db.pool, 30, &f, 1000).await.unwrap(), (5, false));
    assert_eq!(triage::purge_count(&db.pool, 1, &f, 1000).await.unwrap(), (7, false));
    let p = Principal { username: "ada".into(), role: Role::Admin };
    let actor = Actor { principal: &p, ip: None };
    assert!(matches!(triage::purge_archived(&db.pool, 0, &f, &actor).await, Err(TriageError::Invalid(_))));
    assert_eq!(triage::purge_archived(&db.pool, 30, &f, &actor).await.unwrap(), 5);

    let left = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM dead_letters WHERE id = ANY($1)"#, &doomed)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    assert_eq!(ids_where(&db.pool, "error_type = 'old-archived' AND queue = 'billing.dlq'").await.len(), 3);
    assert_eq!(ids_where(&db.pool, "error_type = 'new-archived'").await.len(), 2);
    assert_eq!(ids_where(&db.pool, "error_type = 'old-awaiting' AND replay_of IS NULL").await.len(), 4);
    let refs: i64 = sqlx::query_scalar!(
        r#"SELECT (SELECT count(*) FROM replay_items) + (SELECT count(*) FROM dead_letter_edits) AS "n!""#
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(refs, 0);
    assert_eq!(audit_sum(&db.pool, "dead_letter.purge").await, (1, 5));
    assert_eq!(triage::purge_archived(&db.pool, 30, &f, &actor).await.unwrap(), 0, "nothing left to purge");
}

#[tokio::test]
async fn a_purge_bigger_than_a_batch_deletes_it_all_batch_by_batch() {
    let db = testkit::fresh_db().await;
    let n = triage::PURGE_BATCH * 2 + 7;
    seed(&db.pool, n, "orders.dlq", "KeyError").await;
    sqlx::query!("UPDATE dead_letters SET status = 'archived', ingested_at = now() - interval '10 days'")
        .execute(&db.pool)
        .await
        .unwrap();
    let p = Principal { username: "ada".into(), role: Role::Admin };
    let actor = Actor { principal: &p, ip: None };
    let deleted = triage::purge_archived(&db.pool, 7, &ListFilter::default(), &actor).await.unwrap();
    assert_eq!(deleted, n as u64);
    assert!(ids_where(&db.pool, "true").await.is_empty());
    assert_eq!(audit_sum(&db.pool, "dead_letter.purge").await, (3, n), "one entry per batch, with its count");
}
