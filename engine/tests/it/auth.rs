//! Users, sessions and the login rate limit, against a real database.

use std::time::Duration;

use engine::auth::{self, AuthError, Role};

#[tokio::test]
async fn a_user_can_sign_in_and_the_session_resolves_to_them() {
    let db = engine::testing::fresh_db().await;
    auth::create_user(&db.pool, "alice", "long enough pw", Role::Operator).await.unwrap();
    let (token, p) =
        auth::login(&db.pool, "alice", "long enough pw", "10.0.0.1", Duration::from_secs(60)).await.unwrap();
    assert_eq!(p.role, Role::Operator);
    let back = auth::session_principal(&db.pool, &token).await.unwrap().unwrap();
    assert_eq!(back.username, "alice");
    auth::logout(&db.pool, &token).await.unwrap();
    assert!(auth::session_principal(&db.pool, &token).await.unwrap().is_none());
    db.drop_db().await;
}

#[tokio::test]
async fn repeated_failures_lock_the_user_out_for_a_while() {
    let db = engine::testing::fresh_db().await;
    auth::create_user(&db.pool, "bob", "long enough pw", Role::Viewer).await.unwrap();
    for _ in 0..auth::MAX_FAILURES {
        let e = auth::login(&db.pool, "bob", "wrong password", "10.0.0.2", Duration::from_secs(60)).await.unwrap_err();
        assert!(matches!(e, AuthError::BadCredentials));
    }
    let e = auth::login(&db.pool, "bob", "long enough pw", "10.0.0.2", Duration::from_secs(60)).await.unwrap_err();
    assert!(matches!(e, AuthError::RateLimited), "{e:?}");
    db.drop_db().await;
}

#[tokio::test]
async fn a_disabled_user_loses_their_sessions() {
    let db = engine::testing::fresh_db().await;
    auth::create_user(&db.pool, "carol", "long enough pw", Role::Admin).await.unwrap();
    let (token, _) =
        auth::login(&db.pool, "carol", "long enough pw", "10.0.0.3", Duration::from_secs(60)).await.unwrap();
    auth::set_disabled(&db.pool, "carol", true).await.unwrap();
    assert!(auth::session_principal(&db.pool, &token).await.unwrap().is_none());
    db.drop_db().await;
}

#[tokio::test]
async fn a_duplicate_user_name_is_a_conflict() {
    let db = engine::testing::fresh_db().await;
    auth::create_user(&db.pool, "dave", "long enough pw", Role::Viewer).await.unwrap();
    let e = auth::create_user(&db.pool, "dave", "another long pw", Role::Admin).await.unwrap_err();
    assert!(matches!(e, AuthError::Exists(_)), "{e:?}");
    db.drop_db().await;
}
