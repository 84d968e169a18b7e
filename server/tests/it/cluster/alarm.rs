//! A memory alarm raised on one cluster node while `serve`'s relay and replay publisher send
//! through another: RabbitMQ blocks every publishing connection of the cluster. Both roles
//! must wait it out — no confirm timeout, no reconnect, no pile of blocked connections —
//! say so (/metrics, heartbeats), and afterwards have lost nothing, failed nothing that was
//! delivered, and sent twice no more than the per-crash bound.

use std::time::{Duration, Instant};

use engine::replay::{CreatePlan, Selection, Target, plan, progress};

use super::{NODES, declare_quorum, delete_queue, http, rabbitmqctl, require_cluster, urls_from};
use crate::chaos::{BOUND, assert_all_once_within_bound, drain_ids, spawn_on};

/// How long the alarm lasts: 30 s in the test command (twice the replay's confirm timeout,
/// fifteen times the relay's here); `ALARM_SECS=180` for the longer run.
fn alarm_secs() -> u64 {
    std::env::var("ALARM_SECS").ok().and_then(|v| v.parse().ok()).filter(|&s| s > 0).unwrap_or(30)
}

/// Clears the alarm when dropped, also when the test fails midway (the next test needs a
/// cluster that accepts publishes).
struct ClearAlarm(&'static str);

impl ClearAlarm {
    fn raise(node: &'static str) -> Self {
        rabbitmqctl(node, &["eval", "rabbit_alarm:set_alarm({{resource_limit, memory, node()}, []})."]);
        Self(node)
    }
}

impl Drop for ClearAlarm {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rabbitmqctl")
            .args(["-q", "-n", self.0, "eval", "rabbit_alarm:clear_alarm({resource_limit, memory, node()})."])
            .status();
    }
}

/// The connection name prefix of this test's `role` instance (`revenant-relay <instance>`),
/// from its heartbeat: other processes on the cluster are not counted.
async fn prefix_of(pool: &sqlx::PgPool, role: &str) -> String {
    let instance: String =
        sqlx::query_scalar!(r#"SELECT instance::text AS "i!" FROM heartbeats WHERE role = $1"#, role)
            .fetch_one(pool)
            .await
            .unwrap();
    format!("revenant-{role} {instance}")
}

/// Open connections per name prefix, from node 1's management API.
async fn connections(prefix: &str) -> usize {
    let url = "http://127.0.0.1:15681/api/connections?columns=user_provided_name,client_properties";
    let Ok(resp) = http().get(url).basic_auth("guest", Some("guest")).send().await else { return 0 };
    let list: serde_json::Value = resp.json().await.unwrap_or_default();
    list.as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["user_provided_name"]
                .as_str()
                .or(c["client_properties"]["connection_name"].as_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .count()
}

/// The value of an unlabelled sample, or of the one labelled `reason="…"`, in `/metrics`.
fn sample(metrics: &str, name: &str) -> Option<(String, f64)> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => {
                let (labels, v) = r.split_once("} ")?;
                (labels.to_string(), v)
            }
            None => (String::new(), rest.strip_prefix(' ')?),
        };
        Some((labels, value.trim().parse().ok()?))
    })
}

