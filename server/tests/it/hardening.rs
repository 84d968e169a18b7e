//! What an attacker's probe tried against the running console (issue 16): each test here
//! failed before its fix.

use reqwest::{StatusCode, header};

use crate::harness::{PASSWORD, TestApp, spawn_app, spawn_app_with};

async fn sign_in(app: &TestApp, fields: &[(&str, &str)], extra: &[(&str, &str)]) -> reqwest::Response {
    let client = app.client(None).await;
    let mut req = client.post(format!("{}/api/login", app.base)).header("origin", &app.base).form(fields);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn sign_in_never_redirects_off_site_and_never_panics_on_the_next_path() {
    let app = spawn_app().await;
    for next in ["/\t/evil.example/", "/\n/evil.example", "/\r\nSet-Cookie: a=b", "/x\x7fy", "//evil.example"] {
        let resp = sign_in(&app, &[("username", "viewer"), ("password", PASSWORD), ("next", next)], &[]).await;
        assert!(resp.status().is_success() || resp.status().is_redirection(), "{next:?}: {}", resp.status());
        let to = resp.headers().get(header::LOCATION).map(|l| l.to_str().unwrap().to_string());
        assert_eq!(to.as_deref(), Some("/"), "{next:?}");
    }
    let resp =
        sign_in(&app, &[("username", "viewer"), ("password", PASSWORD), ("next", "/outbox?status=failed")], &[]).await;
    assert_eq!(resp.headers().get(header::LOCATION).unwrap(), "/outbox?status=failed");
}

#[tokio::test]
async fn an_untrusted_peer_cannot_dodge_the_throttle_with_x_forwarded_for() {
    let app = spawn_app().await;
    for i in 0..engine::auth::MAX_FAILURES {
        let xff = format!("198.51.100.{i}");
        let resp =
            sign_in(&app, &[("username", "viewer"), ("password", "wrong password")], &[("x-forwarded-for", &xff)])
                .await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    }
    let resp =
        sign_in(&app, &[("username", "viewer"), ("password", PASSWORD)], &[("x-forwarded-for", "198.51.100.99")]).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN, "the attempts counted against the real peer, 127.0.0.1");
    let ips: Vec<String> =
        sqlx::query_scalar!("SELECT DISTINCT source_ip FROM login_failures").fetch_all(&app.db.pool).await.unwrap();
    assert_eq!(ips, ["127.0.0.1"]);
}

#[tokio::test]
async fn a_trusted_proxy_forwards_the_client_address_and_one_client_cannot_lock_out_another() {
    let app = spawn_app_with(&[("REVENANT_TRUSTED_PROXIES", "127.0.0.1")]).await;
    for _ in 0..engine::auth::MAX_FAILURES + 1 {
        sign_in(&app, &[("username", "viewer"), ("password", "wrong password")], &[("x-forwarded-for", "203.0.113.5")])
            .await;
    }
    let attacker =
        sign_in(&app, &[("username", "viewer"), ("password", PASSWORD)], &[("x-forwarded-for", "203.0.113.5")]).await;
    assert_eq!(attacker.status(), StatusCode::FORBIDDEN);
    let user =
        sign_in(&app, &[("username", "viewer"), ("password", PASSWORD)], &[("x-forwarded-for", "192.0.2.44")]).await;
    assert!(user.status().is_success() || user.status().is_redirection(), "{}", user.status());
}

#[tokio::test]
async fn the_proxy_user_header_is_believed_only_from_a_trusted_proxy() {
    let page = async |app: &TestApp| {
        let anon = app.client(None).await;
        anon.get(format!("{}/outbox", app.base)).header("x-remote-user", "admin").send().await.unwrap().status()
    };
    let untrusted =
        spawn_app_with(&[("REVENANT_PROXY_USER_HEADER", "X-Remote-User"), ("REVENANT_TRUSTED_PROXIES", "192.0.2.1")])
            .await;
    assert_eq!(page(&untrusted).await, StatusCode::SEE_OTHER, "a header from 127.0.0.1 must not sign anyone in");
    let trusted =
        spawn_app_with(&[("REVENANT_PROXY_USER_HEADER", "X-Remote-User"), ("REVENANT_TRUSTED_PROXIES", "127.0.0.1")])
            .await;
    assert_eq!(page(&trusted).await, StatusCode::OK);
}

#[tokio::test]
async fn hsts_is_sent_with_secure_cookies_only() {
    let hsts = async |app: &TestApp| {
        let resp = app.client(None).await.get(format!("{}/login", app.base)).send().await.unwrap();
        resp.headers().get(header::STRICT_TRANSPORT_SECURITY).map(|v| v.to_str().unwrap().to_string())
    };
    let plain = spawn_app().await;
    assert_eq!(hsts(&plain).await, None);
    let tls = spawn_app_with(&[("REVENANT_SECURE_COOKIES", "true")]).await;
    assert!(hsts(&tls).await.is_some_and(|v| v.starts_with("max-age=")));
}

