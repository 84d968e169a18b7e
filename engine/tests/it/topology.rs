//! Queue reliability contracts against the real RabbitMQ management API: a fresh vhost per
//! test (created and deleted through the API), declared with lapin, then read back and
//! checked. Statistics lag the broker by a few seconds, so tests poll the report until the
//! expected state shows, with a deadline.

use std::{
    collections::HashSet,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use engine::{
    audit::{self, AuditFilter},
    auth::{Principal, Role},
    topology::{
        self, Check, Contract, Level, QueueReport, TopologyError, TopologyReport, Verdict,
        checks::{self, DEAD_LETTER_EXCHANGE, DEAD_LETTER_ROUTED, DEAD_LETTER_WATCHED, DURABLE},
        contract::{self, ContractError, Origin},
        fetch::encode,
    },
};
use lapin::{
    Channel, Connection, ExchangeKind,
    options::{BasicConsumeOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions},
    types::{AMQPValue, FieldTable},
};
use testkit::{amqp_url, eventually, fresh_db};

const PREFIX: &str = "revenant-t-topology-";

fn management_url() -> String {
    std::env::var("TEST_MANAGEMENT_URL").unwrap_or_else(|_| "http://guest:guest@127.0.0.1:15672".into())
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A vhost of our own, with guest allowed everything in it.
struct Vhost {
    name: String,
    http: reqwest::Client,
    conn: Connection,
    ch: Channel,
}

impl Vhost {
    async fn new() -> Self {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
        sweep(&http).await;
        // The creation time is in the name, so a later run can sweep what a killed one left.
        let name = format!("{PREFIX}{}-{}", now_secs(), uuid::Uuid::new_v4().simple());
        api(&http, reqwest::Method::PUT, &format!("/api/vhosts/{}", encode(&name)), None).await;
        let perms = serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"});
        let (_, user, _) = engine::management::split_credentials(&management_url());
        api(&http, reqwest::Method::PUT, &format!("/api/permissions/{}/{user}", encode(&name)), Some(perms)).await;
        let base = amqp_url();
        let url = format!("{}/{}", &base[..base.rfind('/').unwrap()], encode(&name));
        let conn = engine::amqp::connect(&url, "revenant-test-topology").await.unwrap();
        let ch = conn.create_channel().await.unwrap();
        Self { name, http, conn, ch }
    }

    async fn exchange(&self, name: &str, kind: ExchangeKind) {
        let opts = ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() };
        self.ch.exchange_declare(name.into(), kind, opts, FieldTable::default()).await.unwrap();
    }

    async fn queue(&self, name: &str, durable: bool, args: &[(&str, AMQPValue)]) {
        let mut table = FieldTable::default();
        for (k, v) in args {
            table.insert((*k).into(), v.clone());
        }
        let opts = QueueDeclareOptions { durable, ..QueueDeclareOptions::default() };
        self.ch.queue_declare(name.into(), opts, table).await.unwrap();
    }

    async fn bind(&self, queue: &str, exchange: &str, key: &str) {
        self.ch
            .queue_bind(queue.into(), exchange.into(), key.into(), QueueBindOptions::default(), FieldTable::default())
            .await
            .unwrap();
    }

    fn contracts(&self, pattern: &str, level: Level) -> Vec<Contract> {
        contract::from_config(&self.name, &[(pattern.to_string(), level)]).unwrap()
    }

    async fn report(&self, contracts: &[Contract], watched: &[&str]) -> TopologyReport {
        let watched: HashSet<String> = watched.iter().map(|s| s.to_string()).collect();
        topology::report(&self.http, &management_url(), &self.name, contracts, &watched).await.unwrap()
    }

    /// Polls until `done` holds for the queue's report; panics with the last one at the deadline.
    async fn until(
        &self,
        contracts: &[Contract],
        watched: &[&str],
        queue: &str,
        done: impl Fn(&QueueReport) -> bool,
    ) -> TopologyReport {
        eventually(&format!("queue {queue} in the expected state"), Duration::from_secs(30), async || {
            let r = self.report(contracts, watched).await;
            if r.queues.iter().find(|q| q.queue == queue).is_some_and(&done) {
                return Ok(r);
            }
            Err(r.queues.into_iter().find(|q| q.queue == queue))
        })
        .await
    }

    async fn delete(self) {
        let _ = self.conn.close(200, "test done".into()).await;
        api(&self.http, reqwest::Method::DELETE, &format!("/api/vhosts/{}", encode(&self.name)), None).await;
    }
}

async fn api(http: &reqwest::Client, method: reqwest::Method, path: &str, body: Option<serde_json::Value>) {
    let (base, user, pass) = engine::management::split_credentials(&management_url());
    let mut req = http.request(method, format!("{base}{path}")).basic_auth(user, Some(pass));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    assert!(resp.status().is_success(), "{path}: HTTP {}", resp.status());
}

/// Deletes test vhosts older than an hour: what a killed earlier run left behind.
async fn sweep(http: &reqwest::Client) {
    let Ok(names) = topology::vhosts(http, &management_url()).await else { return };
    for name in names {
        let born = name.strip_prefix(PREFIX).and_then(|r| r.split('-').next()).and_then(|s| s.parse::<u64>().ok());
        if born.is_some_and(|t| t + 3600 < now_secs()) {
            api(http, reqwest::Method::DELETE, &format!("/api/vhosts/{}", encode(&name)), None).await;
        }
    }
}

fn check<'a>(r: &'a TopologyReport, queue: &str, name: &str) -> Option<&'a Check> {
    r.queues.iter().find(|q| q.queue == queue)?.checks.iter().find(|c| c.name == name)
}

