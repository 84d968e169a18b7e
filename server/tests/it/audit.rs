//! Actions over HTTP leave exactly one audit entry each, with who, from where and counts.

use crate::harness::spawn_app;

async fn entries(pool: &sqlx::PgPool, action: &str) -> Vec<(String, Option<String>, Option<String>, i64)> {
    sqlx::query!("SELECT actor, source_ip, target, item_count FROM audit_log WHERE action = $1", action)
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.actor, r.source_ip, r.target, r.item_count))
        .collect()
}

#[tokio::test]
async fn user_changes_from_the_console_are_audited_once_each() {
    let app = spawn_app().await;
    let admin = app.client(Some("admin")).await;
    let post = |form: Vec<(&'static str, &'static str)>| {
        admin.post(format!("{}/api/users/change", app.base)).header("origin", &app.base).form(&form).send()
    };
    let r = post(vec![("change", "add"), ("username", "dana"), ("role", "operator"), ("password", "long enough pw")])
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let r = post(vec![("change", "role"), ("username", "dana"), ("role", "admin")]).await.unwrap();
    assert!(r.status().is_success());
    let r = post(vec![("change", "disable"), ("username", "dana")]).await.unwrap();
    assert!(r.status().is_success());
    // Refused: a weak password changes nothing and is not audited as a change.
    let r =
        post(vec![("change", "add"), ("username", "eve"), ("role", "viewer"), ("password", "short")]).await.unwrap();
    assert!(!r.status().is_success());
    for action in ["user.add", "user.set_role", "user.disable"] {
        let e = entries(&app.db.pool, action).await;
        assert_eq!(e.len(), 1, "{action}: {e:?}");
        assert_eq!(e[0].0, "admin");
        assert_eq!(e[0].1.as_deref(), Some("127.0.0.1"));
        assert_eq!(e[0].2.as_deref(), Some("dana"));
        assert_eq!(e[0].3, 1);
    }
    let logins = entries(&app.db.pool, "user.login").await;
    assert_eq!(logins.len(), 1, "one sign-in, one entry");
}

#[tokio::test]
async fn an_admin_cannot_disable_themselves() {
    let app = spawn_app().await;
    let admin = app.client(Some("admin")).await;
    let r = admin
        .post(format!("{}/api/users/change", app.base))
        .header("origin", &app.base)
        .form(&[("change", "disable"), ("username", "admin")])
        .send()
        .await
        .unwrap();
    assert!(!r.status().is_success());
    let disabled = sqlx::query_scalar!("SELECT disabled FROM users WHERE username = 'admin'")
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    assert!(!disabled);
}
