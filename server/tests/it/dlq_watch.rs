//! Starting to ingest a queue from the console: a queue that may not be a dead-letter queue
//! (consumers, nothing dead-letters into it, a broker that cannot be asked) is started only
//! with its name typed out, enforced by the server function; a plain DLQ starts at once.

use std::time::Duration;

use lapin::options::{BasicConsumeOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use serde_json::{Value, json};

use crate::chaos::amqp;
use crate::harness::{TestApp, spawn_app, spawn_app_with};

/// Declares `work` dead-lettering into `dlq` through the default exchange.
pub(crate) async fn work_and_dlq(ch: &lapin::Channel, work: &str, dlq: &str) {
    let mut args = FieldTable::default();
    args.insert(ShortString::from("x-dead-letter-exchange"), AMQPValue::LongString("".into()));
    args.insert(ShortString::from("x-dead-letter-routing-key"), AMQPValue::LongString(dlq.into()));
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare(work.into(), durable, args).await.unwrap();
    ch.queue_declare(dlq.into(), durable, FieldTable::default()).await.unwrap();
}

async fn watch(app: &TestApp, admin: &reqwest::Client, queue: &str, confirm: Option<&str>) -> Value {
    let mut form = vec![("queue", queue), ("start", "true")];
    if let Some(c) = confirm {
        form.push(("confirm", c));
    }
    let resp = admin
        .post(format!("{}/api/dead-letters/watch", app.base))
        .header("origin", &app.base)
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

async fn watched(app: &TestApp, queue: &str) -> (i64, i64) {
    let rows = count!(&app.db.pool, "SELECT count(*) FROM watched_queues WHERE queue = $1 AND watching", queue);
    let audited = count!(
        &app.db.pool,
        "SELECT count(*) FROM audit_log WHERE action = 'dlq.watch' AND target = $1",
        format!("queues:{queue}")
    );
    (rows, audited)
}

#[tokio::test]
async fn starting_a_queue_with_consumers_waits_for_its_name_typed_out_and_a_dead_letter_queue_starts_at_once() {
    let app = spawn_app().await;
    let (work, dlq) = (testkit::unique("revenant-test.watch-work"), testkit::unique("revenant-test.watch-dlq"));
    let conn = amqp().await;
    let ch = conn.create_channel().await.unwrap();
    work_and_dlq(&ch, &work, &dlq).await;
    let _service = ch
        .basic_consume(
            work.as_str().into(),
            "orders-service".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let http = reqwest::Client::new();
    testkit::until("the management API lists the consumer", Duration::from_secs(20), async || {
        let listed =
            http.get("http://127.0.0.1:15672/api/consumers/%2F").basic_auth("guest", Some("guest")).send().await;
        let text = match listed {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        text.contains("orders-service") && text.contains(&work)
    })
    .await;
    let admin = app.client(Some("admin")).await;

    let refused = watch(&app, &admin, &work, None).await;
    let reasons = json!([format!("queue `{work}` has 1 consumer"), format!("no queue dead-letters into `{work}`")]);
    assert_eq!(refused, json!({ "Confirm": { "queue": work, "reasons": reasons, "mismatch": false } }));
    assert_eq!(watched(&app, &work).await, (0, 0), "refused: not watched, not audited");
    let typo = watch(&app, &admin, &work, Some("orders")).await;
    assert_eq!(typo["Confirm"]["mismatch"], true);
    assert_eq!(watched(&app, &work).await, (0, 0));

    let done = watch(&app, &admin, &work, Some(&work)).await;
    assert_eq!(done, json!({ "Done": format!("{work}: ingesting starts within a few seconds.") }));
    assert_eq!(watched(&app, &work).await, (1, 1));

    let dlq_done = watch(&app, &admin, &dlq, None).await;
    assert!(dlq_done["Done"].as_str().is_some_and(|m| m.contains("ingesting starts")), "{dlq_done}");
    assert_eq!(watched(&app, &dlq).await, (1, 1));
    for q in [&work, &dlq] {
        ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default()).await.ok();
    }
}

#[tokio::test]
async fn with_the_management_api_unreachable_a_start_says_so_and_needs_the_name_too() {
    let app = spawn_app_with(&[("REVENANT_MANAGEMENT_URL", "http://guest:guest@127.0.0.1:9")]).await;
    let admin = app.client(Some("admin")).await;
    let refused = watch(&app, &admin, "orders.dlq", None).await;
    let why = refused["Confirm"]["reasons"][0].as_str().unwrap_or_default().to_string();
    assert!(why.starts_with("cannot check whether `orders.dlq` is a dead-letter queue"), "{refused}");
    assert!(why.contains("did not answer"), "{why}");
    assert!(!why.contains("guest:guest"), "credentials in {why}");
    assert_eq!(watched(&app, "orders.dlq").await, (0, 0));
    assert!(watch(&app, &admin, "orders.dlq", Some("orders.dlq")).await["Done"].is_string());
    assert_eq!(watched(&app, "orders.dlq").await, (1, 1));
    // An operator may not start anything, confirmed or not.
    let operator = app.client(Some("operator")).await;
    let resp = operator
        .post(format!("{}/api/dead-letters/watch", app.base))
        .header("origin", &app.base)
        .form(&[("queue", "x.dlq"), ("start", "true"), ("confirm", "x.dlq")])
        .send()
        .await
        .unwrap();
    assert!(!resp.status().is_success());
}
