//! Outbox sources: lists, filters, keyset pages, mapped tables, and audited actions.

use engine::auth::{Principal, Role};
use engine::settings::MappedOutbox;
use engine::sources::{
    self, Source,
    actions::{self, ActionError, Actor},
    mapping::Cols,
    query::{self, At, Bucket, Filter},
};
use sqlx::PgPool;
use types::RowAction;

fn native(pool: &PgPool) -> Source {
    Source {
        name: "revenant".into(),
        pool: pool.clone(),
        cols: Cols::native(),
        stuck_after: std::time::Duration::from_secs(600),
        stuck_attempts: 3,
        relay: false,
        poll: std::time::Duration::from_millis(250),
        capture: Default::default(),
        database_url: None,
    }
}

fn op() -> Principal {
    Principal { username: "olga".into(), role: Role::Operator }
}

async fn seed(pool: &PgPool, n: i64, event_type: &str, status: &str, age_mins: i64) {
    sqlx::query!(
        r#"INSERT INTO outbox (event_type, routing_key, payload, status, created_at, last_error)
           SELECT $1, 'orders.' || $1, convert_to('{"order":' || g || '}', 'UTF8'), $2,
                  now() - make_interval(mins => $3) + g * interval '1 ms',
                  CASE WHEN $2 = 'failed' THEN 'NO_ROUTE: no queue bound' END
           FROM generate_series(1, $4::bigint) g"#,
        event_type,
        status,
        age_mins as i32,
        n
    )
    .execute(pool)
    .await
    .unwrap();
}

async fn audit_count(pool: &PgPool, action: &str) -> (i64, i64) {
    let r = sqlx::query!(
        r#"SELECT count(*) AS "entries!", coalesce(sum(item_count), 0)::bigint AS "items!" FROM audit_log WHERE action = $1"#,
        action
    )
    .fetch_one(pool)
    .await
    .unwrap();
    (r.entries, r.items)
}

#[tokio::test]
async fn keyset_pages_walk_every_pending_row_once_oldest_first() {
    let db = testkit::fresh_db().await;
    seed(&db.pool, 120, "order.created", "pending", 30).await;
    seed(&db.pool, 10, "order.created", "published", 30).await;
    let src = native(&db.pool);
    let f = Filter::default();
    let (mut seen, mut after, mut pages) = (Vec::new(), None, 0);
    loop {
        let (rows, next) = query::list(&src, &f, after.as_deref(), 50).await.unwrap();
        pages += 1;
        seen.extend(rows.into_iter().map(|r| (r.created_at, r.id.parse::<i64>().unwrap())));
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 120);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "pages are oldest first with no duplicates");
}

#[tokio::test]
async fn next_then_previous_gives_back_the_same_outbox_rows_in_either_order() {
    let db = testkit::fresh_db().await;
    seed(&db.pool, 120, "order.created", "pending", 30).await;
    seed(&db.pool, 120, "order.created", "published", 30).await;
    let src = native(&db.pool);
    // Pending rows are listed oldest first, published ones newest first.
    for bucket in [Bucket::Pending, Bucket::Published] {
        let f = Filter { bucket, ..Default::default() };
        let ids = |p: &query::Page| p.rows.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
        let first = query::page(&src, &f, At::Start, 50).await.unwrap();
        assert!(first.prev.is_none());
        let second = query::page(&src, &f, At::After(first.next.as_deref().unwrap()), 50).await.unwrap();
        let third = query::page(&src, &f, At::After(second.next.as_deref().unwrap()), 50).await.unwrap();
        assert_eq!((third.rows.len(), third.next.as_deref()), (20, None), "{bucket:?}");

        let back = query::page(&src, &f, At::Before(third.prev.as_deref().unwrap()), 50).await.unwrap();
        assert_eq!(ids(&back), ids(&second), "{bucket:?}: the same rows in the same order");
        assert_eq!(back.next, second.next);
        let back = query::page(&src, &f, At::Before(back.prev.as_deref().unwrap()), 50).await.unwrap();
        assert_eq!(ids(&back), ids(&first), "{bucket:?}");
        assert!(back.prev.is_none(), "{bucket:?}: it knows it is the first page");
    }
}

#[tokio::test]
async fn each_filter_narrows_the_list() {
    let db = testkit::fresh_db().await;
    seed(&db.pool, 5, "order.created", "pending", 1).await;
    seed(&db.pool, 3, "order.paid", "pending", 120).await;
    seed(&db.pool, 2, "order.paid", "failed", 5).await;
    let src = native(&db.pool);
    let n = |f: Filter| {
        let src = src.clone();
        async move { query::count(&src, &f).await.unwrap().n }
    };
    assert_eq!(n(Filter::default()).await, 8);
    assert_eq!(n(Filter { event_type: Some("order.paid".into()), ..Default::default() }).await, 3);
    assert_eq!(n(Filter { routing_key: Some("orders.order.created".into()), ..Default::default() }).await, 5);
    assert_eq!(
        n(Filter { bucket: Bucket::Stuck, ..Default::default() }).await,
        3,
        "pending for 2 h > 10 min threshold"
    );
    assert_eq!(n(Filter { bucket: Bucket::Failed, error: Some("no_route".into()), ..Default::default() }).await, 2);
    assert_eq!(n(Filter { payload: Some("\"order\":3}".into()), ..Default::default() }).await, 2);
    assert_eq!(n(Filter { older_than_mins: Some(60), ..Default::default() }).await, 3);
    assert_eq!(n(Filter { newer_than_mins: Some(60), ..Default::default() }).await, 5);
    let h = query::health(&src).await.unwrap();
    assert!(h.oldest_pending.unwrap() < chrono::Utc::now() - chrono::Duration::minutes(110));
}

