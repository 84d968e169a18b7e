//! What the second security probe tried against the running console (issue 33): each test
//! here failed before its fix.

use reqwest::{StatusCode, header};
use serde_json::Value;

use crate::export::stored;
use crate::harness::{PASSWORD, TestApp, spawn_app};

async fn sign_in_to(app: &TestApp, next: &str) -> Option<String> {
    let resp = app
        .client(None)
        .await
        .post(format!("{}/api/login", app.base))
        .header("origin", &app.base)
        .form(&[("username", "viewer"), ("password", PASSWORD), ("next", next)])
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success() || resp.status().is_redirection(), "{next:?}: {}", resp.status());
    resp.headers().get(header::LOCATION).map(|l| l.to_str().unwrap().to_string())
}

/// A server function called as `user`, with a form; its status and body.
async fn call(app: &TestApp, user: &str, endpoint: &str, form: &[(&str, &str)]) -> (StatusCode, String) {
    let client = app.client(Some(user)).await;
    let resp = client
        .post(format!("{}/api/{endpoint}", app.base))
        .header("origin", &app.base)
        .form(form)
        .send()
        .await
        .unwrap();
    (resp.status(), resp.text().await.unwrap())
}

#[tokio::test]
async fn sign_in_after_a_path_some_reader_takes_for_another_host_lands_on_the_overview() {
    let app = spawn_app().await;
    for next in [
        "/.//evil.example/",
        "/./..//evil.example",
        "/%2f%2fevil.example",
        "/%2F%2Fevil.example/",
        "/%252f%252fevil.example",
        "/%5cevil.example",
        "/%09/evil.example",
        "/x/%2e%2e%2f%2fevil.example",
        "/%2e%2e//evil.example",
        "/\t/evil.example",
        "/\\evil.example",
    ] {
        assert_eq!(sign_in_to(&app, next).await.as_deref(), Some("/"), "{next:?}");
    }
    assert_eq!(sign_in_to(&app, "/outbox/orders%2Fv2/42").await.as_deref(), Some("/outbox/orders%2Fv2/42"));
}

#[tokio::test]
async fn a_signed_out_visit_to_a_path_naming_another_host_asks_to_sign_in_with_no_next_off_the_console() {
    let app = spawn_app().await;
    let anon = app.client(None).await;
    for path in ["//evil.example/", "/%2f%2fevil.example", "/%5cevil.example"] {
        let resp = anon.get(format!("{}{path}", app.base)).send().await.unwrap();
        assert!(resp.status().is_redirection(), "{path}: {}", resp.status());
        assert_eq!(resp.headers().get(header::LOCATION).unwrap(), "/login?next=%2F", "{path}");
    }
}

#[tokio::test]
async fn a_send_tests_result_is_read_in_the_audit_log_by_admins_only() {
    let app = spawn_app().await;
    let rule = sqlx::query_scalar!(
        "INSERT INTO alert_rules (name, kind, warn_threshold, crit_threshold, recover_threshold, webhook_url, created_by)
         VALUES ('r', 'new_failure_group', 1, 2, 0, 'http://10.0.0.1:6379/', 'test') RETURNING id",
    )
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    let (status, said) = call(&app, "admin", "alerts/test", &[("id", &rule.to_string())]).await;
    assert!(status.is_success() && said.contains("not delivered"), "{status}: {said}");
    let tests = async |user: &str, text: &str| -> Vec<Value> {
        let (status, body) = call(&app, user, "audit/list", &[("action", "alert.test"), ("text", text)]).await;
        assert!(status.is_success(), "{user}: {status}: {body}");
        let page: Value = serde_json::from_str(&body).unwrap();
        page["rows"].as_array().unwrap().clone()
    };
    let seen = tests("admin", "").await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0]["detail"].as_str().unwrap().contains("10.0.0.1"), "{seen:?}");
    assert_eq!(tests("admin", "10.0.0.1").await.len(), 1, "an admin's search looks into the detail");
    for user in ["viewer", "operator"] {
        let rows = tests(user, "").await;
        assert_eq!(rows.len(), 1, "{user} sees that a test was sent: {rows:?}");
        assert_eq!(rows[0]["outcome"], "failed", "{user}: {rows:?}");
        assert_eq!(rows[0]["detail"], app::pages::audit::api::ADMIN_ONLY, "{user}: {rows:?}");
        assert!(tests(user, "10.0.0.1").await.is_empty(), "{user}'s search must not tell what the detail holds");
    }
}

