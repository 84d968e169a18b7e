//! One failure group never holds two kinds of message: the incident of issue 41 (340
//! `processar_pagamento` and 25 `notificar_cliente` rejections in one DLQ, no error header) is
//! two groups, whether stored now or stored before and re-keyed by migration 0024, whose SQL
//! gives the same labels and keys as the Rust.

use engine::dead_letter::{
    fingerprint, kind,
    received::Received,
    store_batch::{NewDeadLetter, insert_committed},
};
use engine::replay::{Selection, Target, preview::preview};
use lapin::{
    BasicProperties,
    types::{AMQPValue, FieldArray, FieldTable},
};
use testkit::amqp_url;

fn rejected(queue: &str, msg_type: Option<&str>, body: &str) -> Received {
    let mut death = FieldTable::default();
    death.insert("reason".into(), AMQPValue::LongString("rejected".into()));
    death.insert("queue".into(), AMQPValue::LongString(queue.into()));
    death.insert("count".into(), AMQPValue::LongLongInt(1));
    let mut h = FieldTable::default();
    h.insert("x-death".into(), AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])));
    let mut props = BasicProperties::default().with_headers(h).with_message_id(uuid::Uuid::new_v4().to_string().into());
    if let Some(t) = msg_type {
        props = props.with_type(t.into());
    }
    Received {
        queue: format!("{queue}.dlq"),
        exchange: "dlx".into(),
        routing_key: queue.into(),
        properties: props,
        body: body.into(),
    }
}