fn verdict(r: &QueueReport, name: &str) -> Option<Verdict> {
    r.checks.iter().find(|c| c.name == name).map(|c| c.verdict)
}

fn dlx_args(dlx: &str) -> (&'static str, AMQPValue) {
    ("x-dead-letter-exchange", AMQPValue::LongString(dlx.into()))
}

#[tokio::test]
async fn a_non_durable_queue_fails_the_durability_check() {
    let v = Vhost::new().await;
    v.queue("transient", false, &[]).await;
    let r = v.until(&[], &[], "transient", |q| verdict(q, DURABLE).is_some()).await;
    let c = check(&r, "transient", DURABLE).unwrap();
    assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
    assert!(!c.fix.is_empty());
    v.delete().await;
}

#[tokio::test]
async fn a_durable_queue_without_a_dead_letter_exchange_fails() {
    let v = Vhost::new().await;
    v.queue("orders", true, &[]).await;
    let r = v.until(&[], &[], "orders", |q| verdict(q, DEAD_LETTER_EXCHANGE).is_some()).await;
    assert_eq!(check(&r, "orders", DURABLE).unwrap().verdict, Verdict::Pass);
    let c = check(&r, "orders", DEAD_LETTER_EXCHANGE).unwrap();
    assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
    v.delete().await;
}

#[tokio::test]
async fn a_dead_letter_exchange_that_routes_the_key_nowhere_fails() {
    let v = Vhost::new().await;
    v.exchange("dlx", ExchangeKind::Direct).await;
    v.queue("dlq", true, &[]).await;
    v.bind("dlq", "dlx", "something.else").await;
    let key = ("x-dead-letter-routing-key", AMQPValue::LongString("orders.dead".into()));
    v.queue("orders", true, &[dlx_args("dlx"), key]).await;
    let r = v.until(&[], &["dlq"], "orders", |q| verdict(q, DEAD_LETTER_ROUTED).is_some()).await;
    assert_eq!(check(&r, "orders", DEAD_LETTER_EXCHANGE).unwrap().verdict, Verdict::Pass);
    let c = check(&r, "orders", DEAD_LETTER_ROUTED).unwrap();
    assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
    assert!(c.reason.contains("orders.dead"), "{}", c.reason);
    v.delete().await;
}