#[tokio::test]
async fn a_nul_byte_is_a_400_whatever_the_body_type() {
    let app = spawn_app().await;
    let anon = app.client(None).await;
    let form = "username=vie%00wer&password=x";
    let bodies: &[(&str, &[u8])] = &[
        ("text/plain", form.as_bytes()),
        ("text/plain; charset=utf-8", b"username=vie\0wer&password=x"),
        ("APPLICATION/X-WWW-FORM-URLENCODED", form.as_bytes()),
        ("application/x-www-form-urlencoded", form.as_bytes()),
        ("application/json", br#"{"username":"vie\u0000wer","password":"x"}"#),
        ("application/json", form.as_bytes()),
        (
            "multipart/form-data; boundary=b",
            b"--b\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nvie\0wer\r\n--b--\r\n",
        ),
        ("application/cbor", b"\xa2\x68username\x67vie\x00wer\x68password\x61x"),
        ("application/octet-stream", form.as_bytes()),
        ("", form.as_bytes()),
    ];
    for (content_type, body) in bodies {
        let mut req = anon.post(format!("{}/api/login", app.base)).header("origin", &app.base);
        if !content_type.is_empty() {
            req = req.header(header::CONTENT_TYPE, *content_type);
        }
        let resp = req.body(body.to_vec()).send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{content_type:?}: {text}");
        assert!(text.contains("contains a NUL byte"), "{content_type:?}: {text}");
    }
}

#[tokio::test]
async fn a_body_that_is_not_utf8_is_a_400_not_a_500() {
    let app = spawn_app().await;
    let anon = app.client(None).await;
    let cbor: &[u8] = b"\xa2\x68username\x66viewer\x68password\x61x";
    let resp = anon
        .post(format!("{}/api/login", app.base))
        .header("origin", &app.base)
        .header(header::CONTENT_TYPE, "application/cbor")
        .body(cbor.to_vec())
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("not UTF-8"), "{text}");
}

#[tokio::test]
async fn a_header_name_typed_with_a_control_character_is_refused_saying_where() {
    let app = spawn_app().await;
    let id = stored(&app, "orders.dlq", b"{}", "awaiting", 1.0).await.to_string();
    let (status, body) = call(
        &app,
        "operator",
        "dead-letters/edit",
        &[("id", &id), ("headers", r#"{"x-tenant": "acme", "x-new\nline": 1}"#), ("note", "")],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("x-new\\\\nline") && body.contains("U+000A at character 6"), "{body}");

    let create = async |order_header: &str| {
        let form = [
            ("selection[Ids][0]", id.as_str()),
            ("target[mode]", "origin"),
            ("target[exchange]", ""),
            ("target[routing_key]", ""),
            ("target[queue]", ""),
            ("options[rate_per_sec]", ""),
            ("options[start_in_mins]", ""),
            ("options[order][Header]", order_header),
            ("options[auto_pause_percent]", ""),
            ("options[confirm_count]", ""),
        ];
        call(&app, "operator", "replay/create", &form).await
    };
    for (header, why) in [("order\nid", "U+000A at character 6"), ("\u{1b}[2Jid", "U+001B at character 1")] {
        let (status, body) = create(header).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{header:?}: {body}");
        assert!(body.contains("order by header") && body.contains(why), "{header:?}: {body}");
    }
    let (status, body) = create("order-id").await;
    assert!(status.is_success(), "a readable header name is taken: {status}: {body}");
}
