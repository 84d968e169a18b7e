//! "← Previous" on the keyset-paginated lists: the page before a cursor is read by walking
//! the index the other way from it, and is exactly the page that was just left, ties on the
//! timestamp included.

use engine::dead_letter::store::{self, At, ListFilter, Page};

/// `n` dead letters in 'orders.dlq', three to each ingested_at (so the id breaks the ties);
/// those whose number is a multiple of 7 hold "needle" in their body.
async fn seed(pool: &sqlx::PgPool, n: i64) {
    sqlx::query!(
        r#"INSERT INTO dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason, fingerprint,
               ingested_at)
           SELECT 'orders.dlq', 'k' || g, CASE WHEN g % 7 = 0 THEN 'a needle'::bytea ELSE 'hay'::bytea END,
               3, 'dlx', 'k', 'rejected', 'fp', now() - make_interval(secs => ($1::bigint - g / 3)::float8)
           FROM generate_series(1, $1::bigint) g"#,
        n
    )
    .execute(pool)
    .await
    .unwrap();
}

fn ids(p: &Page) -> Vec<i64> {
    p.items.iter().map(|r| r.id).collect()
}

#[tokio::test]
async fn next_then_previous_gives_back_the_same_dead_letters() {
    let db = testkit::fresh_db().await;
    let pool = &db.pool;
    seed(pool, 120).await;
    let f = ListFilter::default();

    let first = store::page(pool, &f, At::Newest, 50).await.unwrap();
    assert!(first.prev.is_none(), "the first page has nothing before it");
    let second = store::page(pool, &f, At::After(first.next.unwrap()), 50).await.unwrap();
    let third = store::page(pool, &f, At::After(second.next.unwrap()), 50).await.unwrap();
    assert_eq!((third.items.len(), third.next), (20, None));

    let back_to_second = store::page(pool, &f, At::Before(third.prev.unwrap()), 50).await.unwrap();
    assert_eq!(ids(&back_to_second), ids(&second), "newest first, the same rows");
    assert_eq!(back_to_second.next, second.next, "and its next page is the third again");
    let back_to_first = store::page(pool, &f, At::Before(back_to_second.prev.unwrap()), 50).await.unwrap();
    assert_eq!(ids(&back_to_first), ids(&first));
    assert!(back_to_first.prev.is_none(), "it knows it is the first page");
}

#[tokio::test]
async fn a_body_search_pages_back_over_the_same_matches() {
    let db = testkit::fresh_db().await;
    let pool = &db.pool;
    seed(pool, 120).await;
    let f = ListFilter { body_contains: Some(b"needle".to_vec()), ..Default::default() };

    let first = store::page(pool, &f, At::Newest, 5).await.unwrap();
    let second = store::page(pool, &f, At::After(first.next.unwrap()), 5).await.unwrap();
    assert_eq!(second.items.len(), 5);
    let back = store::page(pool, &f, At::Before(second.prev.unwrap()), 5).await.unwrap();
    assert_eq!(ids(&back), ids(&first));
    assert!(back.prev.is_none() && !back.searched_partly);
}

#[tokio::test]
async fn next_then_previous_gives_back_the_same_audit_entries() {
    use engine::audit::{self, AuditFilter, Entry};
    use engine::auth::Role;
    let db = testkit::fresh_db().await;
    let pool = &db.pool;
    let olga = engine::auth::Principal { username: "olga".into(), role: engine::auth::Role::Operator };
    for i in 0..120 {
        let e = Entry {
            actor: &olga,
            source_ip: None,
            action: "test.page",
            target: Some(i.to_string()),
            filter: None,
            item_count: 1,
            outcome: "ok",
            detail: None,
        };
        audit::record(pool, e).await.unwrap();
    }
    let at = |before_id, after_id| AuditFilter { before_id, after_id, ..AuditFilter::default() };
    let ids = |rows: &[audit::AuditRow]| rows.iter().map(|r| r.id).collect::<Vec<_>>();

    let (first, more) = audit::list(pool, &at(None, None), Role::Admin, 50).await.unwrap();
    assert!(more);
    let (second, _) = audit::list(pool, &at(first.last().map(|r| r.id), None), Role::Admin, 50).await.unwrap();
    let (third, more) = audit::list(pool, &at(second.last().map(|r| r.id), None), Role::Admin, 50).await.unwrap();
    assert_eq!((third.len(), more), (20, false));

    let (back, newer) = audit::list(pool, &at(None, Some(third[0].id)), Role::Admin, 50).await.unwrap();
    assert_eq!((ids(&back), newer), (ids(&second), true), "newest first, and newer ones remain");
    let (back, newer) = audit::list(pool, &at(None, Some(back[0].id)), Role::Admin, 50).await.unwrap();
    assert_eq!((ids(&back), newer), (ids(&first), false), "the first page, and nothing above it");
}