#[tokio::test]
async fn a_dlq_that_revenant_does_not_watch_fails_a_critical_queue_and_warns_a_standard_one() {
    let v = Vhost::new().await;
    v.exchange("dlx", ExchangeKind::Fanout).await;
    v.queue("orders.dlq", true, &[]).await;
    v.bind("orders.dlq", "dlx", "").await;
    v.queue("orders.created", true, &[dlx_args("dlx")]).await;
    let critical = v.contracts("orders.*", Level::Critical);
    let r = v.until(&critical, &[], "orders.created", |q| verdict(q, DEAD_LETTER_WATCHED).is_some()).await;
    let c = check(&r, "orders.created", DEAD_LETTER_WATCHED).unwrap();
    assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
    assert!(c.reason.contains("unwatched DLQ `orders.dlq`"), "{}", c.reason);
    assert!(topology::failing_critical(&r).iter().any(|f| f.check.name == DEAD_LETTER_WATCHED));
    let standard = v.report(&[], &[]).await;
    assert_eq!(check(&standard, "orders.created", DEAD_LETTER_WATCHED).unwrap().verdict, Verdict::Warn);
    let watched = v.report(&critical, &["orders.dlq"]).await;
    assert_eq!(check(&watched, "orders.created", DEAD_LETTER_WATCHED).unwrap().verdict, Verdict::Pass);
    v.delete().await;
}

/// A durable quorum queue with a delivery limit, a fanout DLX to a watched DLQ, and `ack`.
async fn compliant(v: &Vhost, no_ack: bool) -> lapin::Consumer {
    v.exchange("payments.dlx", ExchangeKind::Fanout).await;
    v.queue("payments.dlq", true, &[]).await;
    v.bind("payments.dlq", "payments.dlx", "").await;
    let args = [
        ("x-queue-type", AMQPValue::LongString("quorum".into())),
        ("x-delivery-limit", AMQPValue::LongInt(5)),
        dlx_args("payments.dlx"),
    ];
    v.queue("payments", true, &args).await;
    let opts = BasicConsumeOptions { no_ack, ..BasicConsumeOptions::default() };
    v.ch.basic_consume("payments".into(), "payments-worker".into(), opts, FieldTable::default()).await.unwrap()
}

#[tokio::test]
async fn a_compliant_critical_quorum_queue_passes_every_check() {
    let v = Vhost::new().await;
    let _consumer = compliant(&v, false).await;
    let contracts = v.contracts("payments", Level::Critical);
    let all_pass = |q: &QueueReport| q.checks.len() == 9 && q.checks.iter().all(|c| c.verdict == Verdict::Pass);
    let r = v.until(&contracts, &["payments.dlq"], "payments", all_pass).await;
    let q = r.queues.iter().find(|q| q.queue == "payments").unwrap();
    let names: HashSet<&str> = q.checks.iter().map(|c| c.name.as_str()).collect();
    let queue_checks: HashSet<&str> = checks::ALL
        .iter()
        .map(|(n, _)| *n)
        // Node and exchange checks are not queue checks; replicas and the DLQ's type are
        // checked on a cluster only (this broker is one node; the cluster tests cover them).
        .filter(|n| {
            ![
                "unroutable",
                "memory-alarm",
                "disk-alarm",
                "node-running",
                "partition",
                "replicas",
                "dead-letter-queue-type",
            ]
            .contains(n)
        })
        .collect();
    assert_eq!(names, queue_checks, "every queue check was made");
    assert_eq!(q.level, Level::Critical);
    assert!(topology::failing_critical(&r).is_empty(), "{:#?}", topology::failing_critical(&r));
    assert!(r.nodes.iter().all(|n| n.checks.iter().all(|c| c.verdict == Verdict::Pass)));
    v.delete().await;
}

#[tokio::test]
async fn an_auto_ack_consumer_on_a_critical_queue_fails() {
    let v = Vhost::new().await;
    let _consumer = compliant(&v, true).await;
    let contracts = v.contracts("payments", Level::Critical);
    let r = v
        .until(&contracts, &["payments.dlq"], "payments", |q| verdict(q, checks::MANUAL_ACK) == Some(Verdict::Fail))
        .await;
    let c = check(&r, "payments", checks::MANUAL_ACK).unwrap();
    assert!(c.reason.contains("payments-worker"), "{}", c.reason);
    v.delete().await;
}

