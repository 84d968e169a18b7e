//! Dead-letter inflow per minute (migrations/0017_dead_letter_inflow.sql): every stored row
//! counts once in its minute, queue and group; rows stored with an old ingested_at (a restore,
//! a bench) are not inflow; the series reads back what was stored.

use engine::dead_letter::inflow;

async fn seed(pool: &sqlx::PgPool, n: i64, queue: &str, group_id: Option<i64>, secs_ago: i64) {
    sqlx::query!(
        r#"INSERT INTO dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason, fingerprint,
               group_id, ingested_at)
           SELECT $1, md5(random()::text || g), '\x00'::bytea, 1, 'dlx', 'k', 'rejected', 'fp', $2,
               now() - make_interval(secs => $4::float8)
           FROM generate_series(1, $3::bigint) g"#,
        queue,
        group_id,
        n,
        secs_ago as f64
    )
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn stored_dead_letters_count_in_their_minute_queue_and_group() {
    let db = testkit::fresh_db().await;
    let pool = &db.pool;
    let g =
        sqlx::query_scalar!("INSERT INTO failure_groups (fingerprint, reason) VALUES ('g', 'rejected') RETURNING id")
            .fetch_one(pool)
            .await
            .unwrap();
    seed(pool, 7, "orders.dlq", Some(g), 0).await;
    seed(pool, 3, "orders.dlq", Some(g), 0).await;
    seed(pool, 4, "billing.dlq", None, 0).await;
    seed(pool, 5, "orders.dlq", Some(g), 30 * 60).await;
    seed(pool, 9, "orders.dlq", Some(g), 3 * 86_400).await;

    let now = chrono::Utc::now();
    let all = inflow::last_hour(pool, now).await.unwrap();
    let orders = inflow::series(&all, now, |b| b.queue == "orders.dlq");
    assert_eq!(orders.len(), inflow::MINUTES);
    assert_eq!(orders.iter().sum::<i64>(), 15, "the three-day-old rows are not inflow");
    assert!(orders[inflow::MINUTES - 1] >= 10 || orders[inflow::MINUTES - 2] >= 10, "this minute's rows: {orders:?}");
    assert_eq!(inflow::series(&all, now, |b| b.queue == "billing.dlq").iter().sum::<i64>(), 4);
    let group = inflow::group_last_hour(pool, g, now).await.unwrap();
    assert_eq!(inflow::series(&group, now, |_| true).iter().sum::<i64>(), 15);
    assert_eq!(count!(pool, "SELECT count(*) FROM dead_letter_inflow WHERE minute < now() - interval '1 day'"), 0);
}
