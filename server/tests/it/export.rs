//! NDJSON downloads of dead letters over HTTP: what the list's filter selects, one JSON line
//! per message, audited; one message; refusals.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::harness::{TestApp, spawn_app, spawn_app_with};

/// Stores a dead letter ingested `mins_ago` minutes ago; returns its id.
pub(crate) async fn stored(app: &TestApp, queue: &str, body: &[u8], status: &str, mins_ago: f64) -> i64 {
    let headers = json!({ "x-attempt": { "t": "i32", "v": 3 }, "x-tenant": { "t": "longstr", "v": "acme" } });
    sqlx::query_scalar!(
        "INSERT INTO dead_letters (queue, natural_key, message_id, body, body_size, exchange, routing_key, reason,
            fingerprint, status, headers, original_queue, death_count, ingested_at)
         VALUES ($1, gen_random_uuid()::text, 'm-' || $1, $2, $3, 'dlx', $1, 'rejected', 'f', $4, $5, 'orders', 1,
            now() - make_interval(secs => $6::float8 * 60))
         RETURNING id",
        queue,
        body,
        body.len() as i32,
        status,
        headers,
        mins_ago
    )
    .fetch_one(&app.db.pool)
    .await
    .unwrap()
}

/// The audit entries of downloads, waiting up to 5 s for `n` (a list download is audited
/// when its stream ends, just after the body does).
async fn exports(app: &TestApp, n: i64) -> Vec<(String, Option<String>, Option<Value>, i64, String)> {
    for _ in 0..50 {
        if count!(&app.db.pool, "SELECT count(*) FROM audit_log WHERE action = 'dead_letter.export'") >= n {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    sqlx::query!(
        "SELECT actor, target, filter, item_count, outcome FROM audit_log
         WHERE action = 'dead_letter.export' ORDER BY id"
    )
    .fetch_all(&app.db.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|r| (r.actor, r.target, r.filter, r.item_count, r.outcome))
    .collect()
}

fn lines(text: &str) -> Vec<Value> {
    assert!(text.is_empty() || text.ends_with('\n'), "every line ends with a newline: {text:?}");
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

#[tokio::test]
async fn a_list_download_holds_what_the_filter_selects_newest_first_and_is_audited() {
    let app = spawn_app().await;
    let text = stored(&app, "orders.dlq", br#"{"sku":"A-1"}"#, "awaiting", 3.0).await;
    let binary = stored(&app, "orders.dlq", &[0xff, 0xfe, 0x00, 0x41], "awaiting", 2.0).await;
    let elsewhere = stored(&app, "other.dlq", b"other", "awaiting", 1.0).await;
    let archived = stored(&app, "orders.dlq", b"archived", "archived", 1.0).await;
    let viewer = app.client(Some("viewer")).await;

    let resp = viewer.get(format!("{}/dead-letters/export.ndjson?queue=orders.dlq", app.base)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let h = resp.headers();
    assert_eq!(h["content-type"], "application/x-ndjson");
    let disposition = h["content-disposition"].to_str().unwrap();
    assert!(disposition.starts_with("attachment; filename=\"dead-letters-"), "{disposition}");
    assert!(disposition.ends_with(".ndjson\""), "{disposition}");
    assert_eq!(h["cache-control"], "no-store");
    let got = lines(&resp.text().await.unwrap());
    // The list's own filter: the default status (awaiting) and the queue; the list's order.
    let ids: Vec<i64> = got.iter().map(|l| l["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [binary, text], "newest first, nothing from other.dlq ({elsewhere}) or archived ({archived})");
    let (b, t) = (&got[0], &got[1]);
    assert_eq!(t["body_encoding"], "utf8");
    assert_eq!(t["body"], r#"{"sku":"A-1"}"#);
    assert_eq!(b["body_encoding"], "base64");
    let decoded = base64::engine::general_purpose::STANDARD.decode(b["body"].as_str().unwrap()).unwrap();
    assert_eq!(decoded, [0xff_u8, 0xfe, 0x00, 0x41]);
    assert_eq!(b["body_size"], 4);
    assert_eq!(t["headers"]["x-attempt"], json!({ "t": "i32", "v": 3 }), "typed as stored");
    assert_eq!(t["queue"], "orders.dlq");
    assert_eq!(t["status"], "awaiting");
    assert_eq!(t["reason"], "rejected");
    assert_eq!(t["original_queue"], "orders");
    assert_eq!(t["properties"]["message_id"], "m-orders.dlq");
    assert!(t["ingested_at"].is_string());

    let all = viewer
        .get(format!("{}/dead-letters/export.ndjson?queue=orders.dlq&status=all", app.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let ids: Vec<i64> = lines(&all).iter().map(|l| l["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [archived, binary, text]);

    let mut audit = exports(&app, 2).await;
    assert_eq!(audit.len(), 2, "{audit:?}");
    audit.sort_by_key(|a| a.3);
    let (actor, target, filter, n, outcome) = &audit[0];
    assert_eq!((actor.as_str(), *n, outcome.as_str()), ("viewer", 2, "ok"));
    assert_eq!(target.as_deref(), Some("2 dead letters matching a filter"));
    let filter = filter.as_ref().unwrap();
    assert_eq!((&filter["queue"], &filter["status"]), (&json!("orders.dlq"), &json!("awaiting")));
    assert_eq!(audit[1].3, 3);
}

#[tokio::test]
async fn a_download_the_client_leaves_stops_there_and_is_audited_as_aborted() {
    let app = spawn_app().await;
    // 48 MiB of bodies: far more than the socket buffers hold, so the server is still sending
    // when the client goes away.
    sqlx::query!(
        "INSERT INTO dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason, fingerprint)
         SELECT 'bulk.dlq', 'bulk-' || i, convert_to(repeat('x', 16384), 'UTF8'), 16384, '', 'bulk.dlq', 'none', 'f'
         FROM generate_series(1, 3000) i"
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    let viewer = app.client(Some("viewer")).await;
    let mut resp = viewer.get(format!("{}/dead-letters/export.ndjson?queue=bulk.dlq", app.base)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.chunk().await.unwrap().is_some_and(|c| !c.is_empty()), "the first lines arrive");
    drop(resp);
    let audit = exports(&app, 1).await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    let (_, _, _, sent, outcome) = &audit[0];
    assert_eq!(outcome, "aborted");
    assert!(*sent < 3000, "the stream stopped when the client left, after {sent} messages");
}

#[tokio::test]
async fn one_dead_letter_downloads_as_one_line_and_is_audited() {
    let app = spawn_app().await;
    let id = stored(&app, "orders.dlq", b"hello\nworld", "archived", 1.0).await;
    let viewer = app.client(Some("viewer")).await;
    let resp = viewer.get(format!("{}/dead-letters/{id}/export.ndjson", app.base)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    assert_eq!(resp.headers()["content-disposition"], format!("attachment; filename=\"dead-letter-{id}.ndjson\""));
    let got = lines(&resp.text().await.unwrap());
    assert_eq!(got.len(), 1);
    assert_eq!((got[0]["id"].as_i64(), got[0]["body"].as_str()), (Some(id), Some("hello\nworld")));
    let audit = exports(&app, 1).await;
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].1.as_deref(), Some(format!("dead letter #{id}").as_str()));
    assert_eq!(audit[0].3, 1);

    let missing = viewer.get(format!("{}/dead-letters/{}/export.ndjson", app.base, id + 1)).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(exports(&app, 1).await.len(), 1, "nothing sent, nothing audited");
}

#[tokio::test]
async fn anonymous_and_malformed_download_requests_are_refused() {
    let app = spawn_app().await;
    stored(&app, "orders.dlq", b"secret", "awaiting", 1.0).await;
    let anonymous = app.client(None).await;
    for path in ["/dead-letters/export.ndjson?queue=orders.dlq", "/dead-letters/1/export.ndjson"] {
        let resp = anonymous.get(format!("{}{path}", app.base)).send().await.unwrap();
        assert_eq!(resp.status(), 303, "{path}");
        let to = resp.headers()["location"].to_str().unwrap().to_string();
        assert!(to.starts_with("/login?next="), "{path} → {to}");
        // Once signed in, the page the download is made from (the app cannot fetch a file).
        assert!(
            to.ends_with("next=%2Fdead-letters%3Fqueue%3Dorders.dlq") || to.ends_with("next=%2Fdead-letters%2F1"),
            "{to}"
        );
        assert!(!resp.text().await.unwrap().contains("secret"));
    }
    let viewer = app.client(Some("viewer")).await;
    for (query, says) in [
        ("group=abc", "group: `abc` is not a group number"),
        ("newer_than_mins=-5", "newer than: `-5` is not a number of minutes"),
        ("status=lost", "unknown status `lost`"),
    ] {
        let resp = viewer.get(format!("{}/dead-letters/export.ndjson?{query}", app.base)).send().await.unwrap();
        assert_eq!(resp.status(), 400, "{query}");
        let body = resp.text().await.unwrap();
        assert!(body.contains(says), "{query}: {body}");
    }
    let resp = viewer.get(format!("{}/dead-letters/abc/export.ndjson", app.base)).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    // A HEAD (a link checker, a browser's preflight of a download) runs no export.
    let head = viewer.head(format!("{}/dead-letters/export.ndjson?queue=orders.dlq", app.base)).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-type"], "application/x-ndjson");
    let head = viewer.head(format!("{}/dead-letters/export.ndjson?status=lost", app.base)).send().await.unwrap();
    assert_eq!(head.status(), 400);
    assert_eq!(count!(&app.db.pool, "SELECT count(*) FROM audit_log WHERE action = 'dead_letter.export'"), 0);
}

#[tokio::test]
async fn the_message_page_links_its_queue_in_the_management_ui_without_credentials() {
    let app = spawn_app_with(&[("REVENANT_MANAGEMENT_URL", "http://ops:s3cret@mq.example:15672/")]).await;
    let id = stored(&app, "orders dlq", b"{}", "awaiting", 1.0).await;
    let viewer = app.client(Some("viewer")).await;
    let html = viewer.get(format!("{}/dead-letters/{id}", app.base)).send().await.unwrap().text().await.unwrap();
    let vhost = types::routes::encode(&engine::settings::vhost_of(&testkit::amqp_url()));
    let link = format!("http://mq.example:15672/#/queues/{vhost}/orders%20dlq");
    assert!(html.contains(&format!("href=\"{link}\"")), "no {link} in {html}");
    assert!(!html.contains("s3cret"), "the management credentials reached the page");
    assert!(html.contains(&format!("href=\"/dead-letters/{id}/export.ndjson\"")), "no download link");
}