#[tokio::test]
async fn only_the_configured_host_is_served_but_probes_answer_any() {
    let app = spawn_app_with(&[("REVENANT_PUBLIC_URL", "https://revenant.example.com")]).await;
    let anon = app.client(None).await;
    let get = async |path: &str, host: &str| {
        anon.get(format!("{}{path}", app.base)).header(header::HOST, host).send().await.unwrap().status()
    };
    assert_eq!(get("/login", "attacker.example").await, StatusCode::MISDIRECTED_REQUEST);
    assert_eq!(get("/login", "revenant.example.com").await, StatusCode::OK);
    assert_eq!(get("/login", "REVENANT.example.com:443").await, StatusCode::OK);
    assert_eq!(get("/healthz", "10.1.2.3:3000").await, StatusCode::OK);
}

#[tokio::test]
async fn metrics_need_a_token_when_the_console_is_public_unless_opened_explicitly() {
    let metrics = async |app: &TestApp, token: Option<&str>| {
        let mut req = app.client(None).await.get(format!("{}/metrics", app.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send().await.unwrap().status()
    };
    let public = spawn_app_with(&[("REVENANT_PUBLIC_URL", "$BASE")]).await;
    assert_eq!(metrics(&public, None).await, StatusCode::UNAUTHORIZED);
    let opened = spawn_app_with(&[("REVENANT_PUBLIC_URL", "$BASE"), ("REVENANT_METRICS_PUBLIC", "true")]).await;
    assert_eq!(metrics(&opened, None).await, StatusCode::OK);
    let token = spawn_app_with(&[("REVENANT_PUBLIC_URL", "$BASE"), ("REVENANT_METRICS_TOKEN", "s3cret")]).await;
    assert_eq!(metrics(&token, Some("wrong")).await, StatusCode::UNAUTHORIZED);
    assert_eq!(metrics(&token, Some("s3cret")).await, StatusCode::OK);
}

#[tokio::test]
async fn readyz_names_dependencies_without_versions_or_driver_errors() {
    let app = spawn_app().await;
    let body: serde_json::Value =
        app.client(None).await.get(format!("{}/readyz", app.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(body["ready"], true, "{body}");
    for d in body["dependencies"].as_array().unwrap() {
        let keys: Vec<&String> = d.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["name", "ok"], "{body}");
    }
}

#[tokio::test]
async fn an_oversized_body_is_413_and_a_nul_byte_is_400_naming_the_field() {
    let app = spawn_app().await;
    let anon = app.client(None).await;
    let login = || anon.post(format!("{}/api/login", app.base)).header("origin", &app.base);
    let huge = format!("username={}&password=x", "a".repeat(10 << 20));
    let resp = login().header("content-type", "application/x-www-form-urlencoded").body(huge).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Without a Content-Length (chunked), the limit still holds.
    let chunks = futures::stream::iter((0..12).map(|_| Ok::<_, std::io::Error>(vec![b'a'; 1 << 20])));
    let resp = login()
        .header("content-type", "application/x-www-form-urlencoded")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let resp = login().form(&[("username", "vie\0wer"), ("password", "x")]).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.text().await.unwrap().contains("username: contains a NUL byte"));
}

#[tokio::test]
async fn a_huge_silence_is_a_field_error_not_an_overflow() {
    let app = spawn_app().await;
    let admin = app.client(Some("admin")).await;
    let resp = admin
        .post(format!("{}/api/alerts/silence", app.base))
        .header("origin", &app.base)
        .form(&[("id", "1"), ("amount", &i64::MAX.to_string()), ("unit", "hours"), ("reason", "x")])
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.text().await.unwrap();
    assert!(status.is_success() && body.contains("until") && body.contains("up to 30 days"), "{status}: {body}");
}

#[tokio::test]
async fn a_viewer_sees_only_whether_a_webhook_was_sent() {
    let app = spawn_app().await;
    let rule = sqlx::query_scalar!(
        "INSERT INTO alert_rules (name, kind, warn_threshold, crit_threshold, recover_threshold, webhook_url, created_by)
         VALUES ('r', 'new_failure_group', 1, 2, 0, 'http://10.0.0.1:6379/', 'test') RETURNING id",
    )
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    sqlx::query!(
        "WITH e AS (INSERT INTO alert_events (rule_id, from_state, to_state, value, threshold, message)
                    VALUES ($1, 'ok', 'firing', 1, 1, 'm') RETURNING id)
         INSERT INTO webhook_deliveries (event_id, attempt, at, error, delivered)
         SELECT id, 1, now(), 'connection refused (os error 111)', false FROM e",
        rule
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    let deliveries = async |user: &str| {
        let c = app.client(Some(user)).await;
        let resp = c
            .post(format!("{}/api/alerts/deliveries", app.base))
            .header("origin", &app.base)
            .form(&[("id", rule.to_string())])
            .send()
            .await
            .unwrap();
        resp.text().await.unwrap()
    };
    assert!(deliveries("admin").await.contains("connection refused"));
    let seen = deliveries("viewer").await;
    assert!(!seen.contains("connection refused") && seen.contains("\"delivered\":false"), "{seen}");
}
