//! Local users, roles and sessions.
//!
//! Policy: passwords are hashed with argon2id; session tokens are 256 random bits handed to
//! the browser once and stored only as a SHA-256 hash; failed logins are counted per user
//! name and address (see `throttle`) and refused above a limit for a window; an attempt is
//! recorded before its password is checked. Lengths are capped before any query or hash, and
//! the hash runs off the async threads, at the same cost for unknown and disabled users.
//! A change of role, a disable and a password change end the user's sessions. Roles are
//! ordered: viewer < operator < admin, and every check is "at least this role", deny by default.

mod proxies;
mod throttle;

pub use proxies::TrustedProxies;
pub use throttle::{FAILURE_WINDOW_SECS, MAX_FAILURES, MAX_PER_ADDRESS, Purged, purge, run_purge};

use argon2::{
    Argon2, PasswordHash, PasswordHasher, PasswordVerifier,
    password_hash::{SaltString, rand_core::OsRng},
};
use chrono::{DateTime, Utc};
use rand::RngCore;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::{PgExecutor, PgPool};
pub use types::Role;

/// Who is asking, as resolved from the session cookie (or a trusted proxy header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub username: String,
    pub role: Role,
}

/// The caller's address, as the audit log records it.
#[derive(Debug, Clone, Default)]
pub struct ClientIp(pub Option<String>);

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("user name must be 1 to 64 letters, digits or . _ @ -")]
    BadUsername,
    #[error("password must be at least 10 characters")]
    WeakPassword,
    #[error("user `{0}` already exists")]
    Exists(String),
    #[error("wrong user name or password")]
    BadCredentials,
    #[error("too many failed sign-ins; try again in a few minutes")]
    RateLimited,
    #[error("user name (64 bytes) or password ({MAX_PASSWORD_BYTES} bytes) is too long")]
    TooLong,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error("password hashing failed: {0}")]
    Hash(String),
}

pub const MAX_USERNAME_BYTES: usize = 64;
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// A hash no password matches, checked for unknown and disabled users so that every sign-in
/// costs the same.
const DECOY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$J3HUMWj4h2H9u5SLbPUXMSgAIIRbUAHsDNbLnH3Lh9A";

fn valid_username(u: &str) -> bool {
    !u.is_empty() && u.len() <= MAX_USERNAME_BYTES && u.chars().all(|c| c.is_ascii_alphanumeric() || "._@-".contains(c))
}

pub fn hash_password(password: &str) -> Result<String, AuthError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AuthError::Hash(e.to_string()))
}

fn check_new_password(password: &str) -> Result<(), AuthError> {
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(AuthError::TooLong);
    }
    if password.chars().count() < 10 {
        return Err(AuthError::WeakPassword);
    }
    Ok(())
}

fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|h| Argon2::default().verify_password(password.as_bytes(), &h).is_ok())
}

