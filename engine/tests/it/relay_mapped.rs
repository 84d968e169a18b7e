//! Relaying a service's own outbox table in another database (`relay = true`): published and
//! marked the table's way with its own event ids, failures kept in `revenant.relay_state`
//! and shown by the console, retry and archive, and two relays on one table.

use std::{collections::HashMap, sync::Arc, time::Duration};

use engine::{
    auth::{Principal, Role},
    outbox::relay::{self, Relayed},
    settings::{MappedOutbox, RelaySettings},
    sources::{
        self, Source,
        actions::{self, Actor},
        query::{self, Bucket, Filter},
    },
};
use lapin::{
    Channel, Connection,
    options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions},
    types::FieldTable,
};
use sqlx::PgPool;
use testkit::{Doomed, TestDb, amqp_url, blank_db, count_until, eventually, fresh_db, unique};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use types::RowAction;

fn cfg() -> RelaySettings {
    RelaySettings { mark_batch: 32, ..super::relay::cfg() }
}

/// The service's table as its SQLAlchemy model declares it (issue 14's example).
async fn service_table(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE outbox_events (id serial PRIMARY KEY, evento_id varchar(64) UNIQUE NOT NULL,
            tipo varchar(100) NOT NULL, routing_key varchar(255) NOT NULL, payload text NOT NULL,
            criado_em timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
            publicado boolean NOT NULL DEFAULT false, publicado_em timestamp);
         CREATE INDEX outbox_events_pendientes ON outbox_events (id) WHERE NOT publicado;",
    )
    .execute(pool)
    .await
    .unwrap();
}

async fn insert_rows(pool: &PgPool, routing_key: &str, n: i64) -> Vec<String> {
    // Runtime-checked: the service's own table, made by this test.
    sqlx::query_scalar(
        "INSERT INTO outbox_events (evento_id, tipo, routing_key, payload)
         SELECT 'ev-' || md5(random()::text || g), 'pedido.creado', $1, '{\"pedido\":' || g || '}'
           FROM generate_series(1, $2) g
         RETURNING evento_id",
    )
    .bind(routing_key)
    .bind(n)
    .fetch_all(pool)
    .await
    .unwrap()
}

fn mapping(url: &str) -> MappedOutbox {
    MappedOutbox {
        name: "pedidos".into(),
        database_url: Some(url.into()),
        relay: true,
        table: "outbox_events".into(),
        id_column: "id".into(),
        event_id_column: "evento_id".into(),
        type_column: "tipo".into(),
        routing_key_column: "routing_key".into(),
        payload_column: "payload".into(),
        created_at_column: "criado_em".into(),
        published_flag_column: Some("publicado".into()),
        published_at_column: Some("publicado_em".into()),
        poll_ms: 50,
        ..MappedOutbox::default()
    }
}

struct Setup {
    /// The queue: deleted when the setup goes, a failing test's too.
    _names: Doomed,
    own: TestDb,
    service: TestDb,
    source: Source,
    conn: Connection,
    ch: Channel,
    queue: String,
}

async fn setup() -> Setup {
    let own = fresh_db().await;
    let service = blank_db().await;
    service_table(&service.pool).await;
    let source = sources::open(&mapping(&service.url), &own.pool).await.unwrap();
    let conn = engine::amqp::connect(&amqp_url(), "revenant-test").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let names = Doomed::new();
    let queue = names.queue("test.mapped.q");
    ch.queue_declare(queue.as_str().into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    Setup { _names: names, own, service, source, conn, ch, queue }
}

impl Setup {
    /// message id → copies of every message now in the queue.
    async fn drain(&self) -> HashMap<String, usize> {
        let mut seen = HashMap::new();
        let opts = BasicGetOptions { no_ack: true };
        while let Some(m) = self.ch.basic_get(self.queue.as_str().into(), opts).await.unwrap() {
            let id = m.properties.message_id().as_ref().map(|s| s.to_string()).unwrap_or_default();
            *seen.entry(id).or_default() += 1;
        }
        seen
    }

    /// Closes the connections; the queue goes with the names.
    async fn done(self) {
        let _ = self.conn.close(200, "test done".into()).await;
        self.source.pool.close().await;
    }
}

struct Running {
    stop: CancellationToken,
    handle: JoinHandle<anyhow::Result<()>>,
    stats: Arc<engine::outbox::stats::RelayStats>,
}

fn start(own: &PgPool, source: &Source) -> Running {
    let stop = CancellationToken::new();
    let r = Relayed { source: source.clone(), stats: Arc::default() };
    let stats = r.stats.clone();
    let fut = relay::run_all(own.clone(), amqp_url(), cfg(), Arc::default(), vec![r], stop.clone());
    Running { stop, handle: tokio::spawn(fut), stats }
}

impl Running {
    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle).await.expect("stops").expect("no panic").unwrap();
    }
}

