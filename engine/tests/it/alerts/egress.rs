//! Where webhooks may go: not inward unless allowed (refused at save, and a delivery the
//! policy refuses is not retried), and never where a redirect points.

use super::*;

async fn deliver_once(pool: &PgPool, url: &str, cfg: &AlertSettings) -> Vec<engine::alerts::DeliveryRow> {
    let r = alerts::create(
        pool,
        &op(),
        &ip(),
        &rule(&unique("egress"), "new_failure_group", "", "1", "2", "0", url),
        LOCAL_RECEIVERS,
    )
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

#[tokio::test]
async fn a_webhook_the_policy_refuses_is_refused_at_save_and_a_refused_delivery_is_not_retried() {
    let db = fresh_db().await;
    let rx = Receiver::start(&[]).await;
    // One threshold is enough; the receiver's loopback address is what the policy refuses.
    let input = rule("inward", "new_failure_group", "", "1", "", "", &rx.url);
    match alerts::create(&db.pool, &op(), &ip(), &input, false).await {
        Err(RuleError::Invalid(errs)) => {
            assert_eq!(errs.len(), 1, "{errs:?}");
            assert_eq!(errs[0].field, "webhook_url");
            let m = &errs[0].message;
            assert!(m.contains("never call it") && m.contains("allow_private_webhooks"), "{m}");
        }
        other => panic!("expected the webhook refused, got {other:?}"),
    }
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM alert_rules"), 0);

    // Saved while private targets were allowed, then the policy tightened: the delivery is
    // refused once and not retried (the backoff here is 50 ms at most: retries would be due).
    let r = alerts::create(&db.pool, &op(), &ip(), &input, true).await.unwrap();
    new_failure_group(&db.pool).await;
    let strict = AlertSettings { allow_private_webhooks: false, ..cfg() };
    for _ in 0..5 {
        tick(&db.pool, &[], &strict).await;
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let d = alerts::deliveries(&db.pool, r.id, 10).await.unwrap();
    assert_eq!(d.len(), 1, "{d:?}");
    let error = d[0].error.clone().unwrap_or_default();
    assert!(!d[0].delivered && error.contains("allow_private_webhooks") && error.ends_with("not retried"), "{error}");
    assert_eq!(rx.count(), 0);
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM webhook_deliveries WHERE at IS NULL"), 0);
}