#[tokio::test]
async fn a_closed_management_port_gives_an_unreachable_report_naming_the_checks_not_made() {
    // A port that was just free and is now closed: connection refused, not a timeout.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://guest:guest@127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let err = topology::report(&http, &url, "/", &[], &HashSet::new()).await.unwrap_err();
    assert!(matches!(err, TopologyError::Unreachable { .. }), "{err:?}");
    let r = topology::report_or_unreachable(&http, &url, "/", &[], &HashSet::new()).await;
    assert!(!r.reachable);
    assert!(r.unreachable.as_deref().unwrap_or("").contains(&port.to_string()));
    assert!(r.not_checked.iter().any(|c| c.starts_with(DEAD_LETTER_WATCHED)), "{:?}", r.not_checked);
    assert_eq!(r.not_checked.len(), checks::ALL.len());
    assert!(r.queues.is_empty());
}

#[tokio::test]
async fn wrong_management_credentials_are_unauthorized_and_the_password_is_not_shown() {
    let (base, _, _) = engine::management::split_credentials(&management_url());
    let url = base.replacen("://", "://guest:not-the-Pa55word@", 1);
    let err = topology::report(&reqwest::Client::new(), &url, "/", &[], &HashSet::new()).await.unwrap_err();
    assert!(matches!(err, TopologyError::Unauthorized { status: 401, .. }), "{err:?}");
    assert!(!err.to_string().contains("not-the-Pa55word"));
}

#[tokio::test]
async fn contracts_set_from_the_console_are_audited_and_decide_the_level() {
    let db = fresh_db().await;
    let op = Principal { username: "olga".into(), role: Role::Operator };
    let mut conn = db.pool.acquire().await.unwrap();
    let set = contract::set(&mut conn, &op, Some("10.0.0.7"), "/", "orders.*", Level::Critical, Some(" money "))
        .await
        .unwrap();
    assert_eq!((set.origin, set.note.as_deref()), (Origin::Console, Some("money")));
    let again = contract::set(&mut conn, &op, None, "/", "orders.*", Level::Disposable, None).await.unwrap();
    assert_eq!(again.id, set.id, "same vhost and pattern update the row");
    let config =
        contract::from_config("/", &[("orders.*".into(), Level::Standard), ("*".into(), Level::Critical)]).unwrap();
    let all = contract::merged(contract::list(&db.pool, Some("/")).await.unwrap(), config);
    assert_eq!(contract::level_for(&all, "/", "orders.eu"), Level::Disposable, "the console row beats the file");
    assert_eq!(contract::level_for(&all, "/", "billing"), Level::Critical);

    let viewer = Principal { username: "vic".into(), role: Role::Viewer };
    let denied = contract::set(&mut conn, &viewer, None, "/", "x", Level::Critical, None).await;
    assert!(matches!(denied, Err(ContractError::Forbidden)));

    let id = set.id.unwrap();
    contract::delete(&mut conn, &op, Some("10.0.0.7"), id).await.unwrap();
    assert!(matches!(contract::delete(&mut conn, &op, None, id).await, Err(ContractError::NotFound(_))));
    assert!(contract::list(&db.pool, None).await.unwrap().is_empty());

    let filter = |action: &str| AuditFilter { action: Some(action.into()), ..AuditFilter::default() };
    let (sets, _) = audit::list(&db.pool, &filter("contract.set"), engine::auth::Role::Viewer, 10).await.unwrap();
    assert_eq!(sets.len(), 2, "one entry per set, none for the refused one");
    let detail = sets[0].detail.clone().unwrap();
    assert_eq!((detail["level"].as_str(), detail["previous_level"].as_str()), (Some("disposable"), Some("critical")));
    let (deletes, _) = audit::list(&db.pool, &filter("contract.delete"), engine::auth::Role::Viewer, 10).await.unwrap();
    assert_eq!(
        (deletes.len(), deletes[0].actor.as_str(), deletes[0].source_ip.as_deref()),
        (1, "olga", Some("10.0.0.7"))
    );
    drop(conn);
}