pub async fn create_user(
    db: impl PgExecutor<'_>,
    username: &str,
    password: &str,
    role: Role,
) -> Result<i64, AuthError> {
    if !valid_username(username) {
        return Err(AuthError::BadUsername);
    }
    check_new_password(password)?;
    let hash = hash_password(password)?;
    sqlx::query_scalar!(
        "INSERT INTO users (username, password_hash, role) VALUES ($1, $2, $3) RETURNING id",
        username,
        hash,
        role.as_str(),
    )
    .fetch_one(db)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(d) if d.constraint() == Some("users_username_key") => AuthError::Exists(username.into()),
        _ => AuthError::Db(e),
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct UserRow {
    pub id: i64,
    pub username: String,
    pub role: Role,
    pub disabled: bool,
    pub created_at: DateTime<Utc>,
}

pub async fn list_users(db: impl PgExecutor<'_>) -> Result<Vec<UserRow>, sqlx::Error> {
    sqlx::query_as!(
        UserRow,
        r#"SELECT id, username, role AS "role: Role", disabled, created_at FROM users ORDER BY username"#
    )
    .fetch_all(db)
    .await
}

fn new_token() -> (String, Vec<u8>) {
    let mut raw = [0u8; 32];
    rand::rng().fill_bytes(&mut raw);
    let token = hex::encode(raw);
    let hash = Sha256::digest(token.as_bytes()).to_vec();
    (token, hash)
}

fn token_hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// Checks the password (once the throttle admits the attempt) and opens a session. Returns
/// the token for the cookie and the principal.
pub async fn login(
    pool: &PgPool,
    username: &str,
    password: &str,
    ip: &str,
    ttl: std::time::Duration,
) -> Result<(String, Principal), AuthError> {
    if username.len() > MAX_USERNAME_BYTES || password.len() > MAX_PASSWORD_BYTES {
        return Err(AuthError::TooLong);
    }
    if !throttle::admit(pool, username, ip).await? {
        return Err(AuthError::RateLimited);
    }
    let row = sqlx::query!("SELECT id, password_hash, role, disabled FROM users WHERE username = $1", username)
        .fetch_optional(pool)
        .await?;
    // Unknown and disabled users are checked against a decoy at the same cost.
    let hash = match &row {
        Some(r) if !r.disabled => r.password_hash.clone(),
        _ => DECOY_HASH.to_string(),
    };
    let password = password.to_string();
    let matched = tokio::task::spawn_blocking(move || verify_password(&password, &hash))
        .await
        .map_err(|e| AuthError::Hash(e.to_string()))?;
    let Some(user) = row.filter(|r| matched && !r.disabled) else {
        return Err(AuthError::BadCredentials);
    };
    let user_id = user.id;
    let role = Role::parse(&user.role).ok_or(AuthError::BadCredentials)?;
    let (token, hash) = new_token();
    sqlx::query!(
        "INSERT INTO sessions (token_hash, user_id, expires_at, source_ip)
         VALUES ($1, $2, now() + make_interval(secs => $3), $4)",
        hash,
        user_id,
        ttl.as_secs_f64(),
        ip,
    )
    .execute(pool)
    .await?;
    throttle::clear(pool, username, ip).await?;
    Ok((token, Principal { username: username.into(), role }))
}

/// The principal behind a session token, if the session is live and the user enabled.
pub async fn session_principal(db: impl PgExecutor<'_>, token: &str) -> Result<Option<Principal>, sqlx::Error> {
    if token.len() != 64 {
        return Ok(None);
    }
    let row = sqlx::query!(
        "SELECT u.username, u.role FROM sessions s JOIN users u ON u.id = s.user_id
         WHERE s.token_hash = $1 AND s.expires_at > now() AND NOT u.disabled",
        token_hash(token),
    )
    .fetch_optional(db)
    .await?;
    Ok(row.and_then(|r| Role::parse(&r.role).map(|role| Principal { username: r.username, role })))
}

/// The principal for a name asserted by a trusted proxy: only users that exist locally.
pub async fn user_principal(db: impl PgExecutor<'_>, username: &str) -> Result<Option<Principal>, sqlx::Error> {
    let row = sqlx::query!("SELECT username, role FROM users WHERE username = $1 AND NOT disabled", username)
        .fetch_optional(db)
        .await?;
    Ok(row.and_then(|r| Role::parse(&r.role).map(|role| Principal { username: r.username, role })))
}

pub async fn logout(db: impl PgExecutor<'_>, token: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM sessions WHERE token_hash = $1", token_hash(token)).execute(db).await?;
    Ok(())
}

/// Ends every session of a user (after a change of role, a disable, a new password).
async fn end_sessions(db: impl PgExecutor<'_>, username: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM sessions WHERE user_id = (SELECT id FROM users WHERE username = $1)", username)
        .execute(db)
        .await?;
    Ok(())
}

/// Changes a user's role and ends their sessions. False when there is no such user.
pub async fn set_role(db: &mut sqlx::PgConnection, username: &str, role: Role) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!("UPDATE users SET role = $2 WHERE username = $1", username, role.as_str())
        .execute(&mut *db)
        .await?;
    end_sessions(&mut *db, username).await?;
    Ok(r.rows_affected() == 1)
}

/// Disables or enables a user; either way their existing sessions end, so enabling a user
/// never revives an old cookie. False when there is no such user.
pub async fn set_disabled(db: &mut sqlx::PgConnection, username: &str, disabled: bool) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!("UPDATE users SET disabled = $2 WHERE username = $1", username, disabled)
        .execute(&mut *db)
        .await?;
    end_sessions(&mut *db, username).await?;
    Ok(r.rows_affected() == 1)
}

/// Sets a new password and ends the user's sessions. False when there is no such user.
pub async fn set_password(db: &mut sqlx::PgConnection, username: &str, password: &str) -> Result<bool, AuthError> {
    check_new_password(password)?;
    let hash = hash_password(password)?;
    let r = sqlx::query!("UPDATE users SET password_hash = $2 WHERE username = $1", username, hash)
        .execute(&mut *db)
        .await?;
    end_sessions(&mut *db, username).await?;
    Ok(r.rows_affected() == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_viewer_operator_admin() {
        assert!(Role::Viewer < Role::Operator && Role::Operator < Role::Admin);
        assert_eq!(Role::parse("operator"), Some(Role::Operator));
        assert_eq!(Role::parse("root"), None);
    }

    #[test]
    fn a_password_verifies_only_against_its_own_hash() {
        let h = hash_password("correct horse battery").unwrap();
        assert!(verify_password("correct horse battery", &h));
        assert!(!verify_password("correct horse batterx", &h));
    }

    #[test]
    fn user_names_with_markup_are_refused() {
        assert!(valid_username("alice.ops@example"));
        assert!(!valid_username("<script>"));
        assert!(!valid_username(""));
    }
}
