//! Alerts against the real PostgreSQL (a fresh database per test), the real RabbitMQ (a
//! uniquely named queue, deleted at the end) and a real local webhook receiver.
//!
//! Most tests drive the evaluator one sweep at a time (`evaluate_due`, `deliver_due`) with a
//! zero tick, so "within one evaluation" is exact; one test runs two `run` roles at once.

mod egress;
mod receiver;

use std::time::{Duration, Instant};

use engine::{
    alerts::{
        self, AlertSettings, AlertState, RuleError, RuleInput, Severity,
        evaluator::evaluate_due,
        webhook::{self, deliver_due},
    },
    auth::{ClientIp, Principal, Role},
    dead_letter::depth,
    sources::{Source, mapping::Cols},
};
use lapin::{
    BasicProperties,
    options::{
        BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
        QueuePurgeOptions,
    },
    types::FieldTable,
};
use receiver::Receiver;
use sqlx::PgPool;
use testkit::{amqp_url, fresh_db, unique};
use tokio_util::sync::CancellationToken;

fn cfg() -> AlertSettings {
    AlertSettings {
        tick: Duration::ZERO,
        public_url: Some("http://revenant.example/".into()),
        webhook_timeout: Duration::from_secs(2),
        webhook_max_attempts: 4,
        webhook_backoff_base: Duration::from_millis(20),
        webhook_backoff_max: Duration::from_millis(50),
        topology: None,
        // The receiver listens on 127.0.0.1.
        allow_private_webhooks: true,
    }
}

/// The tests' webhook receivers listen on 127.0.0.1: rules naming them are saved as with
/// `alerts.allow_private_webhooks`.
const LOCAL_RECEIVERS: bool = true;

fn op() -> Principal {
    Principal { username: "olga".into(), role: Role::Operator }
}

fn ip() -> ClientIp {
    ClientIp(Some("10.0.0.7".into()))
}

fn rule(name: &str, kind: &str, target: &str, warn: &str, crit: &str, recover: &str, url: &str) -> RuleInput {
    RuleInput {
        name: name.into(),
        kind: kind.into(),
        target: target.into(),
        warn_threshold: warn.into(),
        crit_threshold: crit.into(),
        recover_threshold: recover.into(),
        for_secs: "0".into(),
        window_mins: "60".into(),
        webhook_url: url.into(),
        webhook_format: "json".into(),
        enabled: true,
    }
}

/// Revenant's own outbox on `pool` as an alert rule's source (stuck after 10 minutes).
fn own_outbox(pool: &PgPool) -> Source {
    Source {
        name: "revenant".into(),
        pool: pool.clone(),
        cols: Cols::native(),
        stuck_after: Duration::from_secs(600),
        stuck_attempts: 3,
        relay: false,
        poll: std::time::Duration::from_millis(250),
        capture: Default::default(),
        database_url: None,
    }
}

/// One evaluator tick: evaluate what is due, then send what is due.
async fn tick(pool: &PgPool, sources: &[Source], cfg: &AlertSettings) -> (usize, usize) {
    let http = webhook::client(cfg).unwrap();
    let evaluated = evaluate_due(pool, sources, cfg).await.unwrap();
    let sent = deliver_due(pool, &http, cfg).await.unwrap();
    (evaluated, sent)
}

async fn state(pool: &PgPool, rule_id: i64) -> (AlertState, Option<Severity>, Option<f64>) {
    let r = alerts::list_rules(pool).await.unwrap().into_iter().find(|r| r.rule.id == rule_id).unwrap();
    (r.state, r.severity, r.value)
}

async fn transitions(pool: &PgPool, rule_id: i64) -> Vec<(String, String)> {
    let mut h = alerts::history(pool, rule_id, None, 100).await.unwrap();
    h.reverse();
    h.into_iter().map(|e| (e.from_state.to_string(), e.to_state.to_string())).collect()
}