async fn scalar(pool: &PgPool, sql: &'static str) -> i64 {
    // Runtime-checked: polls the test-made service table with each caller's count query.
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn a_service_table_in_another_database_is_published_and_marked_its_way_with_its_own_event_ids() {
    let s = setup().await;
    let ids = insert_rows(&s.service.pool, &s.queue, 500).await;
    let relay = start(&s.own.pool, &s.source);
    count_until("mapped relay", &s.service.pool, "SELECT count(*) FROM outbox_events WHERE publicado", |c| c == 500)
        .await;
    relay.stop().await;
    let unstamped = scalar(&s.service.pool, "SELECT count(*) FROM outbox_events WHERE publicado_em IS NULL").await;
    assert_eq!(unstamped, 0, "every published row has publicado_em");
    let skew: i64 = scalar(
        &s.service.pool,
        "SELECT count(*) FROM outbox_events WHERE abs(extract(epoch FROM publicado_em - (now() AT TIME ZONE 'UTC'))) > 300",
    )
    .await;
    assert_eq!(skew, 0, "publicado_em is written in UTC, as the column's other timestamps");
    let seen = s.drain().await;
    assert_eq!(seen.len(), 500, "one message per row");
    assert!(seen.values().all(|c| *c == 1), "no row was published twice");
    for id in &ids {
        assert!(seen.contains_key(id), "message_id {id} = the row's evento_id");
    }
    let state = scalar(&s.service.pool, "SELECT count(*) FROM revenant.relay_state").await;
    assert_eq!(state, 0, "rows that published at the first try leave no state behind");
    s.done().await;
}

#[tokio::test]
async fn an_unroutable_row_fails_with_the_brokers_reason_and_the_console_retries_and_archives_it() {
    let s = setup().await;
    insert_rows(&s.service.pool, "no.such.queue.anywhere", 1).await;
    insert_rows(&s.service.pool, &s.queue, 3).await;
    let relay = start(&s.own.pool, &s.source);
    count_until(
        "mapped relay",
        &s.service.pool,
        "SELECT count(*) FROM revenant.relay_state WHERE status = 'failed'",
        |c| c == 1,
    )
    .await;
    count_until("mapped relay", &s.service.pool, "SELECT count(*) FROM outbox_events WHERE publicado", |c| c == 3)
        .await;
    let failed = Filter { bucket: Bucket::Failed, ..Filter::default() };
    let (rows, _) = query::list(&s.source, &failed, None, 50).await.unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.status, "failed");
    assert_eq!(row.attempts, 3, "max_attempts tries, counted in revenant.relay_state");
    let reason = row.last_error.clone().unwrap_or_default();
    assert!(reason.contains("NO_ROUTE"), "the broker's reason is kept: {reason}");
    let pending = query::count(&s.source, &Filter::default()).await.unwrap();
    assert_eq!(pending.n, 0, "a failed row is not counted as pending");

    relay.stop().await;
    let p = Principal { username: "olga".into(), role: Role::Operator };
    let actor = Actor { principal: &p, ip: Some("10.0.0.9") };
    let n = actions::act_on_ids(&s.own.pool, &s.source, RowAction::Retry, std::slice::from_ref(&row.id), None, &actor)
        .await
        .unwrap();
    assert_eq!(n, 1, "retry applies to the failed row");
    let (rows, _) = query::list(&s.source, &Filter::default(), None, 50).await.unwrap();
    assert_eq!(rows.len(), 1, "retried: pending again");
    assert_eq!((rows[0].attempts, rows[0].last_error.as_deref()), (0, None), "its attempts and error are reset");
    // The relay tries it again, and it fails again after max_attempts tries.
    let relay = start(&s.own.pool, &s.source);
    count_until(
        "mapped relay",
        &s.service.pool,
        "SELECT count(*) FROM revenant.relay_state WHERE status = 'failed'",
        |c| c == 1,
    )
    .await;
    relay.stop().await;
    let n = actions::act_on_ids(
        &s.own.pool,
        &s.source,
        RowAction::Archive,
        std::slice::from_ref(&row.id),
        Some("route removed"),
        &actor,
    )
    .await
    .unwrap();
    assert_eq!(n, 1);
    let archived = Filter { bucket: Bucket::Archived, ..Filter::default() };
    let (rows, _) = query::list(&s.source, &archived, None, 50).await.unwrap();
    assert_eq!(rows.len(), 1);
    let detail = query::detail(&s.source, &rows[0].id).await.unwrap().unwrap();
    assert_eq!(detail.archived_reason.as_deref(), Some("route removed"));
    let audited = scalar(
        &s.own.pool,
        "SELECT count(*) FROM audit_log WHERE action IN ('outbox.retry', 'outbox.archive') AND target = 'outbox source pedidos'",
    )
    .await;
    assert_eq!(audited, 2, "both actions are audited in Revenant's database");
    s.done().await;
}

