//! A body search reads a bounded number of rows per page (`store::BODY_SEARCH_ROWS`): a match
//! older than that is reached by following `next`, never skipped, and the count says it is a
//! lower bound.

use engine::dead_letter::store::{self, BODY_SEARCH_ROWS, ListFilter};

#[tokio::test]
async fn a_body_search_past_its_row_limit_continues_on_the_next_page() {
    let db = testkit::fresh_db().await;
    let pool = &db.pool;
    // Row 1 (the oldest) and row 3 hold the needle; BODY_SEARCH_ROWS + 10 rows in all, the
    // newest first in every list.
    sqlx::query!(
        r#"INSERT INTO dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason, fingerprint,
               ingested_at)
           SELECT 'orders.dlq', 'k' || g, CASE WHEN g IN (1, 3) THEN '\x006e6565646c65ff'::bytea ELSE 'hay'::bytea END,
               3, 'dlx', 'k', 'rejected', 'fp', now() - make_interval(secs => ($1::bigint - g)::float8)
           FROM generate_series(1, $1::bigint) g"#,
        BODY_SEARCH_ROWS + 10
    )
    .execute(pool)
    .await
    .unwrap();
    let f = ListFilter { body_contains: Some(b"needle\xff".to_vec()), ..Default::default() };

    let first = store::list(pool, &f, None, 50).await.unwrap();
    assert!(first.items.is_empty(), "both matches are older than the rows one page reads");
    assert!(first.searched_partly);
    let second = store::list(pool, &f, first.next, 50).await.unwrap();
    let keys: Vec<i64> = second.items.iter().map(|r| r.id).collect();
    assert_eq!(keys.len(), 2, "the next page reads on and finds both");
    assert!(!second.searched_partly && second.next.is_none(), "and it read to the end");

    let (n, lower_bound) = store::count(pool, &f, 10_000).await.unwrap();
    assert_eq!((n, lower_bound), (0, true), "the count covers the newest rows only, and says so");
    let narrow = ListFilter {
        older_than: Some(chrono::Utc::now() - chrono::Duration::seconds(BODY_SEARCH_ROWS / 2)),
        ..f.clone()
    };
    assert_eq!(store::count(pool, &narrow, 10_000).await.unwrap(), (2, false), "a narrower filter counts exactly");
}
