//! The limits of NDJSON downloads over HTTP: a client that stops reading is cut off and its
//! slot comes back, one user holds one slot, a download is cut at its deadline, HEAD holds
//! no slot and audits nothing, a NUL byte in a filter is refused before anything is sent.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{PASSWORD, TestApp, spawn_app_with};

const BULK: &str = "/dead-letters/export.ndjson?queue=bulk.dlq";
const SMALL: &str = "/dead-letters/export.ndjson?queue=small.dlq";

/// 48 MiB of bodies in `bulk.dlq` (far more than the socket buffers hold), one message in
/// `small.dlq`.
async fn fill(app: &TestApp) {
    sqlx::query!(
        "INSERT INTO dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason, fingerprint)
         SELECT 'bulk.dlq', 'bulk-' || i, convert_to(repeat('x', 16384), 'UTF8'), 16384, '', 'bulk.dlq', 'none', 'f'
         FROM generate_series(1, 3000) i
         UNION ALL SELECT 'small.dlq', 'small', convert_to('{}', 'UTF8'), 2, '', 'small.dlq', 'none', 'f'"
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
}

/// The session cookie (`name=value`) of `user`, signed in.
async fn session(app: &TestApp, user: &str) -> String {
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let resp = client
        .post(format!("{}/api/login", app.base))
        .header("origin", &app.base)
        .form(&[("username", user), ("password", PASSWORD)])
        .send()
        .await
        .unwrap();
    let cookie = resp.headers().get_all("set-cookie").iter().next().expect("a session cookie").to_str().unwrap();
    cookie.split(';').next().unwrap().to_string()
}

/// A GET of `path` over a raw socket with a small receive buffer: reads the response head,
/// then reads nothing more.
async fn stalled_download(app: &TestApp, user: &str, path: &str) -> tokio::net::TcpStream {
    let cookie = session(app, user).await;
    let addr = app.base.trim_start_matches("http://");
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket.connect(addr.parse().unwrap()).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\n\r\n").as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(s.read_u8().await.unwrap());
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s
}

/// The audit entries of downloads: (actor, items, outcome, detail.cut_off), waiting up to
/// 10 s for `n`.
async fn exports(app: &TestApp, n: i64) -> Vec<(String, i64, String, Option<String>)> {
    for _ in 0..100 {
        if count!(&app.db.pool, "SELECT count(*) FROM audit_log WHERE action = 'dead_letter.export'") >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sqlx::query!(
        "SELECT actor, item_count, outcome, detail FROM audit_log WHERE action = 'dead_letter.export' ORDER BY id"
    )
    .fetch_all(&app.db.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|r| {
        let why = r.detail.as_ref().and_then(|d| d.get("cut_off")).and_then(Value::as_str).map(str::to_string);
        (r.actor, r.item_count, r.outcome, why)
    })
    .collect()
}

/// The status of a HEAD or a GET (its body read to the end, so a download completes).
async fn status(client: &reqwest::Client, head: bool, url: String) -> reqwest::StatusCode {
    let req = if head { client.head(url) } else { client.get(url) };
    let resp = req.send().await.unwrap();
    let status = resp.status();
    resp.bytes().await.unwrap();
    status
}

#[tokio::test]
async fn a_client_that_stops_reading_holds_one_slot_until_the_stall_limit_then_is_cut_off() {
    let app = spawn_app_with(&[("REVENANT_DOWNLOAD_STALL_SECS", "5")]).await;
    fill(&app).await;
    let (viewer, operator, admin) =
        (app.client(Some("viewer")).await, app.client(Some("operator")).await, app.client(Some("admin")).await);
    let small = format!("{}{SMALL}", app.base);

    let mut first = stalled_download(&app, "viewer", BULK).await;
    // One slot per user: the viewer's second download waits, GET and HEAD alike…
    let again = viewer.get(&small).send().await.unwrap();
    assert_eq!(again.status(), 429);
    assert_eq!(again.headers()["retry-after"], "10");
    assert_eq!(status(&viewer, true, small.clone()).await, 429);
    // …while another user still downloads.
    let other = operator.get(&small).send().await.unwrap();
    assert_eq!(other.status(), 200);
    assert_eq!(other.text().await.unwrap().lines().count(), 1);

    // Two users stalled hold both slots: a third is told to come back, and HEAD says so too.
    let second = stalled_download(&app, "operator", BULK).await;
    assert_eq!(status(&admin, false, small.clone()).await, 503);
    assert_eq!(status(&admin, true, small.clone()).await, 503);

    // The stall limit passes: both are cut off, their slots come back.
    let waited = Instant::now();
    while status(&admin, true, small.clone()).await != 200 {
        assert!(waited.elapsed() < Duration::from_secs(20), "the slots never came back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(status(&admin, false, small.clone()).await, 200);
    assert_eq!(status(&viewer, false, small.clone()).await, 200);

    // Three small downloads and the two cut off.
    let audit = exports(&app, 5).await;
    let cut: Vec<_> = audit.iter().filter(|a| a.2 == "cut_off").collect();
    assert_eq!(cut.len(), 2, "{audit:?}");
    for (actor, sent, _, why) in cut {
        assert!(actor == "viewer" || actor == "operator", "{actor}");
        assert_eq!(why.as_deref(), Some("stalled"));
        assert!(*sent < 3000, "{sent}");
    }
    // The connection was closed: what was in flight drains, then the stream ends.
    let drained = tokio::time::timeout(Duration::from_secs(20), async {
        let mut sink = Vec::new();
        let _ = first.read_to_end(&mut sink).await;
        sink
    })
    .await
    .expect("the server closed the stalled connection");
    assert!(!drained.ends_with(b"0\r\n\r\n"), "the cut-off body does not end as a complete one");
    drop(second);
}

#[tokio::test]
async fn a_download_still_running_at_its_deadline_is_cut_off_and_its_slot_comes_back() {
    let app = spawn_app_with(&[("REVENANT_DOWNLOAD_DEADLINE_SECS", "2")]).await;
    fill(&app).await;
    let viewer = app.client(Some("viewer")).await;
    let started = Instant::now();
    let mut resp = viewer.get(format!("{}{BULK}", app.base)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    // A slow reader: it never stalls, it only takes long.
    let ended = loop {
        assert!(started.elapsed() < Duration::from_secs(30), "the download ran past its deadline");
        match resp.chunk().await {
            Ok(Some(_)) => tokio::time::sleep(Duration::from_millis(20)).await,
            Ok(None) => break "complete",
            Err(_) => break "broken",
        }
    };
    assert_eq!(ended, "broken", "a cut-off download must not look complete");
    assert!(started.elapsed() >= Duration::from_secs(2));
    let audit = exports(&app, 1).await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    let (_, sent, outcome, why) = &audit[0];
    assert_eq!((outcome.as_str(), why.as_deref()), ("cut_off", Some("deadline")));
    assert!(*sent < 3000, "{sent}");
    let next = viewer.get(format!("{}{SMALL}", app.base)).send().await.unwrap();
    assert_eq!(next.status(), 200, "the slot came back");
}

#[tokio::test]
async fn a_head_of_one_message_answers_its_headers_without_an_audit_entry() {
    let app = spawn_app_with(&[]).await;
    fill(&app).await;
    let id = sqlx::query_scalar!("SELECT id FROM dead_letters WHERE queue = 'small.dlq'")
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    let viewer = app.client(Some("viewer")).await;
    let head = viewer.head(format!("{}/dead-letters/{id}/export.ndjson", app.base)).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-type"], "application/x-ndjson");
    assert_eq!(status(&viewer, true, format!("{}/dead-letters/{}/export.ndjson", app.base, id + 1)).await, 404);
    let anonymous = app.client(None).await;
    assert_eq!(status(&anonymous, true, format!("{}/dead-letters/{id}/export.ndjson", app.base)).await, 303);
    assert_eq!(count!(&app.db.pool, "SELECT count(*) FROM audit_log WHERE action = 'dead_letter.export'"), 0);
    // The GET still is.
    assert_eq!(status(&viewer, false, format!("{}/dead-letters/{id}/export.ndjson", app.base)).await, 200);
    assert_eq!(exports(&app, 1).await.len(), 1);
}

#[tokio::test]
async fn a_nul_byte_in_a_download_filter_is_a_400_naming_the_filter_before_anything_is_sent() {
    let app = spawn_app_with(&[]).await;
    fill(&app).await;
    let viewer = app.client(Some("viewer")).await;
    for (query, says) in [("queue=small%00", "queue: a NUL byte"), ("error=a%00b", "error: a NUL byte")] {
        for head in [false, true] {
            let resp = viewer
                .request(
                    if head { reqwest::Method::HEAD } else { reqwest::Method::GET },
                    format!("{}/dead-letters/export.ndjson?{query}", app.base),
                )
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 400, "{query}");
            if !head {
                let body = resp.text().await.unwrap();
                assert!(body.contains(says), "{query}: {body}");
            }
        }
    }
    // The body search compares bytes: a NUL there is a search like any other.
    let resp = viewer.get(format!("{}/dead-letters/export.ndjson?queue=small.dlq&body=%00", app.base)).send().await;
    let resp = resp.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "");
    let audit = exports(&app, 1).await;
    assert_eq!(audit.len(), 1, "only the body search ran: {audit:?}");
    assert_eq!(audit[0].2, "ok");
}
