//! Users, sessions and the login rate limit, against a real database.

use std::time::Duration;

use engine::auth::{self, AuthError, Role};

#[tokio::test]
async fn a_user_can_sign_in_and_the_session_resolves_to_them() {
    let db = testkit::fresh_db().await;
    auth::create_user(&db.pool, "alice", "long enough pw", Role::Operator).await.unwrap();
    let (token, p) =
        auth::login(&db.pool, "alice", "long enough pw", "10.0.0.1", Duration::from_secs(60)).await.unwrap();
    assert_eq!(p.role, Role::Operator);
    let back = auth::session_principal(&db.pool, &token).await.unwrap().unwrap();
    assert_eq!(back.username, "alice");
    auth::logout(&db.pool, &token).await.unwrap();
    assert!(auth::session_principal(&db.pool, &token).await.unwrap().is_none());
}

#[tokio::test]
async fn repeated_failures_lock_the_user_out_for_a_while() {
    let db = testkit::fresh_db().await;
    auth::create_user(&db.pool, "bob", "long enough pw", Role::Viewer).await.unwrap();
    for _ in 0..auth::MAX_FAILURES {
        let e = auth::login(&db.pool, "bob", "wrong password", "10.0.0.2", Duration::from_secs(60)).await.unwrap_err();
        assert!(matches!(e, AuthError::BadCredentials));
    }
    let e = auth::login(&db.pool, "bob", "long enough pw", "10.0.0.2", Duration::from_secs(60)).await.unwrap_err();
    assert!(matches!(e, AuthError::RateLimited), "{e:?}");
}

#[tokio::test]
async fn a_disabled_user_loses_their_sessions() {
    let db = testkit::fresh_db().await;
    auth::create_user(&db.pool, "carol", "long enough pw", Role::Admin).await.unwrap();
    let (token, _) =
        auth::login(&db.pool, "carol", "long enough pw", "10.0.0.3", Duration::from_secs(60)).await.unwrap();
    let mut c = db.pool.acquire().await.unwrap();
    auth::set_disabled(&mut c, "carol", true).await.unwrap();
    assert!(auth::session_principal(&db.pool, &token).await.unwrap().is_none());
    auth::set_disabled(&mut c, "carol", false).await.unwrap();
    assert!(
        auth::session_principal(&db.pool, &token).await.unwrap().is_none(),
        "enabling a user must not revive a cookie from before the disable"
    );
    drop(c);
}

#[tokio::test]
async fn a_role_change_or_a_new_password_ends_the_users_sessions() {
    let db = testkit::fresh_db().await;
    auth::create_user(&db.pool, "cleo", "long enough pw", Role::Admin).await.unwrap();
    let sign_in = async || auth::login(&db.pool, "cleo", "long enough pw", "10.0.0.4", HOUR).await.unwrap().0;
    let mut c = db.pool.acquire().await.unwrap();
    let token = sign_in().await;
    auth::set_role(&mut c, "cleo", Role::Viewer).await.unwrap();
    assert!(auth::session_principal(&db.pool, &token).await.unwrap().is_none(), "role change");
    let token = sign_in().await;
    assert!(auth::set_password(&mut c, "cleo", "another long pw").await.unwrap());
    assert!(auth::session_principal(&db.pool, &token).await.unwrap().is_none(), "password change");
    let e = auth::login(&db.pool, "cleo", "long enough pw", "10.0.0.4", HOUR).await.unwrap_err();
    assert!(matches!(e, AuthError::BadCredentials), "{e:?}");
    auth::login(&db.pool, "cleo", "another long pw", "10.0.0.4", HOUR).await.unwrap();
    assert!(matches!(auth::set_password(&mut c, "cleo", "short").await, Err(AuthError::WeakPassword)));
    assert!(!auth::set_password(&mut c, "nobody", "long enough pw").await.unwrap());
    drop(c);
}

const HOUR: Duration = Duration::from_secs(3600);

