//! `spawn_app()`: the real router on 127.0.0.1:0, a fresh database, three users.

use std::collections::HashMap;

use engine::auth::Role;

pub const PASSWORD: &str = "test-password-1";

pub struct TestApp {
    pub base: String,
    pub db: testkit::TestDb,
    _stop: tokio_util::sync::CancellationToken,
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(&[]).await
}

/// `spawn_app` with more settings, as environment variables; `$BASE` in a value becomes the
/// app's own base URL (`http://127.0.0.1:port`).
pub async fn spawn_app_with(extra: &[(&str, &str)]) -> TestApp {
    let db = testkit::fresh_db().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let mut env = HashMap::new();
    env.insert("DATABASE_URL".to_string(), db.url.clone());
    env.insert("AMQP_URL".to_string(), testkit::amqp_url());
    env.insert("REVENANT_BIND".to_string(), "127.0.0.1:0".to_string());
    // This instance runs no background role (only the router): say so, as `serve` would.
    for role in ["REVENANT_RELAY", "REVENANT_INGEST", "REVENANT_ALERTS", "REVENANT_REPLAY"] {
        env.insert(role.to_string(), "false".to_string());
    }
    for (k, v) in extra {
        env.insert(k.to_string(), v.replace("$BASE", &base));
    }
    let settings = engine::settings::load(None, false, &|k: &str| env.get(k).cloned()).expect("settings");
    for (name, role) in [("admin", Role::Admin), ("operator", Role::Operator), ("viewer", Role::Viewer)] {
        engine::auth::create_user(&db.pool, name, PASSWORD, role).await.expect("user");
    }
    let sources = engine::sources::open_all(&settings, &db.pool).await.expect("sources");
    let state = server::web::app_state(db.pool.clone(), settings, sources, server::roles::Stats::default());
    let stop = tokio_util::sync::CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move { server::web::serve(state, listener, async move { s.cancelled().await }).await });
    TestApp { base, db, _stop: stop }
}

impl TestApp {
    /// A client with no redirects followed, signed in as `user` (or anonymous for None).
    pub async fn client(&self, user: Option<&str>) -> reqwest::Client {
        // A page or call that never answers fails its test instead of holding the suite.
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");
        if let Some(u) = user {
            let resp = client
                .post(format!("{}/api/login", self.base))
                .header("origin", &self.base)
                .form(&[("username", u), ("password", PASSWORD)])
                .send()
                .await
                .expect("login");
            assert!(resp.status().is_success() || resp.status().is_redirection(), "login as {u}: {}", resp.status());
        }
        client
    }

    pub async fn post(&self, client: &reqwest::Client, path: &str, origin: Option<&str>) -> reqwest::StatusCode {
        let mut req =
            client.post(format!("{}{path}", self.base)).header("content-type", "application/x-www-form-urlencoded");
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.body("").send().await.expect("post").status()
    }
}