fn pagamento(i: usize) -> String {
    format!(r#"{{"pedido_id":{i},"valor":10.5,"moeda":"BRL","metodo":"pix"}}"#)
}

fn notificacao(i: usize) -> String {
    format!(r#"{{"notificacao_id":{i},"canal":"sms","template":"pedido_pago"}}"#)
}

#[tokio::test]
async fn two_kinds_without_an_error_header_are_two_groups() {
    let db = testkit::fresh_db().await;
    let mut rows: Vec<NewDeadLetter> = (0..340)
        .map(|i| NewDeadLetter::new(rejected("pagamentos.processar", Some("processar_pagamento"), &pagamento(i))))
        .collect();
    rows.extend(
        (0..25)
            .map(|i| NewDeadLetter::new(rejected("pagamentos.processar", Some("notificar_cliente"), &notificacao(i)))),
    );
    insert_committed(&db.pool, &rows).await.unwrap();
    let groups =
        sqlx::query!(r#"SELECT msg_type, body_shape, count, awaiting FROM failure_groups ORDER BY count DESC"#)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let got: Vec<_> =
        groups.iter().map(|g| (g.msg_type.as_deref(), g.body_shape.as_deref(), g.count, g.awaiting)).collect();
    assert_eq!(
        got,
        vec![
            (Some("processar_pagamento"), Some("{metodo, moeda, pedido_id, valor}"), 340, 340),
            (Some("notificar_cliente"), Some("{canal, notificacao_id, template}"), 25, 25),
        ]
    );

    // A hand-picked set across both kinds: the preview's first warning names the split.
    let ids: Vec<i64> =
        sqlx::query_scalar!("SELECT id FROM dead_letters ORDER BY id DESC LIMIT 30").fetch_all(&db.pool).await.unwrap();
    let p = preview(&db.pool, &amqp_url(), &Selection::Ids(ids), &Target::Origin).await.unwrap();
    assert_eq!(
        p.kinds,
        vec![
            (Some("notificar_cliente".into()), Some("{canal, notificacao_id, template}".into()), 25),
            (Some("processar_pagamento".into()), Some("{metodo, moeda, pedido_id, valor}".into()), 5),
        ]
    );
    let group: i64 = sqlx::query_scalar!("SELECT id FROM failure_groups WHERE msg_type = 'processar_pagamento'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let p = preview(&db.pool, &amqp_url(), &Selection::Group(group), &Target::Origin).await.unwrap();
    assert_eq!(p.kinds.len(), 1, "a group is one kind");

    // Without a type, the body shape alone still separates them.
    let db = testkit::fresh_db().await;
    let mut rows: Vec<NewDeadLetter> = (0..3).map(|i| NewDeadLetter::new(rejected("q", None, &pagamento(i)))).collect();
    rows.extend((0..2).map(|i| NewDeadLetter::new(rejected("q", None, &notificacao(i)))));
    insert_committed(&db.pool, &rows).await.unwrap();
    let counts: Vec<i64> =
        sqlx::query_scalar!("SELECT count FROM failure_groups ORDER BY count DESC").fetch_all(&db.pool).await.unwrap();
    assert_eq!(counts, vec![3, 2]);
}

#[tokio::test]
async fn the_sql_labels_and_keys_are_the_rusts() {
    let db = testkit::fresh_db().await;
    let nested = format!("{{\"deep\":{}1{}}}", "[".repeat(40), "]".repeat(40));
    let many = format!("{{{}}}", (0..30).map(|i| format!("\"k{i:02}\":0")).collect::<Vec<_>>().join(","));
    let bodies: Vec<(Vec<u8>, Option<&str>)> = vec![
        (pagamento(1).into_bytes(), None),
        (b" \n{\"b\":1,\"a\":{\"x\":[1,2]},\"a\":3}\n".to_vec(), None),
        (b"{\"\xc3\xa9t\xc3\xa9\":1,\"Z\":2,\"a\":3}".to_vec(), None),
        (many.into_bytes(), None),
        (nested.into_bytes(), None),
        (b"{}".to_vec(), None),
        (b"[1, {\"a\": 2}]".to_vec(), None),
        (b"{\"a\":1".to_vec(), None),
        (b"42".to_vec(), None),
        (b"\"x\"".to_vec(), None),
        (b"hello world\ttab".to_vec(), None),
        (b"".to_vec(), None),
        (vec![0xff, 0xfe, 0x41], None),
        (b"nul\x00byte".to_vec(), None),
        (b"bell\x07".to_vec(), None),
        ("c1 \u{0085} next line".as_bytes().to_vec(), None),
        ("c1 \u{0090} control".as_bytes().to_vec(), None),
        (vec![0x1f, 0x8b, 8, 0, 0], None),
        (vec![0x78, 0x9c, 1, 2], None),
        (b"BZh9rest".to_vec(), None),
        (b"{\"a\":1}".to_vec(), Some(" GZIP ")),
        (b"{\"a\":1}".to_vec(), Some("identity")),
    ];
    for (body, encoding) in &bodies {
        let rust = kind::body_shape(body, *encoding);
        let sql: Option<String> = sqlx::query_scalar!("SELECT revenant_body_shape($1, $2)", body.as_slice(), *encoding)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(sql.as_deref(), Some(rust.as_str()), "body {:?}", String::from_utf8_lossy(body));
    }
    let base = fingerprint::fingerprint(Some("q"), "rejected", None, None);
    for (t, shape) in
        [(None, None), (Some("processar_pagamento"), None), (None, Some("{a, b}")), (Some("é"), Some("text"))]
    {
        let sql: Option<String> = sqlx::query_scalar!("SELECT revenant_kind_fingerprint($1, $2, $3)", base, t, shape)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(sql.unwrap(), kind::fingerprint(base.clone(), t, shape), "{t:?} {shape:?}");
    }
}

#[tokio::test]
async fn groups_stored_before_are_split_by_kind_keeping_their_history() {
    let db = testkit::fresh_db().await;
    // As stored before migration 0024: one group for both kinds, rows without a body shape.
    let base = fingerprint::fingerprint(Some("pagamentos.processar"), "rejected", None, None);
    let group: i64 = sqlx::query_scalar!(
        "INSERT INTO failure_groups (fingerprint, original_queue, reason, first_seen, count)
         VALUES ($1, 'pagamentos.processar', 'rejected', now() - interval '3 days', 365) RETURNING id",
        base
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    for (n, t, body) in [(340, "processar_pagamento", pagamento(0)), (25, "notificar_cliente", notificacao(0))] {
        sqlx::query!(
            "INSERT INTO dead_letters (queue, natural_key, msg_type, body, body_size, exchange, routing_key, reason,
                                       original_queue, fingerprint, group_id, ingested_at)
             SELECT 'pagamentos.dlq', md5(random()::text || g), $1, convert_to($2, 'UTF8'), 60, 'dlx', 'k', 'rejected',
                    'pagamentos.processar', $3, $4, now() - interval '1 hour'
             FROM generate_series(1, $5::bigint) g",
            t,
            body,
            base,
            group,
            n as i64
        )
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let moved: Option<i64> = sqlx::query_scalar!("SELECT revenant_rekey_groups()").fetch_one(&db.pool).await.unwrap();
    assert_eq!(moved, Some(25), "the smaller kind moves, the larger keeps the group");
    let groups = sqlx::query!(
        r#"SELECT id, fingerprint, msg_type, count, awaiting, first_seen < now() - interval '2 days' AS "old!"
           FROM failure_groups ORDER BY count DESC"#
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(groups.len(), 2);
    let (big, small) = (&groups[0], &groups[1]);
    assert_eq!(
        (big.id, big.msg_type.as_deref(), big.count, big.awaiting),
        (group, Some("processar_pagamento"), 340, 340)
    );
    assert_eq!((small.msg_type.as_deref(), small.count, small.awaiting), (Some("notificar_cliente"), 25, 25));
    assert!(big.old && small.old, "both keep the old group's first-seen time");
    let expect =
        |t: &str, body: &str| kind::fingerprint(base.clone(), Some(t), Some(&kind::body_shape(body.as_bytes(), None)));
    assert_eq!(big.fingerprint, expect("processar_pagamento", &pagamento(0)));
    assert_eq!(small.fingerprint, expect("notificar_cliente", &notificacao(0)));
    let stale = count!(
        &db.pool,
        "SELECT count(*) FROM dead_letters d JOIN failure_groups g ON g.id = d.group_id WHERE d.fingerprint <> g.fingerprint OR d.body_shape IS NULL"
    );
    assert_eq!(stale, 0, "every row carries its group's key and its shape");
    let inflow: Vec<(i64, i64)> =
        sqlx::query!(r#"SELECT group_id, sum(n)::bigint AS "n!" FROM dead_letter_inflow GROUP BY 1 ORDER BY 2 DESC"#)
            .fetch_all(&db.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.group_id, r.n))
            .collect();
    assert_eq!(inflow, vec![(group, 340), (small.id, 25)], "the inflow follows the rows");
    assert_eq!(
        sqlx::query_scalar!("SELECT revenant_rekey_groups()").fetch_one(&db.pool).await.unwrap(),
        Some(0),
        "a second run moves nothing"
    );
}

/// The list can take one kind: type and shape are filters, and the type facet counts them.
#[tokio::test]
async fn the_list_filters_by_type_and_shape_and_counts_types() {
    use engine::dead_letter::store::{self, ListFilter};
    let db = testkit::fresh_db().await;
    let mut rows: Vec<NewDeadLetter> = (0..4)
        .map(|i| NewDeadLetter::new(rejected("pagamentos.processar", Some("processar_pagamento"), &pagamento(i))))
        .collect();
    rows.extend((0..2).map(|i| NewDeadLetter::new(rejected("pagamentos.processar", None, &notificacao(i)))));
    insert_committed(&db.pool, &rows).await.unwrap();
    let count = async |f: ListFilter| store::count(&db.pool, &f, 100).await.unwrap().0;
    assert_eq!(count(ListFilter { msg_type: Some("processar_pagamento".into()), ..Default::default() }).await, 4);
    let shape = Some("{canal, notificacao_id, template}".to_string());
    assert_eq!(count(ListFilter { body_shape: shape.clone(), ..Default::default() }).await, 2);
    assert_eq!(count(ListFilter { origin: Some("pagamentos.processar".into()), ..Default::default() }).await, 6);
    let facet = store::type_counts(&db.pool, &ListFilter::default(), 8).await.unwrap();
    assert_eq!(facet, Some(vec![(Some("processar_pagamento".into()), 4), (None, 2)]));
    let narrowed = ListFilter { body_shape: shape, ..Default::default() };
    assert_eq!(store::type_counts(&db.pool, &narrowed, 8).await.unwrap(), Some(vec![(None, 2)]));
    let searching = ListFilter { body_contains: Some(b"pix".to_vec()), ..Default::default() };
    assert_eq!(store::type_counts(&db.pool, &searching, 8).await.unwrap(), None, "no facet over a body search");
}

#[tokio::test]
async fn the_groups_filter_by_type_and_count_their_types() {
    use engine::dead_letter::store::{self, GroupFilter, GroupTypeCount};
    let db = testkit::fresh_db().await;
    let mut rows: Vec<NewDeadLetter> = (0..4)
        .map(|i| NewDeadLetter::new(rejected("pagamentos.processar", Some("processar_pagamento"), &pagamento(i))))
        .collect();
    rows.extend(
        (0..3)
            .map(|i| NewDeadLetter::new(rejected("pagamentos.processar", Some("notificar_cliente"), &notificacao(i)))),
    );
    rows.extend((0..2).map(|i| NewDeadLetter::new(rejected("outra.fila", None, &notificacao(i)))));
    insert_committed(&db.pool, &rows).await.unwrap();
    let typed = GroupFilter { msg_type: Some("notificar_cliente".into()), ..Default::default() };
    let got = store::groups(&db.pool, &typed, 10).await.unwrap();
    assert_eq!(
        got.iter().map(|g| (g.msg_type.as_deref(), g.count)).collect::<Vec<_>>(),
        vec![(Some("notificar_cliente"), 3)]
    );
    let line = |t: Option<&str>, groups, awaiting| GroupTypeCount { msg_type: t.map(Into::into), groups, awaiting };
    // The facet ignores the type narrowed to: every type stays offered.
    assert_eq!(
        store::group_type_counts(&db.pool, &typed).await.unwrap(),
        vec![line(Some("processar_pagamento"), 1, 4), line(Some("notificar_cliente"), 1, 3), line(None, 1, 2)]
    );
    let one_queue = GroupFilter { original_queue: Some("outra.fila".into()), ..Default::default() };
    assert_eq!(store::group_type_counts(&db.pool, &one_queue).await.unwrap(), vec![line(None, 1, 2)]);
    // Archived messages leave their group's awaiting count, and `only_awaiting` drops the group.
    sqlx::query("UPDATE dead_letters SET status = 'archived' WHERE msg_type IS NULL").execute(&db.pool).await.unwrap();
    let awaiting = GroupFilter { only_awaiting: true, ..Default::default() };
    assert_eq!(
        store::group_type_counts(&db.pool, &awaiting).await.unwrap(),
        vec![line(Some("processar_pagamento"), 1, 4), line(Some("notificar_cliente"), 1, 3)]
    );
}
