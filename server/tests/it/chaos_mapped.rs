//! `kill -9` of `revenant relay` while it publishes a service's own outbox table (a mapped
//! source with `relay = true`, in another database), with a second relay standing by: the
//! standby takes the table's lock, every row reaches the queue with its own event id, every
//! row is marked the table's way, and duplicates stay within the documented bound.

use std::time::Duration;

use lapin::options::QueueDeleteOptions;

use super::chaos::{BOUND, amqp, assert_all_once_within_bound, declare, drain_ids, kill9, spawn};

async fn published(pool: &sqlx::PgPool) -> i64 {
    // Runtime-checked: the service's own table, made by this test.
    sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE publicado AND publicado_em IS NOT NULL")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_mapped_table_relay_killed_mid_stream_loses_no_row_and_its_standby_takes_over() {
    let own = testkit::fresh_db().await;
    let service = testkit::blank_db().await;
    sqlx::raw_sql(
        "CREATE TABLE outbox_events (id serial PRIMARY KEY, evento_id varchar(64) UNIQUE NOT NULL,
            tipo varchar(100) NOT NULL, routing_key varchar(255) NOT NULL, payload text NOT NULL,
            criado_em timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
            publicado boolean NOT NULL DEFAULT false, publicado_em timestamp)",
    )
    .execute(&service.pool)
    .await
    .unwrap();
    let conn = amqp().await;
    let queue = testkit::unique("chaos.mapped");
    declare(&conn, &queue).await;
    let n: i64 = 5_000;
    // Runtime-checked: the service's own table, made by this test.
    let ids: Vec<String> = sqlx::query_scalar(
        "INSERT INTO outbox_events (evento_id, tipo, routing_key, payload)
         SELECT 'ev-' || md5(random()::text || g), 'pedido.creado', $1, '{\"pedido\":' || g || '}'
           FROM generate_series(1, $2) g RETURNING evento_id",
    )
    .bind(&queue)
    .bind(n)
    .fetch_all(&service.pool)
    .await
    .unwrap();
    // The README's mapped-source example, plus relay = true.
    let config = std::env::temp_dir().join(format!("{}.toml", testkit::unique("revenant-chaos-mapped")));
    std::fs::write(
        &config,
        format!(
            "[[outbox.sources]]\nname = \"pedidos\"\ndatabase_url = \"{}\"\nrelay = true\ntable = \"public.outbox_events\"\n\
             id_column = \"id\"\nevent_id_column = \"evento_id\"\ntype_column = \"tipo\"\nrouting_key_column = \"routing_key\"\n\
             payload_column = \"payload\"\ncreated_at_column = \"criado_em\"\npublished_flag_column = \"publicado\"\n\
             published_at_column = \"publicado_em\"\npoll_ms = 50\n",
            service.url
        ),
    )
    .unwrap();
    let path = config.to_string_lossy().to_string();
    let extra = [("REVENANT_CONFIG", path.as_str())];
    let mut first = spawn("relay", &own.url, &extra);
    let pool = service.pool.clone();
    testkit::until("some rows published", Duration::from_secs(60), async || published(&pool).await >= n / 8).await;
    let mut standby = spawn("relay", &own.url, &extra);
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill9(&mut first);
    let at_kill = published(&service.pool).await;
    assert!(at_kill < n, "the relay finished before it was killed; the test proves nothing");
    testkit::until("every row published by the standby", Duration::from_secs(120), async || {
        published(&pool).await == n
    })
    .await;
    standby.kill().ok();
    standby.wait().ok();
    let seen = drain_ids(&conn, &queue, ids.len()).await;
    let duplicates: usize = seen.values().map(|c| c - 1).sum();
    println!(
        "mapped relay crash run: rows={n} published_at_kill={at_kill} lost=0 duplicates={duplicates} bound={BOUND}"
    );
    assert_all_once_within_bound(&ids, &seen, BOUND);
    let strangers: Vec<&String> = seen.keys().filter(|id| !ids.contains(id)).collect();
    assert!(strangers.is_empty(), "every message_id is a row's evento_id: {:?}", strangers.first());
    let ch = conn.create_channel().await.unwrap();
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await.ok();
    let _ = std::fs::remove_file(&config);
}
