//! The kept awaiting counts (migrations/0015_awaiting_counts.sql): per group and per queue they
//! equal a count of the rows after inserts, triage, replay-like moves and deletes, and stay
//! equal when many statements change the same groups and queues at once.

use engine::audit::Actor;
use engine::auth::{Principal, Role};
use engine::dead_letter::awaiting::{self, QueueAwaiting};
use sqlx::PgPool;

async fn group(pool: &PgPool, fingerprint: &str) -> i64 {
    sqlx::query_scalar!(
        "INSERT INTO failure_groups (fingerprint, reason) VALUES ($1, 'rejected') RETURNING id",
        fingerprint
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn seed(pool: &PgPool, n: i64, queue: &str, group_id: i64) {
    sqlx::query!(
        r#"INSERT INTO dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason, fingerprint, group_id)
           SELECT $1, md5(random()::text || g), '\x00'::bytea, 1, 'dlx', 'k', 'rejected', 'fp', $2
           FROM generate_series(1, $3::bigint) g"#,
        queue,
        group_id,
        n
    )
    .execute(pool)
    .await
    .unwrap();
}

/// (kept, counted) per group, then per queue; the test asserts each pair equal.
async fn kept_and_counted(pool: &PgPool) -> (Vec<(i64, i64, i64)>, Vec<QueueAwaiting>, Vec<QueueAwaiting>) {
    let groups = sqlx::query!(
        r#"SELECT g.id, g.awaiting,
              (SELECT count(*) FROM dead_letters d WHERE d.group_id = g.id AND d.status = 'awaiting') AS "counted!"
           FROM failure_groups g ORDER BY g.id"#
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(|r| (r.id, r.awaiting, r.counted))
    .collect();
    let counted = sqlx::query_as!(
        QueueAwaiting,
        r#"SELECT queue, count(*) AS "awaiting!" FROM dead_letters WHERE status = 'awaiting'
           GROUP BY queue ORDER BY queue"#
    )
    .fetch_all(pool)
    .await
    .unwrap();
    (groups, awaiting::by_queue(pool).await.unwrap(), counted)
}

async fn assert_kept(pool: &PgPool, step: &str) {
    let (groups, kept, counted) = kept_and_counted(pool).await;
    for (id, kept, counted) in groups {
        assert_eq!(kept, counted, "{step}: group {id} keeps {kept} awaiting, counts {counted}");
    }
    assert_eq!(kept, counted, "{step}: per-queue counts");
}

#[tokio::test]
async fn kept_counts_follow_inserts_triage_moves_and_deletes() {
    let db = testkit::fresh_db().await;
    let pool = &db.pool;
    let (a, b) = (group(pool, "a").await, group(pool, "b").await);
    seed(pool, 30, "orders.dlq", a).await;
    seed(pool, 12, "billing.dlq", b).await;
    seed(pool, 5, "billing.dlq", a).await;
    assert_kept(pool, "after inserts").await;
    assert_eq!(
        awaiting::by_queue(pool).await.unwrap(),
        vec![
            QueueAwaiting { queue: "billing.dlq".into(), awaiting: 17 },
            QueueAwaiting { queue: "orders.dlq".into(), awaiting: 30 }
        ]
    );

    let p = Principal { username: "omar".into(), role: Role::Operator };
    let actor = Actor { principal: &p, ip: None };
    let ids: Vec<i64> =
        sqlx::query_scalar!("SELECT id FROM dead_letters WHERE queue = 'orders.dlq' ORDER BY id LIMIT 10")
            .fetch_all(pool)
            .await
            .unwrap();
    assert_eq!(engine::triage::archive_ids(pool, &ids, "poison", &actor).await.unwrap(), 10);
    assert_kept(pool, "after archiving 10").await;
    assert_eq!(engine::triage::restore_ids(pool, &ids[..4], &actor).await.unwrap(), 4);
    assert_kept(pool, "after restoring 4").await;

    // What a replay plan does: awaiting → replaying → replayed; an edit leaves status alone.
    sqlx::query!("UPDATE dead_letters SET status = 'replaying' WHERE queue = 'billing.dlq' AND group_id = $1", b)
        .execute(pool)
        .await
        .unwrap();
    assert_kept(pool, "after replaying").await;
    sqlx::query!("UPDATE dead_letters SET status = 'replayed' WHERE status = 'replaying'").execute(pool).await.unwrap();
    sqlx::query!("UPDATE dead_letters SET error_message = 'edited' WHERE queue = 'orders.dlq'")
        .execute(pool)
        .await
        .unwrap();
    assert_kept(pool, "after replayed and an edit").await;
    // A row that moves group and queue while awaiting moves its count.
    sqlx::query!("UPDATE dead_letters SET group_id = $1, queue = 'moved.dlq' WHERE queue = 'billing.dlq'", b)
        .execute(pool)
        .await
        .unwrap();
    assert_kept(pool, "after a move").await;
    sqlx::query!("DELETE FROM dead_letters WHERE queue = 'orders.dlq' AND status = 'awaiting'")
        .execute(pool)
        .await
        .unwrap();
    assert_kept(pool, "after deletes").await;
    assert_eq!(
        awaiting::by_queue(pool).await.unwrap(),
        vec![QueueAwaiting { queue: "moved.dlq".into(), awaiting: 5 }],
        "a queue with none awaiting is not listed"
    );
}

/// The shapes production runs at once: ingest batches (one INSERT spanning several groups and
/// queues, as `store_batch` writes) and triage or replay statements (one UPDATE each).
#[tokio::test]
async fn concurrent_batches_and_updates_on_the_same_groups_keep_exact_counts() {
    let db = testkit::fresh_db().await;
    let pool = db.pool.clone();
    let groups = vec![group(&pool, "g1").await, group(&pool, "g2").await, group(&pool, "g3").await];
    let mut tasks = Vec::new();
    for t in 0..6i64 {
        let (pool, groups) = (pool.clone(), groups.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..15i64 {
                let mut tx = pool.begin().await.unwrap();
                sqlx::query!(
                    r#"INSERT INTO dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason,
                           fingerprint, group_id)
                       SELECT 'q' || ((g + $1::bigint) % 2), md5(random()::text || g), '\x00'::bytea, 1, 'dlx', 'k',
                           'rejected', 'fp', ($2::bigint[])[1 + (g + $1::bigint) % 3]
                       FROM generate_series(1, 12) g"#,
                    t + round,
                    &groups
                )
                .execute(&mut *tx)
                .await
                .unwrap();
                tx.commit().await.unwrap();
                sqlx::query!(
                    "UPDATE dead_letters SET status = CASE WHEN status = 'awaiting' THEN 'archived' ELSE 'awaiting' END
                     WHERE id % 6 = $1 AND id % 5 = $2",
                    t,
                    round % 5
                )
                .execute(&pool)
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(count!(&pool, "SELECT count(*) FROM dead_letters"), 6 * 15 * 12);
    assert_kept(&pool, "after concurrent batches and updates").await;
}