async fn new_failure_group(pool: &PgPool) -> i64 {
    sqlx::query_scalar!(
        "INSERT INTO failure_groups (fingerprint, original_queue, reason, count) VALUES ($1, 'orders', 'rejected', 1)
         RETURNING id",
        unique("fp")
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_dlq_depth_rule_fires_within_one_evaluation_and_resolves_past_recovery_with_one_webhook_each() {
    let db = fresh_db().await;
    let rx = Receiver::start(&[]).await;
    let conn = engine::amqp::connect(&amqp_url(), "revenant-test-alerts").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let queue = unique("revenant-test.alerts.dlq");
    ch.queue_declare(queue.as_str().into(), QueueDeclareOptions::default(), FieldTable::default()).await.unwrap();
    let publish = |n: usize| {
        let (ch, queue) = (ch.clone(), queue.clone());
        async move {
            for i in 0..n {
                let body = format!("dead {i}");
                ch.basic_publish(
                    "".into(),
                    queue.as_str().into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    BasicProperties::default(),
                )
                .await
                .unwrap()
                .await
                .unwrap();
            }
        }
    };
    let http = reqwest::Client::new();
    let sample = || depth::sample_once(&db.pool, &conn, &http, None, "/", std::slice::from_ref(&queue));
    let cfg = cfg();

    let r = alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("orders DLQ depth", "dlq_depth", &queue, "3", "5", "1", &rx.url),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    publish(2).await;
    assert_eq!(sample().await.unwrap(), 1);
    tick(&db.pool, &[], &cfg).await;
    assert_eq!(state(&db.pool, r.id).await, (AlertState::Ok, None, Some(2.0)));

    publish(3).await;
    sample().await.unwrap();
    assert_eq!(tick(&db.pool, &[], &cfg).await, (1, 1), "one evaluation, one delivery");
    assert_eq!(state(&db.pool, r.id).await, (AlertState::Firing, Some(Severity::Critical), Some(5.0)));
    let banner = alerts::firing(&db.pool).await.unwrap();
    assert_eq!(banner.len(), 1);
    assert_eq!(banner[0].link, format!("/dead-letters/groups?dlq={queue}"));

    // Still breached: no new transition, nothing more sent.
    assert_eq!(tick(&db.pool, &[], &cfg).await, (1, 0));

    // Down to 2: below warning (3) but above recovery (1): hysteresis keeps it firing.
    for _ in 0..3 {
        let got = ch.basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true }).await.unwrap();
        assert!(got.is_some());
    }
    sample().await.unwrap();
    assert_eq!(tick(&db.pool, &[], &cfg).await, (1, 0));
    assert_eq!(state(&db.pool, r.id).await, (AlertState::Firing, Some(Severity::Critical), Some(2.0)));

    ch.queue_purge(queue.as_str().into(), QueuePurgeOptions::default()).await.unwrap();
    sample().await.unwrap();
    tick(&db.pool, &[], &cfg).await;
    assert_eq!(state(&db.pool, r.id).await.0, AlertState::Resolved);
    assert!(alerts::firing(&db.pool).await.unwrap().is_empty());
    tick(&db.pool, &[], &cfg).await;

    let bodies = rx.bodies();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert_eq!(bodies[0]["state"], "firing");
    assert_eq!(bodies[0]["severity"], "critical");
    assert_eq!(bodies[0]["value"], 5.0);
    assert_eq!(bodies[0]["threshold"], 5.0);
    assert_eq!(bodies[0]["rule"], "orders DLQ depth");
    assert_eq!(bodies[0]["target"], queue.as_str());
    assert_eq!(bodies[0]["link"], format!("http://revenant.example/dead-letters/groups?dlq={queue}"));
    assert_eq!(bodies[1]["state"], "resolved");
    assert_eq!(bodies[1]["value"], 0.0);
    assert_eq!(
        transitions(&db.pool, r.id).await,
        [("ok".into(), "firing".into()), ("firing".into(), "resolved".into())]
    );
    let d = alerts::deliveries(&db.pool, r.id, 10).await.unwrap();
    assert_eq!(d.len(), 2);
    assert!(d.iter().all(|d| d.delivered && d.status_code == Some(200) && d.attempt == 1), "{d:?}");

    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await.unwrap();
    let _ = conn.close(200, "done".into()).await;
}

