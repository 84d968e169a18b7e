//! Relay, ingest and replay each keep working while the node their connection is on stops
//! and starts again; by event id nothing is lost and duplicates stay within the bound.

use std::time::{Duration, Instant};

use engine::replay::{CreatePlan, Selection, Target, plan, progress};
use futures::StreamExt;
use lapin::BasicProperties;
use lapin::options::{BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable};

use super::{
    NODES, connect, connection_nodes, declare_quorum, delete_queue, kills, quorum_state, recoveries, require_cluster,
    stop_nodes_under_load, urls_from,
};
use crate::chaos::{BOUND, assert_all_once_within_bound, drain_ids, spawn_on};

/// Events per relay run: 20 000; `CLUSTER_EVENTS` for a longer run.
fn events() -> i64 {
    std::env::var("CLUSTER_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

/// Every member of the queue is back online after the restarts: it has its quorum again.
async fn assert_quorum_restored(queue: &str) {
    let mut state = quorum_state(queue).await;
    for _ in 0..60 {
        if state.2.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        state = quorum_state(queue).await;
    }
    let (leader, members, online) = state;
    assert_eq!(members.len(), 3, "{queue} has three members: {members:?}");
    assert_eq!(online, members, "every member of {queue} is online again (leader {leader})");
}

/// After the stops, the role's connection is open on a node that did not stop last: it moved.
async fn assert_moved(prefix: &str, stopped_last: usize) {
    let mut on = vec![];
    for _ in 0..40 {
        on = connection_nodes(prefix, stopped_last).await;
        if !on.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(!on.is_empty(), "no `{prefix}` connection is open on the cluster");
    assert!(!on.contains(&NODES[stopped_last].to_string()), "`{prefix}` is still on {}: {on:?}", NODES[stopped_last]);
}

#[tokio::test]
#[ignore = "needs the cluster (scripts/cluster up) and stops its nodes; scripts/test runs it alone"]
async fn cluster_a_relay_keeps_publishing_to_a_quorum_queue_while_its_node_stops() {
    require_cluster().await;
    let db = testkit::fresh_db().await;
    let queue = testkit::unique("cluster.relay");
    // The queue's leader and the relay's first connection are both on rvn1, the node stopped.
    declare_quorum(0, &queue, &[]).await;
    let n = events();
    let ids: Vec<String> = sqlx::query_scalar!(
        r#"INSERT INTO outbox (event_type, exchange, routing_key, payload)
           SELECT 'cluster', '', $1, convert_to('{"n":' || g || '}', 'UTF8') FROM generate_series(1, $2::bigint) g
           RETURNING event_id::text AS "id!""#,
        queue,
        n
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let started = Instant::now();
    let mut relay = spawn_on("relay", &db.url, ("AMQP_URLS", &urls_from(0)), &[("REVENANT_MANAGEMENT_URL", "off")]);
    let pool = db.pool.clone();
    let published = async || count!(&pool, "SELECT count(*) FROM outbox WHERE status = 'published'");
    let stops = stop_nodes_under_load(0, n, BOUND as i64, published).await;
    testkit::until("every event published", Duration::from_secs(180), async || {
        count!(&pool, "SELECT count(*) FROM outbox WHERE status = 'published'") == n
    })
    .await;
    let rate = n as f64 / started.elapsed().as_secs_f64();
    assert_moved("revenant-relay", (kills() - 1) % NODES.len()).await;
    relay.kill().ok();
    relay.wait().ok();

    let conn = connect(1).await.unwrap();
    let seen = drain_ids(&conn, &queue, ids.len()).await;
    let duplicates: usize = seen.values().map(|c| c - 1).sum();
    let bound = BOUND * stops.len();
    println!(
        "cluster relay: events={n} stops={} lost=0 duplicates={duplicates} bound={bound} rate={rate:.0}/s stops_at_recovery_s={}",
        stops.len(),
        recoveries(&stops)
    );
    assert_all_once_within_bound(&ids, &seen, bound);
    assert_quorum_restored(&queue).await;
    delete_queue(&queue).await;
}

/// A quorum work queue dead-letters at-least-once into a quorum DLQ (what RabbitMQ
/// recommends with quorum queues); the ingester consumes the DLQ through rvn2, which stops.
#[tokio::test]
#[ignore = "needs the cluster (scripts/cluster up) and stops its nodes; scripts/test runs it alone"]
async fn cluster_an_ingester_keeps_storing_a_quorum_dlq_while_its_node_stops() {
    require_cluster().await;
    let db = testkit::fresh_db().await;
    let dlq = testkit::unique("cluster.dlq");
    let work = testkit::unique("cluster.work");
    declare_quorum(1, &dlq, &[]).await;
    declare_quorum(
        0,
        &work,
        &[
            ("x-dead-letter-exchange", AMQPValue::LongString("".into())),
            ("x-dead-letter-routing-key", AMQPValue::LongString(dlq.as_str().into())),
            ("x-dead-letter-strategy", AMQPValue::LongString("at-least-once".into())),
            ("x-overflow", AMQPValue::LongString("reject-publish".into())),
        ],
    )
    .await;
    // A consumer that rejects every message: each dies with x-death (reason rejected).
    let n: usize = 5_000 * kills().min(4);
    let conn = connect(2).await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for i in 0..n {
        let props = BasicProperties::default().with_message_id(format!("dl-{i}").into()).with_delivery_mode(2);
        let body = format!("{{\"n\":{i}}}");
        ch.basic_publish("".into(), work.as_str().into(), BasicPublishOptions::default(), body.as_bytes(), props)
            .await
            .unwrap();
    }
    ch.wait_for_confirms().await.unwrap();
    ch.basic_qos(500, Default::default()).await.unwrap();
    let mut consumer = ch
        .basic_consume(work.as_str().into(), "rejecter".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    for _ in 0..n {
        let d = tokio::time::timeout(Duration::from_secs(30), consumer.next()).await.unwrap().unwrap().unwrap();
        d.nack(BasicNackOptions { requeue: false, multiple: false }).await.unwrap();
    }
    let dlq_depth = async || {
        let c = connect(2).await.unwrap();
        let q = c.create_channel().await.unwrap();
        let opts = lapin::options::QueueDeclareOptions { passive: true, durable: true, ..Default::default() };
        let mut args = FieldTable::default();
        args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
        let depth = q.queue_declare(dlq.as_str().into(), opts, args).await.unwrap().message_count();
        c.close(200, "".into()).await.ok();
        depth as usize
    };
    testkit::until("every rejected message dead-lettered", Duration::from_secs(60), async || dlq_depth().await == n)
        .await;
    conn.close(200, "filled".into()).await.ok();

    let started = Instant::now();
    let extra = [
        ("REVENANT_INGEST_QUEUES", dlq.as_str()),
        ("REVENANT_INGEST_PREFETCH", "200"),
        ("REVENANT_MANAGEMENT_URL", "off"),
    ];
    let mut ingester = spawn_on("ingest", &db.url, ("AMQP_URLS", &urls_from(1)), &extra);
    let pool = db.pool.clone();
    let stored = async || count!(&pool, "SELECT count(*) FROM dead_letters");
    // Deliveries acked after their commit; the unacked ones come back through another node.
    let stops = stop_nodes_under_load(1, n as i64, 200, stored).await;
    testkit::until("every dead letter stored", Duration::from_secs(180), async || {
        count!(&pool, "SELECT count(DISTINCT message_id) FROM dead_letters") == n as i64
    })
    .await;
    let rate = n as f64 / started.elapsed().as_secs_f64();
    assert_moved("revenant-ingest", (1 + kills() - 1) % NODES.len()).await;
    ingester.kill().ok();
    ingester.wait().ok();

    let rows = count!(&db.pool, "SELECT count(*) FROM dead_letters");
    let with_death =
        count!(&db.pool, "SELECT count(*) FROM dead_letters WHERE reason = 'rejected' AND original_queue = $1", &work);
    println!(
        "cluster ingest: dead_letters={n} stops={} lost=0 stored_twice={} rate={rate:.0}/s stops_at_recovery_s={}",
        stops.len(),
        rows - n as i64,
        recoveries(&stops)
    );
    assert_eq!(rows, n as i64, "a redelivery was stored twice");
    assert_eq!(with_death, n as i64, "every dead letter kept its x-death (rejected from the work queue)");
    assert_eq!(dlq_depth().await, 0, "every stored dead letter was acked");
    assert_quorum_restored(&dlq).await;
    delete_queue(&work).await;
    delete_queue(&dlq).await;
}

/// A replay plan to a quorum queue, sent by `serve`'s replay publisher through rvn3, which
/// stops; the console's `/readyz` and sign-in page keep answering meanwhile (within 15 s: on
/// this two-core machine a node's shutdown has been seen to hold an answer for up to 9 s,
/// printed as `console_slowest_s`; docs/CLUSTER.md).
#[tokio::test]
#[ignore = "needs the cluster (scripts/cluster up) and stops its nodes; scripts/test runs it alone"]
async fn cluster_a_replay_keeps_sending_to_a_quorum_queue_while_its_node_stops() {
    require_cluster().await;
    let db = testkit::fresh_db().await;
    let target = testkit::unique("cluster.replay");
    declare_quorum(2, &target, &[]).await;
    let n: i64 = 10_000;
    let ids: Vec<i64> = sqlx::query_scalar!(
        r#"INSERT INTO dead_letters (queue, natural_key, message_id, body, body_size, exchange, routing_key,
                                     reason, original_queue, original_exchange, original_routing_keys,
                                     fingerprint, delivery_mode)
           SELECT 'cluster.dlq', 'cluster-' || g, 'rp-' || g, convert_to('{"n":' || g || '}', 'UTF8'), 8, '',
                  'cluster.dlq', 'rejected', $1, '', ARRAY[$1], 'cluster', 2
           FROM generate_series(1, $2::bigint) g ORDER BY g RETURNING id"#,
        &target,
        n
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bind = format!("127.0.0.1:{port}");
    let roles = [
        ("REVENANT_BIND", bind.as_str()),
        ("REVENANT_RELAY", "false"),
        ("REVENANT_INGEST", "false"),
        ("REVENANT_ALERTS", "false"),
        ("REVENANT_MANAGEMENT_URL", "off"),
    ];
    let mut serve = spawn_on("serve", &db.url, ("AMQP_URLS", &urls_from(2)), &roles);
    let http = reqwest::Client::builder().timeout(Duration::from_secs(15)).build().unwrap();
    let base = format!("http://{bind}");
    testkit::until("the console answers", Duration::from_secs(60), async || {
        http.get(format!("{base}/readyz")).send().await.is_ok_and(|r| r.status().is_success())
    })
    .await;

    let mut req = CreatePlan::new(Selection::Ids(ids.clone()), Target::Queue { queue: target.clone() });
    req.confirm_count = Some(n);
    let p = plan::create(&db.pool, &engine::audit::cli_principal(), None, &req).await.unwrap();
    let started = Instant::now();
    let pool = db.pool.clone();
    let sent = async || progress::get(&pool, p.id).await.unwrap().sent;
    // While the node is away the console keeps answering (it needs PostgreSQL only).
    let watch = {
        let (http, base) = (http.clone(), base.clone());
        tokio::spawn(async move {
            let (mut failures, mut slowest) = (Vec::new(), Duration::ZERO);
            for _ in 0..100 {
                for path in ["/readyz", "/login"] {
                    let t = Instant::now();
                    let answer = http.get(format!("{base}{path}")).send().await;
                    slowest = slowest.max(t.elapsed());
                    match answer {
                        Ok(r) if r.status().is_success() => {}
                        other => failures.push(format!(
                            "{path} after {:.1}s: {:?}",
                            t.elapsed().as_secs_f64(),
                            other.map(|r| r.status())
                        )),
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (failures, slowest)
        })
    };
    let window = engine::replay::publisher::PublisherConfig::default();
    let bound = engine::replay::marks::duplicate_bound(window.window, &window);
    let stops = stop_nodes_under_load(2, n, bound as i64, sent).await;
    testkit::until("the plan done", Duration::from_secs(180), async || {
        progress::get(&pool, p.id).await.unwrap().status == "done"
    })
    .await;
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let (failures, slowest) = watch.await.unwrap();
    assert_moved("revenant-replay", (2 + kills() - 1) % NODES.len()).await;
    serve.kill().ok();
    serve.wait().ok();

    let done = progress::get(&db.pool, p.id).await.unwrap();
    let conn = connect(0).await.unwrap();
    let seen = drain_ids(&conn, &target, n as usize).await;
    let expected: Vec<String> = (1..=n).map(|g| format!("rp-{g}")).collect();
    let duplicates: usize = seen.values().map(|c| c - 1).sum();
    let bound = bound * stops.len();
    println!(
        "cluster replay: items={n} stops={} lost=0 duplicates={duplicates} bound={bound} rate={rate:.0}/s stops_at_recovery_s={} console_slowest_s={:.1}",
        stops.len(),
        recoveries(&stops),
        slowest.as_secs_f64()
    );
    assert!(failures.is_empty(), "the console stopped answering while a node was away: {failures:?}");
    assert_eq!((done.sent, done.failed), (n, 0), "{done:?}");
    assert_all_once_within_bound(&expected, &seen, bound);
    assert_quorum_restored(&target).await;
    delete_queue(&target).await;
}
