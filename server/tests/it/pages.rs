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
    app.db.drop_db().await;
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
    app.db.drop_db().await;
}