#[tokio::test]
async fn two_relays_on_one_table_publish_each_row_once_and_the_standby_takes_over() {
    let s = setup().await;
    let mut ids = insert_rows(&s.service.pool, &s.queue, 1000).await;
    let a = start(&s.own.pool, &s.source);
    let b = start(&s.own.pool, &s.source);
    count_until("mapped relay", &s.service.pool, "SELECT count(*) FROM outbox_events WHERE publicado", |c| c == 1000)
        .await;
    let active = |r: &Running| r.stats.active.load(std::sync::atomic::Ordering::Relaxed);
    assert!(active(&a) ^ active(&b), "exactly one relay publishes the table");
    let (holder, standby) = if active(&a) { (a, b) } else { (b, a) };
    holder.stop().await;
    ids.extend(insert_rows(&s.service.pool, &s.queue, 200).await);
    count_until("mapped relay", &s.service.pool, "SELECT count(*) FROM outbox_events WHERE publicado", |c| c == 1200)
        .await;
    assert!(standby.stats.active.load(std::sync::atomic::Ordering::Relaxed), "the standby took over");
    standby.stop().await;
    let seen = s.drain().await;
    assert_eq!(seen.len(), 1200);
    let twice: usize = seen.values().map(|c| c - 1).sum();
    assert_eq!(twice, 0, "in normal operation no row is published twice");
    assert!(ids.iter().all(|id| seen.contains_key(id)));
    s.done().await;
}

/// Columns, indexes and triggers of `revenant.outbox`, to compare two databases.
async fn outbox_shape(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar!(
        r#"SELECT 'column ' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '') AS "line!"
             FROM information_schema.columns WHERE table_schema = 'revenant' AND table_name = 'outbox'
           UNION ALL SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'revenant' AND tablename = 'outbox'
           UNION ALL SELECT 'trigger ' || tgname FROM pg_trigger WHERE tgrelid = 'revenant.outbox'::regclass AND NOT tgisinternal
           ORDER BY 1"#,
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn outbox_install_puts_revenants_schema_in_a_service_database_and_the_relay_publishes_it() {
    use engine::outbox::{
        install::{Installed, has_insert_notify, install},
        store::{self, NewEvent},
    };
    let own = fresh_db().await;
    let service = blank_db().await;
    assert_eq!(install(&service.pool).await.unwrap(), Installed::Created);
    assert_eq!(install(&service.pool).await.unwrap(), Installed::AlreadyThere, "a second install changes nothing");
    assert_eq!(outbox_shape(&service.pool).await, outbox_shape(&own.pool).await, "the same schema as Revenant's own");
    assert!(!has_insert_notify(&service.pool).await.unwrap(), "nothing NOTIFYs on the service's insert");
    // An outbox installed by an earlier version: its insert trigger NOTIFYs. Install drops it.
    sqlx::raw_sql(
        "CREATE TRIGGER outbox_notify AFTER INSERT ON revenant.outbox FOR EACH STATEMENT EXECUTE FUNCTION revenant.outbox_notify()",
    )
    .execute(&service.pool)
    .await
    .unwrap();
    assert!(has_insert_notify(&service.pool).await.unwrap());
    assert_eq!(install(&service.pool).await.unwrap(), Installed::Upgraded);
    assert!(!has_insert_notify(&service.pool).await.unwrap(), "the upgrade dropped the insert trigger");
    // An outbox installed before the commit-stream relay: install adds its column.
    sqlx::raw_sql("ALTER TABLE revenant.outbox DROP COLUMN stream_lsn").execute(&service.pool).await.unwrap();
    assert!(!engine::outbox::install::has_stream_held(&service.pool).await.unwrap());
    assert_eq!(install(&service.pool).await.unwrap(), Installed::Upgraded);
    assert!(engine::outbox::install::has_stream_held(&service.pool).await.unwrap());
    assert_eq!(
        outbox_shape(&service.pool).await,
        outbox_shape(&own.pool).await,
        "the same schema as Revenant's own again"
    );
    let m = MappedOutbox {
        name: "billing".into(),
        database_url: Some(service.url.clone()),
        native: true,
        relay: true,
        ..MappedOutbox::default()
    };
    let source = sources::open(&m, &own.pool).await.unwrap();
    assert!(source.native());
    let conn = engine::amqp::connect(&amqp_url(), "revenant-test").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let queue = unique("test.installed.q");
    ch.queue_declare(queue.as_str().into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    // The service writes in its own transaction, in its own database.
    let mut tx = service.pool.begin().await.unwrap();
    let id =
        store::enqueue(&mut *tx, &NewEvent::new("invoice.issued", "", queue.as_str(), b"{}".to_vec())).await.unwrap();
    tx.commit().await.unwrap();
    let relay = start(&own.pool, &source);
    count_until(
        "mapped relay",
        &service.pool,
        "SELECT count(*) FROM revenant.outbox WHERE status = 'published'",
        |c| c == 1,
    )
    .await;
    relay.stop().await;
    let got = ch.basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true }).await.unwrap().expect("published");
    assert_eq!(got.properties.message_id().as_ref().map(|s| s.to_string()), Some(id.to_string()));
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await.unwrap();
    let _ = conn.close(200, "test done".into()).await;
    source.pool.close().await;
}

#[tokio::test]
async fn a_relayed_table_without_an_integer_id_or_with_non_json_headers_is_refused_by_name() {
    let own = fresh_db().await;
    sqlx::raw_sql(
        "CREATE TABLE text_ids (id text PRIMARY KEY, evento_id text, tipo text, routing_key text, payload text,
            criado_em timestamptz, publicado boolean, cabeceras text)",
    )
    .execute(&own.pool)
    .await
    .unwrap();
    let m =
        MappedOutbox { database_url: None, table: "text_ids".into(), published_at_column: None, ..mapping("unused") };
    let err = format!("{:#}", sources::open(&m, &own.pool).await.err().expect("refused"));
    assert!(err.contains("outbox source `pedidos`") && err.contains("`id_column` = `id`"), "{err}");
    let m = MappedOutbox { relay: false, headers_column: Some("cabeceras".into()), ..m };
    let err = format!("{:#}", sources::open(&m, &own.pool).await.err().expect("refused"));
    assert!(err.contains("headers_column") && err.contains("json or jsonb"), "{err}");
}