#[tokio::test]
#[ignore = "needs the cluster (scripts/cluster up) and raises a memory alarm; scripts/test runs it alone"]
async fn cluster_a_memory_alarm_blocks_relay_and_replay_which_wait_it_out_and_lose_fail_and_pile_up_nothing() {
    require_cluster().await;
    let db = testkit::fresh_db().await;
    let events_q = testkit::unique("alarm.relay");
    let replay_q = testkit::unique("alarm.replay");
    declare_quorum(0, &events_q, &[]).await;
    declare_quorum(0, &replay_q, &[]).await;
    // A service writing events (1 000/s in groups of 100) until 5 s into the alarm, so the
    // relay is mid-stream when it comes; it hands back every event id it wrote.
    let writing = tokio_util::sync::CancellationToken::new();
    let writer = {
        let (pool, queue, stop) = (db.pool.clone(), events_q.clone(), writing.clone());
        tokio::spawn(async move {
            let mut ids: Vec<String> = Vec::new();
            while !stop.is_cancelled() {
                let batch: Vec<String> = sqlx::query_scalar!(
                    r#"INSERT INTO outbox (event_type, exchange, routing_key, payload)
                       SELECT 'alarm', '', $1, convert_to('{"n":' || g || '}', 'UTF8') FROM generate_series(1, 100) g
                       RETURNING event_id::text AS "id!""#,
                    queue
                )
                .fetch_all(&pool)
                .await
                .unwrap();
                ids.extend(batch);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            ids
        })
    };
    let items: i64 = 10_000;
    let dl_ids: Vec<i64> = sqlx::query_scalar!(
        r#"INSERT INTO dead_letters (queue, natural_key, message_id, body, body_size, exchange, routing_key,
                                     reason, original_queue, original_exchange, original_routing_keys,
                                     fingerprint, delivery_mode)
           SELECT 'alarm.dlq', 'alarm-' || g, 'al-' || g, convert_to('{"n":' || g || '}', 'UTF8'), 8, '',
                  'alarm.dlq', 'rejected', $1, '', ARRAY[$1], 'alarm', 2
           FROM generate_series(1, $2::bigint) g ORDER BY g RETURNING id"#,
        &replay_q,
        items
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();

    // The roles connect to rvn1; the alarm is raised on rvn2: alarms are cluster-wide.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bind = format!("127.0.0.1:{port}");
    let roles = [
        ("REVENANT_BIND", bind.as_str()),
        ("REVENANT_INGEST", "false"),
        ("REVENANT_ALERTS", "false"),
        ("REVENANT_MANAGEMENT_URL", "http://guest:guest@127.0.0.1:15681"),
    ];
    let serve = spawn_on("serve", &db.url, ("AMQP_URLS", &urls_from(0)), &roles);
    let base = format!("http://{bind}");
    let web = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    testkit::until("the console answers", Duration::from_secs(60), async || {
        web.get(format!("{base}/readyz")).send().await.is_ok_and(|r| r.status().is_success())
    })
    .await;
    let metrics = async || web.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    let mut req = CreatePlan::new(Selection::Ids(dl_ids.clone()), Target::Queue { queue: replay_q.clone() });
    req.confirm_count = Some(items);
    req.rate_per_sec = Some(1_000.0);
    let p = plan::create(&db.pool, &engine::audit::cli_principal(), None, &req).await.unwrap();
    let pool = db.pool.clone();
    let published = async || count!(&pool, "SELECT count(*) FROM outbox WHERE status = 'published'");
    let sent = async || progress::get(&pool, p.id).await.unwrap().sent;
    testkit::until("both roles under way", Duration::from_secs(120), async || {
        published().await >= 2_000 && sent().await >= items / 20
    })
    .await;

    let alarm = ClearAlarm::raise(NODES[1]);
    let raised = Instant::now();
    testkit::until("both roles report the block in /metrics", Duration::from_secs(20), async || {
        let m = metrics().await;
        ["revenant_relay_blocked", "revenant_replay_blocked"]
            .iter()
            .all(|g| sample(&m, g).is_some_and(|(labels, v)| v == 1.0 && labels.contains("low on memory")))
    })
    .await;
    let seen_blocked_after = raised.elapsed();
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(raised.elapsed())).await;
    writing.cancel();
    let event_ids = writer.await.unwrap();
    let n = event_ids.len() as i64;
    // During the alarm: one connection per role, the heartbeats say blocked, nothing fails.
    let (mut most_relay, mut most_replay, mut heartbeat_blocked) = (0, 0, false);
    let (at_block_published, at_block_sent) = (published().await, sent().await);
    let (relay_name, replay_name) = (prefix_of(&pool, "relay").await, prefix_of(&pool, "replay").await);
    while raised.elapsed() < Duration::from_secs(alarm_secs()) {
        most_relay = most_relay.max(connections(&relay_name).await);
        most_replay = most_replay.max(connections(&replay_name).await);
        let blocked = engine::heartbeats::blocked(&pool).await.unwrap();
        heartbeat_blocked |= ["relay", "replay"].iter().all(|r| blocked.iter().any(|b| b.role == *r));
        let plan_now = progress::get(&pool, p.id).await.unwrap();
        assert_eq!(plan_now.failed, 0, "a replay item failed during the alarm: {plan_now:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let (end_block_published, end_block_sent) = (published().await, sent().await);
    let unconfirmed_during = count!(&pool, "SELECT count(*) FROM replay_items WHERE status = 'unconfirmed'");
    drop(alarm);
    let lifted = Instant::now();
    testkit::until("every event published and the plan done", Duration::from_secs(240), async || {
        published().await == n && progress::get(&pool, p.id).await.unwrap().status == "done"
    })
    .await;
    let resumed_in = lifted.elapsed();
    testkit::until("the block is gone from /metrics and the heartbeats", Duration::from_secs(20), async || {
        let m = metrics().await;
        let clear = ["revenant_relay_blocked", "revenant_replay_blocked"]
            .iter()
            .all(|g| sample(&m, g).is_some_and(|(_, v)| v == 0.0));
        clear && engine::heartbeats::blocked(&pool).await.unwrap().is_empty()
    })
    .await;
    let m = metrics().await;
    let unclosed: f64 = ["revenant_relay_unclosed_connections_total", "revenant_replay_unclosed_connections_total"]
        .iter()
        .map(|g| sample(&m, g).map_or(0.0, |s| s.1))
        .sum();
    let relay_unconfirmed = sample(&m, "revenant_relay_unconfirmed_total").map_or(-1.0, |s| s.1);
    let attempts_failed = count!(&pool, "SELECT count(*) FROM outbox WHERE attempts > 1 OR status <> 'published'");
    drop(serve);

    let done = progress::get(&db.pool, p.id).await.unwrap();
    let conn = super::connect(0).await.unwrap();
    let events_seen = drain_ids(&conn, &events_q, event_ids.len()).await;
    let items_seen = drain_ids(&conn, &replay_q, items as usize).await;
    let expected_items: Vec<String> = (1..=items).map(|g| format!("al-{g}")).collect();
    let dup = |seen: &std::collections::HashMap<String, usize>| seen.values().map(|c| c - 1).sum::<usize>();
    let cfg = engine::replay::publisher::PublisherConfig::default();
    let replay_bound = engine::replay::marks::duplicate_bound(cfg.window, &cfg);
    println!(
        "cluster alarm: alarm_s={} seen_blocked_after_s={:.1} events={n} items={items} lost=0 \
         relay_duplicates={} (bound {BOUND}) replay_duplicates={} (bound {replay_bound}) \
         published_during={} sent_during={} unconfirmed_during={unconfirmed_during} relay_unconfirmed={relay_unconfirmed} \
         connections_max relay={most_relay} replay={most_replay} unclosed={unclosed} resumed_in_s={:.1}",
        alarm_secs(),
        seen_blocked_after.as_secs_f64(),
        dup(&events_seen),
        dup(&items_seen),
        end_block_published - at_block_published,
        end_block_sent - at_block_sent,
        resumed_in.as_secs_f64()
    );
    assert!(heartbeat_blocked, "the relay and replay heartbeats never said blocked during the alarm");
    assert!(most_relay <= 1 && most_replay <= 1, "connections piled up: relay {most_relay}, replay {most_replay}");
    assert_eq!(unclosed, 0.0, "a connection could not be closed");
    assert_eq!(unconfirmed_during, 0, "a block is not a missing confirm: nothing may read as unconfirmed");
    assert_eq!((done.sent, done.failed), (items, 0), "{done:?}");
    assert_eq!(attempts_failed, 0, "an event delivered during the alarm was counted as a failed attempt");
    assert_eq!(relay_unconfirmed, 0.0, "the relay read the block as missing confirms");
    assert_all_once_within_bound(&event_ids, &events_seen, BOUND);
    assert_all_once_within_bound(&expected_items, &items_seen, replay_bound);
    delete_queue(&events_q).await;
    delete_queue(&replay_q).await;
}
