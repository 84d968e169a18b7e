//! Where webhooks may go: not inward unless allowed, and never where a redirect points.

use super::*;

async fn deliver_once(pool: &PgPool, url: &str, cfg: &AlertSettings) -> Vec<engine::alerts::DeliveryRow> {
    let r = alerts::create(pool, &op(), &ip(), &rule(&unique("egress"), "new_failure_group", "", "1", "2", "0", url))
        .await
        .unwrap();
    new_failure_group(pool).await;
    tick(pool, &[], cfg).await;
    alerts::deliveries(pool, r.id, 10).await.unwrap()
}

#[tokio::test]
async fn a_loopback_webhook_is_refused_unless_private_targets_are_allowed() {
    let db = fresh_db().await;
    let rx = Receiver::start(&[]).await;
    let guarded = AlertSettings { allow_private_webhooks: false, webhook_max_attempts: 1, ..cfg() };

    let d = deliver_once(&db.pool, &rx.url, &guarded).await;
    assert_eq!(rx.count(), 0, "nothing may reach 127.0.0.1");
    let err = d[0].error.clone().unwrap_or_default();
    assert!(!d[0].delivered && err.contains("127.0.0.1") && err.contains("allow_private_webhooks"), "{err}");

    // A name is checked on what it resolves to.
    let by_name = rx.url.replace("127.0.0.1", "localhost");
    let d = deliver_once(&db.pool, &by_name, &guarded).await;
    assert_eq!(rx.count(), 0, "localhost is loopback too");
    let err = d[0].error.clone().unwrap_or_default();
    assert!(!d[0].delivered && err.contains("resolves only to loopback"), "{err}");

    let d = deliver_once(&db.pool, &rx.url, &cfg()).await;
    assert!(d[0].delivered && rx.count() == 1, "allowed explicitly, it is sent");
}

#[tokio::test]
async fn a_redirect_is_recorded_not_followed() {
    let db = fresh_db().await;
    let rx = Receiver::start(&[307, 307, 307, 307]).await;
    let cfg = AlertSettings { webhook_max_attempts: 1, ..cfg() };
    let d = deliver_once(&db.pool, &rx.url, &cfg).await;
    assert_eq!(rx.count(), 1, "the redirect was followed");
    assert_eq!((d[0].status_code, d[0].delivered), (Some(307), false));
}
