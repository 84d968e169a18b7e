//! Pages render on the server: the content is in the HTML before any wasm runs.

use crate::harness::spawn_app;

#[tokio::test]
async fn the_overview_is_rendered_server_side_with_live_dependency_versions() {
    let app = spawn_app().await;
    let viewer = app.client(Some("viewer")).await;
    let html = viewer.get(format!("{}/", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("Outbox: oldest pending"), "{html}");
    assert!(html.contains("PostgreSQL 15") || html.contains("PostgreSQL 1"), "no PostgreSQL version in {html}");
    assert!(html.contains("reachable"));
    assert!(html.contains("/pkg/revenant.js"), "the hydration script is linked");
}

#[tokio::test]
async fn message_content_is_escaped_in_server_rendered_html() {
    let app = spawn_app().await;
    sqlx::query!(
        "INSERT INTO dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason, fingerprint, error_type)
         VALUES ('q', 'k', convert_to('<script>alert(1)</script>', 'UTF8'), 25, '', 'q', 'none', 'f', '<img src=x onerror=alert(2)>')",
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    let viewer = app.client(Some("viewer")).await;
    let html = viewer.get(format!("{}/dead-letters/1", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{html}");
    assert!(!html.contains("<script>alert(1)"), "raw script in the page");
    assert!(!html.contains("<img src=x"), "raw img in the page");
}

#[tokio::test]
async fn bundles_are_sent_gzipped_from_the_build_to_browsers_that_accept_it() {
    let site = std::env::temp_dir().join(format!("revenant-site-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(site.join("pkg")).unwrap();
    let css = b"body { color: black }".repeat(50);
    std::fs::write(site.join("pkg/revenant.css"), &css).unwrap();
    // Not real gzip: the test tells which file was sent, not whether it decompresses.
    std::fs::write(site.join("pkg/revenant.css.gz"), b"the precompressed file").unwrap();
    let app = crate::harness::spawn_app_with(&[("REVENANT_SITE_ROOT", site.to_str().unwrap())]).await;
    let anon = app.client(None).await;
    let url = format!("{}/pkg/revenant.css", app.base);
    let gz = anon.get(&url).header("accept-encoding", "gzip, deflate, br").send().await.unwrap();
    assert_eq!(gz.status(), reqwest::StatusCode::OK);
    assert_eq!(gz.headers()["content-encoding"], "gzip");
    assert!(gz.headers()["content-type"].to_str().unwrap().starts_with("text/css"));
    assert_eq!(gz.bytes().await.unwrap().as_ref(), b"the precompressed file");
    let plain = anon.get(&url).header("accept-encoding", "identity").send().await.unwrap();
    assert!(plain.headers().get("content-encoding").is_none());
    assert_eq!(plain.bytes().await.unwrap().as_ref(), css.as_slice());
    let _ = std::fs::remove_dir_all(site);
}
