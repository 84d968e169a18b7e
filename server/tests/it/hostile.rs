//! Hostile messages in a watched DLQ (design invariant 10, issue 33): frames a publisher can
//! send that once crashed `serve` (tables nested deep enough to overflow the AMQP parser's
//! stack) or stalled its DLQ for good (a header name that is not UTF-8), written with a raw
//! AMQP writer where client libraries refuse to build them. After them the real `serve` is
//! still up, every other message of the queue is stored, the queue is empty, and each
//! message's page and download answer in full.

use std::time::Duration;

use crate::chaos::{kill9, spawn};

mod raw_amqp;
mod tables;

use raw_amqp::{RawMessage, RawPublisher};
use tables::*;

/// A vhost of its own (the management API), with the guest user allowed in it, and one queue.
async fn vhost_with_queue(vhost: &str, queue: &str) {
    let http = reqwest::Client::new();
    let api = "http://127.0.0.1:15672/api";
    let put = async |path: String, body: serde_json::Value| {
        let r = http.put(format!("{api}/{path}")).basic_auth("guest", Some("guest")).json(&body).send().await;
        assert!(r.expect("management API").status().is_success(), "PUT {path}");
    };
    put(format!("vhosts/{vhost}"), serde_json::json!({})).await;
    put(format!("permissions/{vhost}/guest"), serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"}))
        .await;
    put(format!("queues/{vhost}/{queue}"), serde_json::json!({"durable": true})).await;
}

async fn delete_vhost(vhost: &str) {
    let _ = reqwest::Client::new()
        .delete(format!("http://127.0.0.1:15672/api/vhosts/{vhost}"))
        .basic_auth("guest", Some("guest"))
        .send()
        .await;
}

async fn queue_messages(vhost: &str, queue: &str) -> Option<i64> {
    let r = reqwest::Client::new()
        .get(format!("http://127.0.0.1:15672/api/queues/{vhost}/{queue}"))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .ok()?;
    r.json::<serde_json::Value>().await.ok()?.get("messages")?.as_i64()
}

/// The hostile messages, by message id; each must be stored and shown. (A table with an unknown
/// type tag or a length past its end never reaches a queue: RabbitMQ closes the publisher's
/// connection with INTERNAL_ERROR. The parser's handling of those is unit-tested in
/// `engine::dead_letter::unreadable`.)
fn hostile() -> Vec<RawMessage> {
    let m = |id: &str, headers: Vec<u8>, body: Vec<u8>| RawMessage { headers, message_id: id.into(), body };
    let nul_crlf = table(&[(b"a\0b\r\nc", long_str(b"x\0\r\ny")), (b"\r\n", long_str(b"\0"))]);
    let huge_array: Vec<Vec<u8>> = (0..100_000).map(|_| vec![b'V']).collect();
    vec![
        m("deep-64", nested(64), b"{}".to_vec()),
        m("deep-1000", nested(1_000), b"{}".to_vec()),
        m("deep-10000", nested(10_000), b"{}".to_vec()),
        m("name-not-utf8", table(&[(b"\xff\xfe-name", long_str(b"v")), (b"ok", long_str(b"w"))]), b"{}".to_vec()),
        m("value-not-utf8", table(&[(b"v", long_str(b"\xc3\x28 \xff"))]), vec![0xff, 0xfe, 0x00]),
        m("nul-and-crlf", nul_crlf, b"line1\r\nline2\0".to_vec()),
        m("header-120kb", table(&[(b"big", long_str(&vec![b'h'; 120 * 1024]))]), b"{}".to_vec()),
        m("body-10mb", table(&[]), vec![b'b'; 10 * 1024 * 1024]),
        m("every-type", every_type(), b"{}".to_vec()),
        m("arrays", table(&[(b"empty", array(&[])), (b"huge", array(&huge_array))]), b"{}".to_vec()),
    ]
}

async fn signed_in(base: &str) -> reqwest::Client {
    let client = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let r = client
        .post(format!("{base}/api/login"))
        .header("origin", base)
        .form(&[("username", "viewer"), ("password", crate::harness::PASSWORD)])
        .send()
        .await
        .expect("login");
    assert!(r.status().is_success() || r.status().is_redirection(), "login: {}", r.status());
    client
}

#[tokio::test]
async fn hostile_frames_in_a_watched_dlq_are_stored_and_the_queue_keeps_flowing() {
    let db = testkit::fresh_db().await;
    engine::auth::create_user(&db.pool, "viewer", crate::harness::PASSWORD, engine::auth::Role::Viewer)
        .await
        .expect("user");
    let vhost = testkit::unique("revenant-hostile");
    let queue = "hostile.dlq";
    vhost_with_queue(&vhost, queue).await;

    // Ordinary messages between the hostile ones: each must be stored too.
    let mut publisher = RawPublisher::connect(&vhost).await.expect("raw AMQP connection");
    let mut expected = Vec::new();
    for (i, m) in hostile().into_iter().enumerate() {
        let ok = RawMessage { headers: table(&[]), message_id: format!("ok-{i}"), body: b"{\"ok\":true}".to_vec() };
        publisher.publish(queue, &ok).await.expect("ordinary message confirmed");
        expected.push(ok.message_id);
        publisher.publish(queue, &m).await.unwrap_or_else(|e| panic!("{}: {e}", m.message_id));
        expected.push(m.message_id);
    }
    publisher.close().await;

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let amqp = format!("amqp://guest:guest@127.0.0.1:5672/{vhost}");
    let mut serve = spawn(
        "serve",
        &db.url,
        &[
            ("REVENANT_BIND", &format!("127.0.0.1:{port}")),
            ("AMQP_URL", &amqp),
            ("REVENANT_RELAY", "false"),
            ("REVENANT_ALERTS", "false"),
            ("REVENANT_REPLAY", "false"),
            ("REVENANT_MANAGEMENT_URL", "off"),
            ("REVENANT_INGEST_QUEUES", queue),
        ],
    );
    let stored = async || -> i64 {
        sqlx::query_scalar!("SELECT count(*) FROM dead_letters WHERE queue = $1", queue)
            .fetch_one(&db.pool)
            .await
            .ok()
            .flatten()
            .unwrap_or(0)
    };
    testkit::until("every message stored", Duration::from_secs(60), async || stored().await == expected.len() as i64)
        .await;
    assert!(serve.try_wait().expect("serve").is_none(), "serve is still running");
    testkit::until("the DLQ drained", Duration::from_secs(20), async || queue_messages(&vhost, queue).await == Some(0))
        .await;

    let rows: Vec<(i64, Option<String>, Option<String>)> =
        sqlx::query!("SELECT id, message_id, unreadable FROM dead_letters WHERE queue = $1 ORDER BY id", queue)
            .fetch_all(&db.pool)
            .await
            .expect("rows")
            .into_iter()
            .map(|r| (r.id, r.message_id, r.unreadable))
            .collect();
    let ids: Vec<String> = rows.iter().filter_map(|r| r.1.clone()).collect();
    assert_eq!(ids, expected, "every message, in the queue's order");
    let note = |id: &str| rows.iter().find(|r| r.1.as_deref() == Some(id)).and_then(|r| r.2.clone());
    for deep in ["deep-64", "deep-1000", "deep-10000"] {
        assert!(note(deep).is_some_and(|n| n.contains("nested too deep")), "{deep}: {:?}", note(deep));
    }
    assert!(note("name-not-utf8").is_some_and(|n| n.contains("is not UTF-8")), "{:?}", note("name-not-utf8"));
    assert!(note("arrays").is_some_and(|n| n.contains("too many entries")), "{:?}", note("arrays"));
    for readable in ["every-type", "value-not-utf8", "nul-and-crlf", "header-120kb", "body-10mb", "ok-0"] {
        assert_eq!(note(readable), None, "{readable} was read whole");
    }

    // Every page and download answers in full, for a viewer.
    let client = signed_in(&base).await;
    for (id, mid, note) in &rows {
        let page = client.get(format!("{base}{}", types::routes::dead_letter(*id))).send().await.expect("page");
        assert_eq!(page.status(), 200, "page of {mid:?}");
        let html = page.text().await.expect("page body");
        assert!(!html.contains("Internal error"), "page of {mid:?}");
        if note.is_some() {
            assert!(html.contains("Not everything in this message could be read"), "page of {mid:?} says so");
        }
        let one = client.get(format!("{base}{}", types::routes::dead_letter_export(*id))).send().await.expect("get");
        assert_eq!(one.status(), 200, "download of {mid:?}");
        let line = one.bytes().await.expect("download body");
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap_or_else(|e| panic!("{mid:?}: {e}"));
        assert_eq!(v["properties"]["message_id"].as_str(), mid.as_deref());
    }
    let all = client
        .get(format!("{base}{}", types::routes::dead_letters_export(&format!("?queue={queue}&status=all"))))
        .send()
        .await
        .expect("list download");
    assert_eq!(all.status(), 200);
    let text = all.bytes().await.expect("whole list download");
    assert_eq!(text.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count(), expected.len(), "every line");
    let cards = client.get(format!("{base}/dead-letters")).send().await.expect("cards");
    let html = cards.text().await.expect("cards body");
    assert!(html.contains("5 unreadable messages"), "the DLQ card counts them");

    kill9(&mut serve);
    delete_vhost(&vhost).await;
}
