//! A failure group's "why" read from the store: only its awaiting messages, the newest first,
//! broken down by body shape, declared-JSON mismatch and schema version.

use engine::dead_letter::breakdown::{self, BodyShape};

/// (body, content type, headers, status)
type Row<'a> = (&'a [u8], Option<&'a str>, Option<serde_json::Value>, &'a str);

#[tokio::test]
async fn a_group_without_an_error_header_is_broken_down_by_what_its_bodies_are() {
    let db = testkit::fresh_db().await;
    let pool = &db.pool;
    let group =
        sqlx::query_scalar!("INSERT INTO failure_groups (fingerprint, reason) VALUES ('fp', 'rejected') RETURNING id")
            .fetch_one(pool)
            .await
            .unwrap();
    let v2 = serde_json::json!({"schema-version": {"t": "longstr", "v": "2"}});
    let rows: [Row; 5] = [
        (br#"{"order": 1}"#, Some("application/json"), Some(v2.clone()), "awaiting"),
        (b"order 2 as words", Some("application/json"), None, "awaiting"),
        (&[0x1f, 0x8b, 0x08, 0x00], None, None, "awaiting"),
        (br#"{"order": 4}"#, Some("application/json"), Some(v2), "awaiting"),
        (b"archived, so not counted", Some("text/plain"), None, "archived"),
    ];
    for (i, (body, ct, headers, status)) in rows.into_iter().enumerate() {
        let key = format!("k{i}");
        sqlx::query!(
            "INSERT INTO dead_letters (queue, natural_key, body, body_size, content_type, headers, exchange, routing_key,
                 reason, fingerprint, group_id, status)
             VALUES ('orders.dlq', $1, $2, $3, $4, $5, 'dlx', 'k', 'rejected', 'fp', $6, $7)",
            key,
            body,
            body.len() as i32,
            ct,
            headers,
            group,
            status
        )
        .execute(pool)
        .await
        .unwrap();
    }
    let b = breakdown::of_group(pool, group).await.unwrap();
    assert_eq!(b.sampled, 4, "{b:?}");
    assert_eq!(b.shapes, vec![(BodyShape::Json, 2), (BodyShape::Compressed, 1), (BodyShape::Text, 1)]);
    assert_eq!((b.declared_json_not_json, b.no_content_type), (1, 1));
    assert_eq!(b.schema_versions, vec![(Some("2".into()), 2), (None, 2)]);
    assert!(b.mixed());
}