#[tokio::test]
async fn a_topology_rule_fires_on_a_critical_queue_without_a_dead_letter_exchange() {
    use engine::alerts::{self, AlertSettings, TopologyProbe};
    let db = testkit::fresh_db().await;
    let v = Vhost::new().await;
    v.queue("payments", true, &[]).await;
    v.until(&[], &[], "payments", |q| verdict(q, DEAD_LETTER_EXCHANGE).is_some()).await;
    sqlx::query!(
        "INSERT INTO alert_rules (name, kind, warn_threshold, crit_threshold, recover_threshold, created_by)
         VALUES ('critical queues', 'topology_critical', 1, 1, 0, 'test')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let probe = |pattern: &str| TopologyProbe {
        management_url: management_url(),
        vhost: v.name.clone(),
        config_contracts: vec![(pattern.to_string(), Level::Critical)],
    };
    let state = |pool: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, String>("SELECT state FROM alert_state").fetch_optional(&pool).await.unwrap()
    };
    // Not critical: nothing fails on a critical queue, the rule stays ok.
    let cfg = AlertSettings { topology: Some(probe("nothing-matches")), ..Default::default() };
    alerts::evaluator::evaluate_due(&db.pool, &[], &cfg).await.unwrap();
    assert_eq!(state(db.pool.clone()).await.as_deref(), Some("ok"));
    // Critical without a dead-letter exchange: it fires.
    sqlx::query!("UPDATE alert_rules SET next_eval_at = now()").execute(&db.pool).await.unwrap();
    let cfg = AlertSettings { topology: Some(probe("payments")), ..Default::default() };
    alerts::evaluator::evaluate_due(&db.pool, &[], &cfg).await.unwrap();
    assert_eq!(state(db.pool.clone()).await.as_deref(), Some("firing"));
    v.delete().await;
}

/// `ingest.auto`: a running ingester adds every dead-letter target the topology shows to the
/// watched set and ingests it, without a restart; a queue an admin stopped stays stopped.
#[tokio::test]
async fn ingest_auto_watches_every_dead_letter_target_of_the_vhost() {
    use engine::dead_letter::{
        ingest::{self, Discovery, IngestStats},
        watch::{self, Origin},
    };
    let v = Vhost::new().await;
    let db = fresh_db().await;
    v.queue(
        "auto.work",
        true,
        &[
            ("x-dead-letter-exchange", AMQPValue::LongString("".into())),
            ("x-dead-letter-routing-key", AMQPValue::LongString("auto.work.dlq".into())),
        ],
    )
    .await;
    v.queue("auto.work.dlq", true, &[]).await;
    v.queue("auto.other.dlq", true, &[]).await;
    v.queue(
        "auto.other",
        true,
        &[
            ("x-dead-letter-exchange", AMQPValue::LongString("".into())),
            ("x-dead-letter-routing-key", AMQPValue::LongString("auto.other.dlq".into())),
        ],
    )
    .await;
    // An admin stopped this one earlier: discovery must not start it again.
    let admin = engine::audit::cli_principal();
    watch::set(&db.pool, &admin, None, &["auto.other.dlq".to_string()], false, Origin::Console).await.unwrap();
    v.ch.basic_publish("".into(), "auto.work.dlq".into(), Default::default(), b"dead", Default::default())
        .await
        .unwrap()
        .await
        .unwrap();

    let base = amqp_url();
    let url = format!("{}/{}", &base[..base.rfind('/').unwrap()], encode(&v.name));
    let cfg = engine::settings::IngestSettings {
        queues: vec![],
        auto: true,
        prefetch: 10,
        batch: 10,
        linger: Duration::from_millis(5),
        commits: 2,
    };
    let discovery = Discovery { management_url: management_url(), vhost: v.name.clone() };
    let stop = tokio_util::sync::CancellationToken::new();
    let stats = std::sync::Arc::new(IngestStats::default());
    let run = tokio::spawn(ingest::run(db.pool.clone(), url, cfg, Some(discovery), stats, stop.clone()));
    eventually("the discovered DLQ ingested", Duration::from_secs(30), async || {
        match count!(&db.pool, "SELECT count(*) FROM dead_letters WHERE queue = 'auto.work.dlq'") {
            1 => Ok(()),
            n => Err(n),
        }
    })
    .await;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), run).await.unwrap().unwrap().unwrap();
    let listed: Vec<(String, bool, watch::Origin)> =
        watch::list(&db.pool).await.unwrap().into_iter().map(|w| (w.queue, w.watching, w.origin)).collect();
    assert_eq!(
        listed,
        [("auto.other.dlq".into(), false, watch::Origin::Console), ("auto.work.dlq".into(), true, watch::Origin::Auto)],
        "discovery adds what is new and leaves a stopped queue stopped"
    );
    v.delete().await;
}
