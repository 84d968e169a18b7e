//! The audit log as each role reads it: an admin-only detail is blank for the others, and
//! their text search does not look into it.

use engine::audit::{self, AuditFilter, Entry};
use engine::auth::{Principal, Role};
use serde_json::json;

#[tokio::test]
async fn a_send_tests_detail_is_listed_and_searched_for_admins_only() {
    let db = testkit::fresh_db().await;
    let pool = &db.pool;
    let ada = Principal { username: "ada".into(), role: Role::Admin };
    for (action, detail) in [
        ("alert.test", json!({"status": null, "error": "connection refused", "host": "hooks.example"})),
        ("alert_rule.create", json!({"webhook_host": "hooks.example"})),
    ] {
        let e = Entry {
            actor: &ada,
            source_ip: None,
            action,
            target: Some("alert_rule:1".into()),
            filter: None,
            item_count: 1,
            outcome: "failed",
            detail: Some(detail),
        };
        audit::record(pool, e).await.unwrap();
    }
    let read = async |reader: Role, text: Option<&str>| {
        let f = AuditFilter { text: text.map(str::to_string), ..AuditFilter::default() };
        let (rows, _) = audit::list(pool, &f, reader, 50).await.unwrap();
        rows.into_iter().map(|r| (r.action, r.detail.is_some())).collect::<Vec<_>>()
    };
    for reader in [Role::Viewer, Role::Operator] {
        let all = read(reader, None).await;
        assert_eq!(all, [("alert_rule.create".into(), true), ("alert.test".into(), false)], "{reader:?}");
        assert_eq!(read(reader, Some("hooks.example")).await, [("alert_rule.create".into(), true)], "{reader:?}");
        assert!(read(reader, Some("refused")).await.is_empty(), "{reader:?}");
    }
    let all = read(Role::Admin, Some("hooks.example")).await;
    assert_eq!(all, [("alert_rule.create".into(), true), ("alert.test".into(), true)]);
    assert_eq!(read(Role::Admin, Some("refused")).await, [("alert.test".into(), true)]);
}