#[tokio::test]
async fn a_silenced_rule_still_changes_state_but_delivers_nothing() {
    let db = fresh_db().await;
    let rx = Receiver::start(&[]).await;
    let r = alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("new groups", "new_failure_group", "", "1", "1", "0", &rx.url),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    let until = chrono::Utc::now() + chrono::Duration::hours(2);
    let silenced = alerts::silence(&db.pool, &op(), &ip(), r.id, until, "deploy in progress").await.unwrap();
    assert_eq!(silenced.silence_reason.as_deref(), Some("deploy in progress"));
    new_failure_group(&db.pool).await;

    tick(&db.pool, &[], &cfg()).await;
    assert_eq!(state(&db.pool, r.id).await.0, AlertState::Firing);
    assert!(alerts::firing(&db.pool).await.unwrap()[0].silenced);
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM webhook_deliveries"), 0);
    assert_eq!(rx.count(), 0);

    // A delivery queued before the silence is not sent either.
    let unsilenced = alerts::unsilence(&db.pool, &op(), &ip(), r.id).await.unwrap();
    assert_eq!(unsilenced.silenced_until, None);
    sqlx::query!("INSERT INTO webhook_deliveries (event_id, attempt) SELECT max(id), 1 FROM alert_events")
        .execute(&db.pool)
        .await
        .unwrap();
    alerts::silence(&db.pool, &op(), &ip(), r.id, until, "still deploying").await.unwrap();
    tick(&db.pool, &[], &cfg()).await;
    assert_eq!(rx.count(), 0);
    let d = alerts::deliveries(&db.pool, r.id, 10).await.unwrap();
    assert_eq!(d.len(), 1, "recorded, not retried: {d:?}");
    assert!(!d[0].delivered && d[0].error.as_deref().unwrap().contains("silenced"));

    let audited: Vec<String> =
        sqlx::query_scalar!("SELECT action FROM audit_log WHERE target = 'new groups' AND actor = 'olga' ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(audited, ["alert_rule.create", "alert_rule.silence", "alert_rule.unsilence", "alert_rule.silence"]);
}

#[tokio::test]
async fn a_failing_receiver_is_retried_with_backoff_until_it_answers_and_every_attempt_is_recorded() {
    let db = fresh_db().await;
    let flaky = Receiver::start(&[500, 503]).await;
    let down = Receiver::start(&[500; 10]).await;
    let a = alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("flaky", "new_failure_group", "", "1", "2", "0", &flaky.url),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    let b = alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("down", "new_failure_group", "", "1", "2", "0", &down.url),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    new_failure_group(&db.pool).await;
    let cfg = cfg();
    let started = Instant::now();
    while count!(&db.pool, "SELECT count(*) FROM webhook_deliveries WHERE at IS NULL") > 0
        || started.elapsed() < Duration::from_millis(100)
    {
        assert!(started.elapsed() < Duration::from_secs(10), "deliveries never settled");
        tick(&db.pool, &[], &cfg).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    assert_eq!(flaky.count(), 3);
    let mut d = alerts::deliveries(&db.pool, a.id, 10).await.unwrap();
    d.reverse();
    let seen: Vec<_> = d.iter().map(|d| (d.attempt, d.status_code, d.delivered)).collect();
    assert_eq!(seen, [(1, Some(500), false), (2, Some(503), false), (3, Some(200), true)]);
    assert_eq!(d[0].error.as_deref(), Some("HTTP 500"));
    assert!(d.windows(2).all(|w| w[1].next_attempt_at >= w[0].at.unwrap()), "a retry waits for its backoff");

    assert_eq!(down.count(), 4, "max attempts is 4, then it gives up");
    let d = alerts::deliveries(&db.pool, b.id, 10).await.unwrap();
    assert_eq!(d.len(), 4);
    assert!(d.iter().all(|d| !d.delivered && d.status_code == Some(500) && d.at.is_some()));
}

#[tokio::test]
async fn two_evaluators_running_at_once_evaluate_each_rule_once_per_tick() {
    let db = fresh_db().await;
    let rx = Receiver::start(&[]).await;
    let r = alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("new groups", "new_failure_group", "", "1", "1", "0", &rx.url),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    new_failure_group(&db.pool).await;
    let tick = Duration::from_millis(300);
    let cfg = AlertSettings { tick, ..cfg() };
    let stop = CancellationToken::new();
    let started = Instant::now();
    let roles: Vec<_> =
        (0..2).map(|_| tokio::spawn(alerts::run(db.pool.clone(), Vec::new(), cfg.clone(), stop.clone()))).collect();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    stop.cancel();
    for r in roles {
        r.await.unwrap().unwrap();
    }
    let elapsed = started.elapsed();

    let evals = sqlx::query_scalar!("SELECT evals FROM alert_state WHERE rule_id = $1", r.id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let most = (elapsed.as_millis() / tick.as_millis()) as i64 + 1;
    assert!(evals >= 3 && evals <= most, "{evals} evaluations in {elapsed:?} at one per {tick:?}");
    assert_eq!(transitions(&db.pool, r.id).await, [("ok".into(), "firing".into())]);
    assert_eq!(alerts::deliveries(&db.pool, r.id, 10).await.unwrap().len(), 1);
    assert_eq!(rx.count(), 1);
    let heartbeats = count!(&db.pool, "SELECT count(*) FROM heartbeats WHERE role = 'alerts'");
    assert_eq!(heartbeats, 2);
}

#[tokio::test]
async fn validation_rejects_each_bad_field_with_a_message_naming_it_and_stores_nothing() {
    let db = fresh_db().await;
    let cases = [
        ("name", RuleInput { name: "".into(), ..rule("x", "dlq_depth", "q", "1", "2", "0", "") }),
        ("kind", rule("x", "cpu_load", "q", "1", "2", "0", "")),
        ("target", rule("x", "outbox_stuck", " ", "1", "2", "0", "")),
        ("warn_threshold", rule("x", "dlq_depth", "q", "lots", "2", "0", "")),
        ("crit_threshold", rule("x", "dlq_depth", "q", "1", "-2", "0", "")),
        ("warn_threshold", rule("x", "dlq_depth", "q", "5", "2", "0", "")),
        ("recover_threshold", rule("x", "dlq_depth", "q", "5", "9", "5", "")),
        ("for_secs", RuleInput { for_secs: "-1".into(), ..rule("x", "dlq_depth", "q", "1", "2", "0", "") }),
        ("window_mins", RuleInput { window_mins: "0".into(), ..rule("x", "dlq_new", "q", "1", "2", "0", "") }),
        ("webhook_url", rule("x", "dlq_depth", "q", "1", "2", "0", "javascript:alert(1)")),
        (
            "webhook_format",
            RuleInput { webhook_format: "xml".into(), ..rule("x", "dlq_depth", "q", "1", "2", "0", "") },
        ),
    ];
    for (field, input) in cases {
        match alerts::create(&db.pool, &op(), &ip(), &input, LOCAL_RECEIVERS).await {
            Err(RuleError::Invalid(errs)) => {
                assert_eq!(errs.len(), 1, "{field}: {errs:?}");
                assert_eq!(errs[0].field, field);
                assert!(errs[0].message.starts_with(&format!("{field}:")), "{}", errs[0].message);
            }
            other => panic!("{field}: expected Invalid, got {other:?}"),
        }
    }
    let viewer = Principal { username: "vera".into(), role: Role::Viewer };
    let ok = rule("ok", "dlq_depth", "q", "1", "2", "0", "");
    assert!(matches!(alerts::create(&db.pool, &viewer, &ip(), &ok, LOCAL_RECEIVERS).await, Err(RuleError::Forbidden)));
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM alert_rules"), 0);
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM audit_log"), 0);
}

#[tokio::test]
async fn rule_changes_are_audited_with_the_webhook_host_only_and_names_are_unique() {
    let db = fresh_db().await;
    let url = "https://hooks.example.com/services/T0/B0/sekrit";
    let a = alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("a", "dlq_awaiting", "orders.dlq", "10", "50", "2", url),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("b", "dlq_awaiting", "billing.dlq", "10", "50", "2", ""),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    let dup =
        alerts::update(&db.pool, &op(), &ip(), a.id, &rule("b", "dlq_depth", "q", "1", "2", "0", ""), LOCAL_RECEIVERS)
            .await;
    assert!(matches!(dup, Err(RuleError::Conflict(ref n)) if n == "b"), "{dup:?}");
    let changed = alerts::update(
        &db.pool,
        &op(),
        &ip(),
        a.id,
        &rule("a2", "dlq_new", "orders.dlq", "5", "9", "1", url),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    assert_eq!((changed.name.as_str(), changed.window_mins), ("a2", Some(60)));
    let listed = alerts::list_rules(&db.pool).await.unwrap();
    assert_eq!(listed[0].rule.webhook_url, None);
    assert_eq!(listed[0].webhook_host.as_deref(), Some("hooks.example.com"));
    alerts::delete(&db.pool, &op(), &ip(), a.id).await.unwrap();
    assert!(matches!(alerts::delete(&db.pool, &op(), &ip(), a.id).await, Err(RuleError::NotFound)));

    let log: Vec<(String, String, Option<String>)> =
        sqlx::query!(r#"SELECT action, detail::text AS "detail!", source_ip FROM audit_log ORDER BY id"#)
            .fetch_all(&db.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.action, r.detail, r.source_ip))
            .collect();
    let actions: Vec<&str> = log.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(actions, ["alert_rule.create", "alert_rule.create", "alert_rule.update", "alert_rule.delete"]);
    assert!(log.iter().all(|l| !l.1.contains("sekrit")), "the token never reaches the audit log");
    assert!(log[0].1.contains("hooks.example.com"));
    assert_eq!(log[0].2.as_deref(), Some("10.0.0.7"));
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM alert_rules"), 1);
}

#[tokio::test]
async fn an_outbox_oldest_pending_age_rule_fires_and_links_to_the_pending_rows() {
    let db = fresh_db().await;
    let src = own_outbox(&db.pool);
    let rx = Receiver::start(&[]).await;
    let r = alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("outbox lag", "outbox_oldest_age", "revenant", "60", "300", "30", &rx.url),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    sqlx::query!(
        r#"INSERT INTO outbox (event_type, routing_key, payload, created_at)
           VALUES ('order.created', 'orders.created', '\x7b7d', now() - interval '10 minutes')"#,
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let sources = [src];
    tick(&db.pool, &sources, &cfg()).await;
    let (st, sev, value) = state(&db.pool, r.id).await;
    assert_eq!((st, sev), (AlertState::Firing, Some(Severity::Critical)));
    assert!(value.unwrap() >= 600.0, "{value:?}");
    assert_eq!(rx.bodies()[0]["link"], "http://revenant.example/outbox?source=revenant&bucket=pending");

    sqlx::query!("UPDATE outbox SET status = 'published', published_at = now()").execute(&db.pool).await.unwrap();
    tick(&db.pool, &sources, &cfg()).await;
    assert_eq!(state(&db.pool, r.id).await, (AlertState::Resolved, None, Some(0.0)));
    assert_eq!(rx.count(), 2);

    // A rule on a source this instance does not know keeps its state instead of failing the sweep.
    alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("ghost", "outbox_failed", "nowhere", "1", "2", "0", ""),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    assert_eq!(tick(&db.pool, &sources, &cfg()).await.0, 2);
}

#[tokio::test]
async fn a_slot_retained_rule_fires_while_a_slot_nobody_reads_holds_back_wal_and_resolves_when_it_is_dropped() {
    use engine::outbox::logical::slot::{self, Names};
    let db = fresh_db().await;
    let src = own_outbox(&db.pool);
    let rx = Receiver::start(&[]).await;
    // Warn above 1 MiB held back, critical above 64, recovered at 0.
    let r = alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("wal", "slot_retained_mb", "revenant", "1", "64", "0", &rx.url),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    let sources = [src];
    tick(&db.pool, &sources, &cfg()).await;
    assert_eq!(state(&db.pool, r.id).await.0, AlertState::Ok, "no slot, nothing held back");
    let names = Names::for_source(&db.name);
    slot::ensure(&db.pool, &names, "revenant.outbox").await.unwrap();
    // A few MiB of WAL written after the slot's position (a 2 MiB payload, not compressible).
    sqlx::query!(
        r#"INSERT INTO outbox (event_type, routing_key, payload)
           SELECT 'bulk', 'bulk', decode(string_agg(md5(g::text), ''), 'hex') FROM generate_series(1, 131072) g"#
    )
    .execute(&db.pool)
    .await
    .unwrap();
    tick(&db.pool, &sources, &cfg()).await;
    let (st, sev, value) = state(&db.pool, r.id).await;
    assert_eq!((st, sev), (AlertState::Firing, Some(Severity::Warning)), "{value:?}");
    assert!(value.unwrap() > 1.0, "{value:?}");
    assert_eq!(rx.bodies()[0]["link"], "http://revenant.example/outbox?source=revenant");
    slot::drop_slot(&db.pool, &names.slot).await.unwrap();
    tick(&db.pool, &sources, &cfg()).await;
    assert_eq!(state(&db.pool, r.id).await, (AlertState::Resolved, None, Some(0.0)));
}

/// The heartbeat a relay writes while RabbitMQ blocks it (as `outbox::heartbeat` does).
async fn blocked_heartbeat(pool: &PgPool, since_secs: i64) {
    let since = chrono::Utc::now() - chrono::Duration::seconds(since_secs);
    let detail = serde_json::json!({"connected": true, "stopped": false,
        "blocked": {"reason": "low on memory", "since": since}});
    engine::heartbeats::upsert(pool, "relay", uuid::Uuid::now_v7(), "host-a", &detail).await.unwrap();
}

#[tokio::test]
async fn a_publishers_blocked_rule_fires_on_a_long_block_and_resolves_when_it_lifts() {
    let db = fresh_db().await;
    let rx = Receiver::start(&[]).await;
    let r = alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("blocked", "publishers_blocked", "", "60", "300", "0", &rx.url),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    tick(&db.pool, &[], &cfg()).await;
    assert_eq!(state(&db.pool, r.id).await.0, AlertState::Ok);
    blocked_heartbeat(&db.pool, 90).await;
    tick(&db.pool, &[], &cfg()).await;
    let (st, sev, value) = state(&db.pool, r.id).await;
    assert_eq!((st, sev), (AlertState::Firing, Some(Severity::Warning)));
    assert!(value.unwrap() >= 90.0, "{value:?}");
    assert_eq!(rx.bodies()[0]["link"], "http://revenant.example/");
    // The block lifts: the next heartbeat has no `blocked`.
    sqlx::query!("UPDATE heartbeats SET detail = detail - 'blocked'").execute(&db.pool).await.unwrap();
    tick(&db.pool, &[], &cfg()).await;
    assert_eq!(state(&db.pool, r.id).await, (AlertState::Resolved, None, Some(0.0)));
}

#[tokio::test]
async fn send_test_posts_one_marked_request_with_an_absolute_link_and_audits_the_outcome() {
    let db = fresh_db().await;
    let ok = Receiver::start(&[]).await;
    let down = Receiver::start(&[500]).await;
    let a = alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("dlq a&b", "dlq_awaiting", "a&b.dlq", "1", "2", "0", &ok.url),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    let b = alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("broken", "new_failure_group", "", "1", "2", "0", &down.url),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    let none = alerts::create(
        &db.pool,
        &op(),
        &ip(),
        &rule("quiet", "new_failure_group", "", "1", "2", "0", ""),
        LOCAL_RECEIVERS,
    )
    .await
    .unwrap();
    let http = webhook::client(&cfg()).unwrap();
    use engine::alerts::test_send::{TestError, send_test};
    let sent = send_test(&db.pool, &http, &cfg(), &op(), Some("10.0.0.7"), a.id).await.unwrap();
    assert!(sent.delivered && sent.status == Some(200), "{sent:?}");
    assert_eq!(sent.link, "http://revenant.example/dead-letters/groups?dlq=a%26b.dlq");
    let bodies = ok.bodies();
    assert_eq!(bodies.len(), 1);
    assert_eq!((bodies[0]["state"].as_str(), bodies[0]["link"].as_str()), (Some("test"), Some(sent.link.as_str())));
    assert!(bodies[0]["message"].as_str().unwrap().contains("Test from Revenant by olga"));

    let failed = send_test(&db.pool, &http, &cfg(), &op(), None, b.id).await.unwrap();
    assert_eq!((failed.delivered, failed.status, failed.error.as_deref()), (false, Some(500), Some("HTTP 500")));
    assert!(matches!(send_test(&db.pool, &http, &cfg(), &op(), None, none.id).await, Err(TestError::NoWebhook)));
    // Nothing queued for retry: a test is one request.
    let queued = count!(&db.pool, "SELECT count(*) FROM webhook_deliveries");
    assert_eq!(queued, 0);
    let audit: Vec<(String, String)> =
        sqlx::query!(r#"SELECT target AS "target!", outcome FROM audit_log WHERE action = 'alert.test' ORDER BY id"#)
            .fetch_all(&db.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.target, r.outcome))
            .collect();
    assert_eq!(
        audit,
        [(format!("alert_rule:{}", a.id), "ok".to_string()), (format!("alert_rule:{}", b.id), "failed".to_string())]
    );
}
