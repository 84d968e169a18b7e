//! Every server function and page is guarded: anonymous callers, viewers and foreign
//! origins are refused where they should be. The lists come from the running code (the
//! registered server functions), so a new unguarded function makes these tests fail.

use reqwest::StatusCode;
use types::{Access, Role};

use crate::harness::spawn_app;

/// Every server function the app registers, as `/api/...` paths.
fn registered() -> Vec<String> {
    let _ = app::App; // link the app crate, whose server functions register themselves
    let mut paths: Vec<String> = leptos::server_fn::axum::server_fn_paths()
        .map(|(p, _)| p.to_string())
        .filter(|p| p.starts_with("/api/"))
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// The minimum of what each endpoint needs; one missing from the policy needs an admin.
fn needs(path: &str) -> Access {
    app::policy::min_role(path.trim_start_matches("/api/")).unwrap_or(Access::AtLeast(Role::Admin))
}

#[test]
fn every_registered_server_function_has_a_policy_entry() {
    let paths = registered();
    assert!(paths.len() >= 10, "found only {paths:?}");
    for p in &paths {
        let endpoint = p.trim_start_matches("/api/");
        assert!(app::policy::min_role(endpoint).is_some(), "server function {p} is missing from app::policy");
    }
}

#[tokio::test]
async fn anonymous_callers_are_refused_by_every_non_public_server_function() {
    let app = spawn_app().await;
    let anon = app.client(None).await;
    for p in registered() {
        let min = needs(&p);
        let status = app.post(&anon, &p, Some(&app.base)).await;
        if min == Access::Public {
            assert_ne!(status, StatusCode::UNAUTHORIZED, "{p}");
        } else {
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{p} answered {status} to an anonymous caller");
        }
    }
}

#[tokio::test]
async fn each_role_is_refused_what_needs_a_higher_one() {
    let app = spawn_app().await;
    for (user, role) in [("viewer", Role::Viewer), ("operator", Role::Operator)] {
        let client = app.client(Some(user)).await;
        for p in registered() {
            let min = needs(&p);
            if p.ends_with("/logout") {
                continue;
            }
            let status = app.post(&client, &p, Some(&app.base)).await;
            if !min.allows(Some(role)) {
                assert_eq!(status, StatusCode::FORBIDDEN, "{p} (needs {min}) answered {status} to a {user}");
            } else {
                assert_ne!(status, StatusCode::FORBIDDEN, "{p} (needs {min}) refused a {user}");
                assert_ne!(status, StatusCode::UNAUTHORIZED, "{p} refused a signed-in {user}");
            }
        }
    }
}

#[tokio::test]
async fn a_foreign_origin_is_refused_for_every_server_function() {
    let app = spawn_app().await;
    let admin = app.client(Some("admin")).await;
    for p in registered() {
        let status = app.post(&admin, &p, Some("https://evil.example")).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{p} accepted a cross-origin POST");
        let status = app.post(&admin, &p, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{p} accepted a POST with no Origin and no fetch metadata");
    }
}

#[tokio::test]
async fn server_functions_refuse_get() {
    let app = spawn_app().await;
    let admin = app.client(Some("admin")).await;
    for p in registered() {
        let status = admin.get(format!("{}{p}", app.base)).send().await.unwrap().status();
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{p} answered GET with {status}");
    }
}

#[tokio::test]
async fn pages_send_anonymous_visitors_to_sign_in_and_carry_a_strict_csp() {
    let app = spawn_app().await;
    let anon = app.client(None).await;
    for page in [
        "/",
        "/outbox",
        "/dead-letters",
        "/dead-letters/groups",
        "/audit",
        "/dead-letters/1",
        "/outbox/revenant/1",
        "/alerts",
        "/alerts/1",
        "/replays",
        "/replays/1",
        "/topology",
    ] {
        let resp = anon.get(format!("{}{page}", app.base)).send().await.unwrap();
        assert!(resp.status().is_redirection(), "{page}: {}", resp.status());
        let location = resp.headers().get("location").unwrap().to_str().unwrap().to_string();
        assert!(location.starts_with("/login?next="), "{page} → {location}");
    }
    let viewer = app.client(Some("viewer")).await;
    let resp = viewer.get(format!("{}/outbox", app.base)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let csp = resp.headers().get("content-security-policy").unwrap().to_str().unwrap().to_string();
    assert!(csp.contains("script-src 'self' 'nonce-"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(resp.headers().get("x-frame-options").unwrap(), "DENY");
}

#[tokio::test]
async fn an_unknown_api_path_is_refused() {
    let app = spawn_app().await;
    let admin = app.client(Some("admin")).await;
    assert_eq!(app.post(&admin, "/api/no/such/function", Some(&app.base)).await, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_refused_server_function_answers_with_the_status_its_error_means() {
    let app = spawn_app().await;
    let client = app.client(None).await;
    let resp = client
        .post(format!("{}/api/login", app.base))
        .header("origin", &app.base)
        .form(&[("username", "viewer"), ("password", "wrong password")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.text().await.unwrap().contains("wrong user name or password"));
}