#[tokio::test]
async fn counts_stop_at_the_cap_and_say_so() {
    let db = testkit::fresh_db().await;
    seed(&db.pool, query::COUNT_CAP + 5, "bulk", "pending", 1).await;
    let c = query::count(&native(&db.pool), &Filter::default()).await.unwrap();
    assert!(c.capped);
    assert_eq!(c.n, query::COUNT_CAP);
}

#[tokio::test]
async fn retrying_picked_rows_resets_them_and_is_audited_once() {
    let db = testkit::fresh_db().await;
    seed(&db.pool, 3, "order.paid", "failed", 5).await;
    let src = native(&db.pool);
    let ids: Vec<String> = sqlx::query_scalar!(r#"SELECT id::text AS "id!" FROM outbox ORDER BY id LIMIT 2"#)
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let p = op();
    let n = actions::act_on_ids(
        &db.pool,
        &src,
        RowAction::Retry,
        &ids,
        None,
        &Actor { principal: &p, ip: Some("10.1.1.1") },
    )
    .await
    .unwrap();
    assert_eq!(n, 2);
    let pending = count!(
        &db.pool,
        "SELECT count(*) FROM outbox WHERE status = 'pending' AND attempts = 0 AND last_error IS NULL AND next_attempt_at <= now()"
    );
    assert_eq!(pending, 2);
    assert_eq!(audit_count(&db.pool, "outbox.retry").await, (1, 2));
}

#[tokio::test]
async fn archiving_without_a_reason_is_refused_and_changes_nothing() {
    let db = testkit::fresh_db().await;
    seed(&db.pool, 1, "order.paid", "pending", 5).await;
    let src = native(&db.pool);
    let ids: Vec<String> =
        sqlx::query_scalar!(r#"SELECT id::text AS "id!" FROM outbox"#).fetch_all(&db.pool).await.unwrap();
    let p = op();
    let err =
        actions::act_on_ids(&db.pool, &src, RowAction::Archive, &ids, Some("  "), &Actor { principal: &p, ip: None })
            .await
            .unwrap_err();
    assert!(matches!(err, ActionError::Invalid(_)));
    assert_eq!(audit_count(&db.pool, "outbox.archive").await.0, 0);
    let archived: i64 = count!(&db.pool, "SELECT count(*) FROM outbox WHERE status = 'archived'");
    assert_eq!(archived, 0);
}

#[tokio::test]
async fn a_bulk_action_acts_on_the_frozen_set_only_and_only_once() {
    let db = testkit::fresh_db().await;
    seed(&db.pool, 40, "order.paid", "failed", 5).await;
    seed(&db.pool, 7, "order.created", "failed", 5).await;
    let src = native(&db.pool);
    let all = vec![src.clone()];
    let f = Filter { bucket: Bucket::Failed, event_type: Some("order.paid".into()), ..Default::default() };
    let p = op();
    let frozen =
        actions::freeze(&db.pool, &src, &f, RowAction::Archive, Some("poison: renamed field"), &p).await.unwrap();
    assert_eq!(frozen.count, 40);
    // A row that starts matching after the freeze is not part of the set.
    seed(&db.pool, 1, "order.paid", "failed", 1).await;
    let actor = Actor { principal: &p, ip: Some("10.0.0.9") };
    let n = actions::execute(&db.pool, &all, frozen.selection_id, &actor).await.unwrap();
    assert_eq!(n, 40);
    let left: i64 = count!(&db.pool, "SELECT count(*) FROM outbox WHERE status = 'failed'");
    assert_eq!(left, 8, "7 of another type and the late row stay failed");
    let again = actions::execute(&db.pool, &all, frozen.selection_id, &actor).await.unwrap_err();
    assert!(matches!(again, ActionError::SelectionGone));
    assert_eq!(audit_count(&db.pool, "outbox.archive").await, (1, 40));
}

fn seed_mapping(table: &str) -> MappedOutbox {
    MappedOutbox {
        name: "legacy".into(),
        database_url: None,
        table: table.into(),
        id_column: "id".into(),
        event_id_column: "evento_id".into(),
        type_column: "tipo".into(),
        routing_key_column: "clave".into(),
        exchange_column: None,
        payload_column: "carga".into(),
        created_at_column: "creado".into(),
        published_flag_column: Some("publicado".into()),
        published_at_column: None,
        attempts_column: Some("intentos".into()),
        last_error_column: Some("error".into()),
        stuck_after_secs: 60,
        ..MappedOutbox::default()
    }
}

async fn legacy_table(pool: &PgPool) {
    // Runtime-checked: a service's own table, made by this test (not in Revenant's migrations).
    sqlx::query(
        "CREATE TABLE public.outbox_events (id bigserial PRIMARY KEY, evento_id uuid NOT NULL DEFAULT gen_random_uuid(),
         tipo text NOT NULL, clave text NOT NULL, carga jsonb NOT NULL, creado timestamp NOT NULL DEFAULT now(),
         publicado boolean NOT NULL DEFAULT false, intentos int NOT NULL DEFAULT 0, error text)",
    )
    .execute(pool)
    .await
    .unwrap();
    // Runtime-checked: the test-made table above.
    sqlx::query(
        "INSERT INTO public.outbox_events (tipo, clave, carga, creado, publicado, intentos, error)
         VALUES ('pedido.creado', 'pedidos', '{\"n\":1}', now() - interval '2 hours', false, 5, 'timeout'),
                ('pedido.creado', 'pedidos', '{\"n\":2}', now(), false, 0, NULL),
                ('pedido.pagado', 'pedidos', '{\"n\":3}', now(), true, 1, NULL)",
    )
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn an_existing_outbox_table_is_read_through_its_mapping() {
    let db = testkit::fresh_db().await;
    legacy_table(&db.pool).await;
    let m = seed_mapping("public.outbox_events");
    let src = Source {
        name: "legacy".into(),
        pool: db.pool.clone(),
        cols: Cols::mapped(&db.pool, &m).await.unwrap(),
        stuck_after: std::time::Duration::from_secs(60),
        stuck_attempts: 3,
        relay: false,
        poll: std::time::Duration::from_millis(250),
        capture: Default::default(),
        database_url: None,
    };
    let (rows, _) = query::list(&src, &Filter::default(), None, 50).await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].event_type, "pedido.creado");
    assert_eq!(rows[0].attempts, 5);
    assert_eq!(query::count(&src, &Filter { bucket: Bucket::Stuck, ..Default::default() }).await.unwrap().n, 1);
    assert_eq!(query::count(&src, &Filter { bucket: Bucket::Published, ..Default::default() }).await.unwrap().n, 1);
    let d = query::detail(&src, &rows[0].id).await.unwrap().unwrap();
    assert_eq!(d.payload, br#"{"n": 1}"#.to_vec());
    let p = op();
    let n = actions::act_on_ids(
        &db.pool,
        &src,
        RowAction::Retry,
        &[rows[0].id.clone()],
        None,
        &Actor { principal: &p, ip: None },
    )
    .await
    .unwrap();
    assert_eq!(n, 1);
    // Runtime-checked: the test-made service table.
    let (att, err): (i32, Option<String>) =
        sqlx::query_as("SELECT intentos, error FROM public.outbox_events WHERE id = $1::bigint")
            .bind(rows[0].id.parse::<i64>().unwrap())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((att, err), (0, None));
}

#[tokio::test]
async fn a_mapping_that_names_a_missing_column_is_refused_by_name() {
    let db = testkit::fresh_db().await;
    legacy_table(&db.pool).await;
    let mut m = seed_mapping("outbox_events");
    m.type_column = "kind".into();
    let err = Cols::mapped(&db.pool, &m).await.unwrap_err().to_string();
    assert_eq!(err, "column `kind` (set as type_column) does not exist in table `outbox_events`");
    m.table = "no_such_table".into();
    let err = Cols::mapped(&db.pool, &m).await.unwrap_err().to_string();
    assert!(err.contains("`no_such_table` does not exist"), "{err}");
    let _ = sources::NATIVE;
}

#[tokio::test]
async fn a_row_is_found_by_its_event_id_in_any_state_and_a_foreign_id_finds_nothing() {
    let db = testkit::fresh_db().await;
    seed(&db.pool, 1, "order.created", "published", 5).await;
    seed(&db.pool, 1, "order.paid", "pending", 1).await;
    let src = native(&db.pool);
    let published = sqlx::query_scalar!("SELECT event_id::text AS \"e!\" FROM outbox WHERE status = 'published'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let row = query::by_event_id(&src, &published).await.unwrap().expect("the published row");
    assert_eq!((row.event_type.as_str(), row.status.as_str()), ("order.created", "published"));
    assert!(query::by_event_id(&src, "not-a-uuid").await.unwrap().is_none(), "an id of another shape is no match");
    assert!(query::by_event_id(&src, &uuid::Uuid::new_v4().to_string()).await.unwrap().is_none());

    // A mapped table, its event id column of its own type.
    legacy_table(&db.pool).await;
    let legacy = Source {
        name: "legacy".into(),
        cols: Cols::mapped(&db.pool, &seed_mapping("public.outbox_events")).await.unwrap(),
        ..native(&db.pool)
    };
    // Runtime-checked: the test-made service table.
    let evento: String =
        sqlx::query_scalar("SELECT evento_id::text FROM public.outbox_events WHERE tipo = 'pedido.pagado'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let row = query::by_event_id(&legacy, &evento).await.unwrap().expect("the mapped row");
    assert_eq!(row.event_type, "pedido.pagado");
}