#[tokio::test]
async fn the_outbox_page_warns_when_finding_pending_rows_scans_a_large_table_and_not_once_indexed() {
    let own = fresh_db().await;
    service_table(&own.pool).await;
    sqlx::raw_sql(
        "DROP INDEX outbox_events_pendientes;
         INSERT INTO outbox_events (evento_id, tipo, routing_key, payload, publicado)
         SELECT 'ev-' || g, 't', 'q', '{}', g % 100 <> 0 FROM generate_series(1, 120000) g;
         ANALYZE outbox_events;",
    )
    .execute(&own.pool)
    .await
    .unwrap();
    let src = sources::open(&MappedOutbox { database_url: None, ..mapping("unused") }, &own.pool).await.unwrap();
    let warning = query::pending_scan_warning(&src).await.unwrap().expect("a warning");
    assert!(warning.contains("CREATE INDEX") && warning.contains("\"publicado\""), "{warning}");
    sqlx::raw_sql("CREATE INDEX ON outbox_events (id) WHERE NOT publicado; ANALYZE outbox_events;")
        .execute(&own.pool)
        .await
        .unwrap();
    assert_eq!(query::pending_scan_warning(&src).await.unwrap(), None, "indexed: no warning");
}

#[tokio::test]
async fn a_mapped_relay_reconnects_after_the_broker_drops_its_connection_and_keeps_publishing() {
    let s = setup().await;
    let mut ids = insert_rows(&s.service.pool, &s.queue, 50).await;
    let relay = start(&s.own.pool, &s.source);
    count_until("mapped relay", &s.service.pool, "SELECT count(*) FROM outbox_events WHERE publicado", |c| c == 50)
        .await;
    let instance = sqlx::query_scalar!("SELECT instance FROM heartbeats WHERE role = 'relay'")
        .fetch_one(&s.own.pool)
        .await
        .unwrap();
    let killed = eventually("the mapped source's connection listed and closed", Duration::from_secs(10), async || {
        let n = super::relay::kill_connections(&format!("revenant-relay {instance} source=pedidos")).await;
        if n > 0 { Ok(n) } else { Err(n) }
    })
    .await;
    assert_eq!(killed, 1, "the mapped source's own connection was found and closed");
    ids.extend(insert_rows(&s.service.pool, &s.queue, 50).await);
    count_until("mapped relay", &s.service.pool, "SELECT count(*) FROM outbox_events WHERE publicado", |c| c == 100)
        .await;
    relay.stop().await;
    let seen = s.drain().await;
    assert!(ids.iter().all(|id| seen.contains_key(id)), "every row reached the queue");
    s.done().await;
}
