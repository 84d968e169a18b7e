//! Failure paths with the real binary: `kill -9` a relay or an ingester mid-stream, and
//! restart RabbitMQ under a running relay; event ids prove nothing was lost, and the number
//! of duplicates stays within the documented bound.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

const WINDOW: usize = 16;
const MARK_BATCH: usize = 32;
/// docs/OUTBOX.md: a kill -9 re-sends at most the window plus the unflushed marks.
pub(crate) const BOUND: usize = WINDOW + MARK_BATCH - 1;

/// Events per crash run: 20 000 in the test command; a longer run is
/// `CHAOS_EVENTS=200000 cargo test -p server --test it chaos -- --nocapture`.
fn events() -> i64 {
    std::env::var("CHAOS_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

pub(crate) fn spawn(role: &str, db_url: &str, extra: &[(&str, &str)]) -> Running {
    spawn_on(role, db_url, ("AMQP_URL", &testkit::amqp_url()), extra)
}

/// Where a spawned process's logs go: nowhere, or with `CHAOS_LOG=FILE` appended to FILE
/// (to see why a failure path test failed: `CHAOS_LOG=/tmp/chaos.log RUST_LOG=info …`).
fn output() -> Stdio {
    match std::env::var("CHAOS_LOG") {
        Ok(path) => {
            std::fs::OpenOptions::new().create(true).append(true).open(path).map_or_else(|_| Stdio::null(), Stdio::from)
        }
        Err(_) => Stdio::null(),
    }
}

/// A spawned `revenant`, killed when dropped: also when the test fails midway, since a
/// stray process would go on holding its connections, queues and database.
pub(crate) struct Running(Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// [`spawn`] with the broker given as `(variable, value)`: `AMQP_URL` or `AMQP_URLS`.
pub(crate) fn spawn_on(role: &str, db_url: &str, broker: (&str, &str), extra: &[(&str, &str)]) -> Running {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_revenant"));
    cmd.arg(role)
        .env("DATABASE_URL", db_url)
        .env_remove("AMQP_URL")
        .env_remove("AMQP_URLS")
        .env(broker.0, broker.1)
        .env("REVENANT_RELAY_WINDOW", WINDOW.to_string())
        .env("REVENANT_RELAY_MARK_BATCH", MARK_BATCH.to_string())
        .env("REVENANT_RELAY_LEASE_SECS", "3")
        .env("REVENANT_RELAY_CONFIRM_TIMEOUT_MS", "2000")
        .env("REVENANT_RELAY_POLL_MS", "100")
        .env("REVENANT_RELAY_BACKOFF_BASE_MS", "100")
        .env("REVENANT_RELAY_BACKOFF_MAX_MS", "1000")
        .env_remove("REVENANT_CONFIG")
        .current_dir(std::env::temp_dir())
        .stdout(output())
        .stderr(output());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    Running(cmd.spawn().expect("spawn revenant"))
}

pub(crate) fn kill9(child: &mut Child) {
    // SIGKILL: no graceful shutdown, no final marks, no releases.
    let _ = Command::new("kill").args(["-9", &child.id().to_string()]).status();
    let _ = child.wait();
}

pub(crate) async fn amqp() -> Connection {
    Connection::connect(&testkit::amqp_url(), ConnectionProperties::default()).await.expect("amqp")
}

pub(crate) async fn declare(conn: &Connection, name: &str) {
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(name.into(), QueueDeclareOptions { durable: true, ..Default::default() }, FieldTable::default())
        .await
        .unwrap();
}

/// Reads every message on `queue` until `expected` distinct ids arrived; returns id → copies.
pub(crate) async fn drain_ids(conn: &Connection, queue: &str, expected: usize) -> HashMap<String, usize> {
    let ch = conn.create_channel().await.unwrap();
    let mut consumer = ch
        .basic_consume(queue.into(), "chaos".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(60 + expected as u64 / 200);
    while seen.len() < expected {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Some(Ok(d))) = tokio::time::timeout(left.max(Duration::from_millis(1)), consumer.next()).await else {
            break;
        };
        let id = d.properties.message_id().as_ref().map(|s| s.to_string()).unwrap_or_default();
        *seen.entry(id).or_default() += 1;
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    // Anything still queued (late duplicates) counts too.
    while let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::from_millis(500), consumer.next()).await {
        let id = d.properties.message_id().as_ref().map(|s| s.to_string()).unwrap_or_default();
        *seen.entry(id).or_default() += 1;
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    seen
}

async fn enqueue_events(pool: &sqlx::PgPool, queue: &str, n: i64) -> Vec<String> {
    sqlx::query_scalar!(
        r#"INSERT INTO outbox (event_type, exchange, routing_key, payload)
           SELECT 'chaos', '', $1, convert_to('{"n":' || g || '}', 'UTF8') FROM generate_series(1, $2::bigint) g
           RETURNING event_id::text AS "id!""#,
        queue,
        n
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

pub(crate) fn assert_all_once_within_bound(ids: &[String], seen: &HashMap<String, usize>, bound: usize) {
    let missing: Vec<&String> = ids.iter().filter(|id| !seen.contains_key(*id)).collect();
    assert!(missing.is_empty(), "{} events lost, e.g. {:?}", missing.len(), missing.first());
    let duplicates: usize = seen.values().map(|c| c - 1).sum();
    assert!(duplicates <= bound, "{duplicates} duplicates exceed the bound of {bound}");
}

/// Kills a relay once an eighth of `n` events are published, lets a second relay finish, and
/// returns (ids, id → copies, published at the kill).
async fn relay_crash_run(
    n: i64,
    extra: &[(&str, &str)],
) -> (Vec<String>, HashMap<String, usize>, i64, testkit::TestDb) {
    let db = testkit::fresh_db().await;
    let conn = amqp().await;
    let queue = testkit::unique("chaos.relay");
    declare(&conn, &queue).await;
    let ids = enqueue_events(&db.pool, &queue, n).await;
    let mut relay = spawn("relay", &db.url, extra);
    let pool = db.pool.clone();
    testkit::until("some events published", Duration::from_secs(60), async || {
        count!(&pool, "SELECT count(*) FROM outbox WHERE status = 'published'") >= n / 8
    })
    .await;
    kill9(&mut relay);
    let published_at_kill = count!(&db.pool, "SELECT count(*) FROM outbox WHERE status = 'published'");
    assert!(published_at_kill < n, "the relay finished before it was killed; the test proves nothing");
    let mut second = spawn("relay", &db.url, extra);
    testkit::until("every event published", Duration::from_secs(90 + n as u64 / 100), async || {
        count!(&pool, "SELECT count(*) FROM outbox WHERE status = 'published'") == n
    })
    .await;
    second.kill().ok();
    second.wait().ok();
    let seen = drain_ids(&conn, &queue, ids.len()).await;
    let ch = conn.create_channel().await.unwrap();
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await.ok();
    (ids, seen, published_at_kill, db)
}

#[tokio::test]
async fn a_relay_killed_mid_stream_loses_no_event_and_duplicates_at_most_its_window_plus_unflushed_marks() {
    let n = events();
    let (ids, seen, published_at_kill, _db) = relay_crash_run(n, &[]).await;
    let duplicates: usize = seen.values().map(|c| c - 1).sum();
    println!(
        "relay crash run: events={n} published_at_kill={published_at_kill} lost=0 duplicates={duplicates} bound={BOUND}"
    );
    assert_all_once_within_bound(&ids, &seen, BOUND);
}

#[tokio::test]
async fn a_strict_relay_killed_mid_stream_re_sends_at_most_one_event() {
    let n = 2_000;
    let strict = [("REVENANT_RELAY_WINDOW", "1"), ("REVENANT_RELAY_MARK_BATCH", "1")];
    let (ids, seen, published_at_kill, _db) = relay_crash_run(n, &strict).await;
    let duplicates: usize = seen.values().map(|c| c - 1).sum();
    println!(
        "strict relay crash run: events={n} published_at_kill={published_at_kill} duplicates={duplicates} bound=1"
    );
    assert_all_once_within_bound(&ids, &seen, 1);
}

#[tokio::test]
async fn an_ingester_killed_mid_stream_loses_no_dead_letter_and_stores_none_twice() {
    let db = testkit::fresh_db().await;
    let conn = amqp().await;
    let queue = testkit::unique("chaos.dlq");
    declare(&conn, &queue).await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let n = 3000;
    for i in 0..n {
        ch.basic_publish(
            "".into(),
            queue.as_str().into(),
            BasicPublishOptions::default(),
            format!("{{\"n\":{i}}}").as_bytes(),
            BasicProperties::default().with_message_id(format!("dl-{i}").into()).with_delivery_mode(2),
        )
        .await
        .unwrap();
    }
    ch.wait_for_confirms().await.unwrap();
    let extra = [("REVENANT_INGEST_QUEUES", queue.as_str()), ("REVENANT_INGEST_PREFETCH", "100")];
    let mut ingester = spawn("ingest", &db.url, &extra);
    let pool = db.pool.clone();
    testkit::until("some dead letters stored", Duration::from_secs(60), async || {
        count!(&pool, "SELECT count(*) FROM dead_letters") >= 300
    })
    .await;
    kill9(&mut ingester);
    assert!(count!(&db.pool, "SELECT count(*) FROM dead_letters") < n, "finished before the kill");
    let mut second = spawn("ingest", &db.url, &extra);
    testkit::until("every dead letter stored", Duration::from_secs(90), async || {
        count!(&pool, "SELECT count(DISTINCT message_id) FROM dead_letters") == n
    })
    .await;
    second.kill().ok();
    second.wait().ok();
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM dead_letters"), n, "a redelivery was stored twice");
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await.ok();
}

/// Stops and starts the RabbitMQ application under a running relay. It disrupts every
/// other broker test, so it is ignored by default and run alone by scripts/test.
#[tokio::test]
#[ignore = "restarts RabbitMQ; run alone: cargo test -p server --test it -- --ignored"]
async fn a_relay_survives_a_rabbitmq_restart_without_losing_events() {
    let db = testkit::fresh_db().await;
    let queue = testkit::unique("chaos.restart");
    {
        let conn = amqp().await;
        declare(&conn, &queue).await;
        conn.close(200, "declared".into()).await.ok();
    }
    let ids = enqueue_events(&db.pool, &queue, 3000).await;
    let mut relay = spawn("relay", &db.url, &[]);
    let pool = db.pool.clone();
    testkit::until("some events published", Duration::from_secs(60), async || {
        count!(&pool, "SELECT count(*) FROM outbox WHERE status = 'published'") >= 300
    })
    .await;
    assert!(Command::new("rabbitmqctl").args(["-q", "stop_app"]).status().unwrap().success());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(Command::new("rabbitmqctl").args(["-q", "start_app"]).status().unwrap().success());
    testkit::until("every event published after the restart", Duration::from_secs(120), async || {
        count!(&pool, "SELECT count(*) FROM outbox WHERE status = 'published'") == 3000
    })
    .await;
    relay.kill().ok();
    relay.wait().ok();
    let conn = amqp().await;
    let seen = drain_ids(&conn, &queue, ids.len()).await;
    // A restart can lose the confirms of a whole window in flight (those are re-sent); the
    // unflushed marks still commit, PostgreSQL being up.
    assert_all_once_within_bound(&ids, &seen, BOUND);
    let ch = conn.create_channel().await.unwrap();
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await.ok();
}

/// `/readyz` depends on PostgreSQL only: an instance running the relay stays ready while
/// RabbitMQ is stopped (the console is most needed then), and says the broker is lost in
/// `broker` and in `/metrics` (`revenant_relay_connected 0`), then reconnects.
#[tokio::test]
#[ignore = "stops RabbitMQ; run alone: cargo test -p server --test it -- --ignored"]
async fn readyz_stays_ready_without_rabbitmq_and_reports_the_broker_beside_it() {
    let web = crate::harness::spawn_app().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bind = format!("127.0.0.1:{port}");
    let mut relay = spawn(
        "serve",
        &web.db.url,
        &[
            ("REVENANT_BIND", &bind),
            ("REVENANT_INGEST", "false"),
            ("REVENANT_ALERTS", "false"),
            ("REVENANT_REPLAY", "false"),
        ],
    );
    let http = reqwest::Client::new();
    let relay_base = format!("http://{bind}");
    let connected = async || -> Option<bool> {
        let body: serde_json::Value = http.get(format!("{relay_base}/readyz")).send().await.ok()?.json().await.ok()?;
        body["broker"].as_array()?.first()?["connected"].as_bool()
    };
    testkit::until("the relay connected", Duration::from_secs(60), async || connected().await == Some(true)).await;
    assert!(Command::new("rabbitmqctl").args(["-q", "stop_app"]).status().unwrap().success());
    let mut lost = false;
    for _ in 0..50 {
        if connected().await == Some(false) {
            lost = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let during = http.get(format!("{relay_base}/readyz")).send().await.map(|r| r.status()).ok();
    let metrics = http.get(format!("{relay_base}/metrics")).send().await.unwrap().text().await.unwrap();
    let web_status = http.get(format!("{}/readyz", web.base)).send().await.map(|r| r.status()).ok();
    assert!(Command::new("rabbitmqctl").args(["-q", "start_app"]).status().unwrap().success());
    assert!(lost, "readyz reported the relay's lost connection");
    assert_eq!(during, Some(reqwest::StatusCode::OK), "readyz stays 200 without the broker");
    assert!(metrics.contains("revenant_relay_connected 0"), "{metrics}");
    assert_eq!(web_status, Some(reqwest::StatusCode::OK));
    testkit::until("the relay reconnected", Duration::from_secs(60), async || connected().await == Some(true)).await;
    kill9(&mut relay);
}