/// Parallel guesses used to be counted before any was recorded, so all passed the limit.
#[tokio::test]
async fn twelve_parallel_guesses_get_at_most_the_limit_of_password_checks() {
    let db = testkit::fresh_db().await;
    auth::create_user(&db.pool, "erin", "long enough pw", Role::Viewer).await.unwrap();
    let guesses = (0..12).map(|i| {
        let pool = db.pool.clone();
        tokio::spawn(async move { auth::login(&pool, "erin", &format!("wrong {i}"), "10.0.0.5", HOUR).await })
    });
    let mut checked = 0;
    for g in guesses {
        match g.await.unwrap() {
            Err(AuthError::BadCredentials) => checked += 1,
            Err(AuthError::RateLimited) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(checked <= auth::MAX_FAILURES, "{checked} passwords were checked, limit {}", auth::MAX_FAILURES);
}

#[tokio::test]
async fn failures_from_one_address_do_not_lock_the_user_out_elsewhere() {
    let db = testkit::fresh_db().await;
    auth::create_user(&db.pool, "fay", "long enough pw", Role::Viewer).await.unwrap();
    for _ in 0..auth::MAX_FAILURES + 2 {
        let _ = auth::login(&db.pool, "fay", "wrong password", "203.0.113.66", HOUR).await;
    }
    let e = auth::login(&db.pool, "fay", "long enough pw", "203.0.113.66", HOUR).await.unwrap_err();
    assert!(matches!(e, AuthError::RateLimited), "{e:?}");
    auth::login(&db.pool, "fay", "long enough pw", "10.0.0.6", HOUR).await.expect("the user's own address still works");
}

#[tokio::test]
async fn one_address_cannot_try_many_names() {
    let db = testkit::fresh_db().await;
    auth::create_user(&db.pool, "gus", "long enough pw", Role::Viewer).await.unwrap();
    for i in 0..auth::MAX_PER_ADDRESS {
        let _ = auth::login(&db.pool, &format!("name{i}"), "wrong password", "203.0.113.7", HOUR).await;
    }
    let e = auth::login(&db.pool, "gus", "long enough pw", "203.0.113.7", HOUR).await.unwrap_err();
    assert!(matches!(e, AuthError::RateLimited), "{e:?}");
}

#[tokio::test]
async fn an_oversized_user_name_is_refused_before_any_query() {
    let db = testkit::fresh_db().await;
    let huge = "a".repeat(1_500_000);
    let e = auth::login(&db.pool, &huge, "pw", "10.0.0.8", HOUR).await.unwrap_err();
    assert!(matches!(e, AuthError::TooLong), "{e:?}");
    let e = auth::login(&db.pool, "someone", &huge, "10.0.0.8", HOUR).await.unwrap_err();
    assert!(matches!(e, AuthError::TooLong), "{e:?}");
    let rows = count!(&db.pool, "SELECT count(*) FROM login_failures");
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn purge_removes_old_attempts_and_expired_sessions_only() {
    let db = testkit::fresh_db().await;
    auth::create_user(&db.pool, "hal", "long enough pw", Role::Viewer).await.unwrap();
    let (live, _) = auth::login(&db.pool, "hal", "long enough pw", "10.0.0.9", HOUR).await.unwrap();
    let _ = auth::login(&db.pool, "hal", "wrong password", "10.0.0.10", HOUR).await;
    let _ = auth::login(&db.pool, "hal", "wrong password", "10.0.0.11", HOUR).await;
    sqlx::query!("UPDATE login_failures SET at = now() - interval '1 hour' WHERE source_ip = '10.0.0.10'")
        .execute(&db.pool)
        .await
        .unwrap();
    let (old, _) = auth::login(&db.pool, "hal", "long enough pw", "10.0.0.12", HOUR).await.unwrap();
    sqlx::query!("UPDATE sessions SET expires_at = now() - interval '1 minute' WHERE source_ip = '10.0.0.12'")
        .execute(&db.pool)
        .await
        .unwrap();
    let purged = auth::purge(&db.pool).await.unwrap();
    assert_eq!(purged, auth::Purged { attempts: 1, sessions: 1 });
    assert!(auth::session_principal(&db.pool, &live).await.unwrap().is_some());
    assert!(auth::session_principal(&db.pool, &old).await.unwrap().is_none());
}

#[tokio::test]
async fn a_duplicate_user_name_is_a_conflict() {
    let db = testkit::fresh_db().await;
    auth::create_user(&db.pool, "dave", "long enough pw", Role::Viewer).await.unwrap();
    let e = auth::create_user(&db.pool, "dave", "another long pw", Role::Admin).await.unwrap_err();
    assert!(matches!(e, AuthError::Exists(_)), "{e:?}");
}
