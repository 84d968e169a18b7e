//! Sign-in, sign-out and "who am I", as server functions.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

pub const SESSION_COOKIE: &str = "revenant_session";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Caller {
    pub username: String,
    pub role: String,
}

impl Caller {
    pub fn can_operate(&self) -> bool {
        self.role == "operator" || self.role == "admin"
    }
    pub fn is_admin(&self) -> bool {
        self.role == "admin"
    }
}

#[server(prefix = "/api", endpoint = "me")]
pub async fn whoami() -> Result<Option<Caller>, AppError> {
    Ok(crate::guard::principal().map(|p| Caller { username: p.username, role: p.role.as_str().to_string() }))
}

/// Where to go after sign-in: only a path that, resolved against our own origin, stays on it
/// (no open redirect). Control characters (which browsers strip, turning `/\t/evil` into
/// `//evil`) and DEL are refused outright, so the answer is always a valid `Location`.
pub fn safe_next(next: &str) -> String {
    const HOME: &str = "/";
    let control = next.bytes().any(|b| b < 0x20 || b == 0x7f);
    if control || !next.starts_with('/') || next.starts_with("//") || next.contains('\\') {
        return HOME.into();
    }
    let Ok(base) = url::Url::parse("http://revenant.invalid/") else { return HOME.into() };
    match base.join(next) {
        Ok(u) if u.origin() == base.origin() && !u.path().starts_with("/api/") => {
            u[url::Position::BeforePath..].to_string()
        }
        _ => HOME.into(),
    }
}

#[server(prefix = "/api", endpoint = "login")]
pub async fn login(username: String, password: String, next: Option<String>) -> Result<(), AppError> {
    use engine::auth::{self, AuthError};
    let state = crate::state::app_state()?;
    let username = username.trim().to_string();
    if username.is_empty() || password.is_empty() {
        return Err(AppError::Invalid("enter a user name and a password".into()));
    }
    let ip = crate::guard::client_ip().unwrap_or_else(|| "unknown".into());
    let ttl = state.settings.auth.session_ttl;
    let (token, principal) = match auth::login(&state.pool, &username, &password, &ip, ttl).await {
        Ok(ok) => ok,
        Err(AuthError::BadCredentials) => {
            return Err(AppError::Invalid("wrong user name or password".into()));
        }
        Err(AuthError::RateLimited) => {
            return Err(AppError::Forbidden("too many failed sign-ins; try again in a few minutes".into()));
        }
        Err(e @ AuthError::TooLong) => return Err(AppError::Invalid(e.to_string())),
        Err(e) => return Err(AppError::internal(e)),
    };
    engine::audit::record(
        &state.pool,
        engine::audit::Entry {
            actor: &principal,
            source_ip: Some(&ip),
            action: "user.login",
            target: Some(principal.username.clone()),
            filter: None,
            item_count: 1,
            outcome: "ok",
            detail: None,
        },
    )
    .await?;
    let secure = if state.settings.auth.secure_cookies { "; Secure" } else { "" };
    let cookie =
        format!("{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}", ttl.as_secs());
    let resp = expect_context::<leptos_axum::ResponseOptions>();
    resp.append_header(http::header::SET_COOKIE, http::HeaderValue::from_str(&cookie).map_err(AppError::internal)?);
    leptos_axum::redirect(&safe_next(next.as_deref().unwrap_or("/")));
    Ok(())
}

#[server(prefix = "/api", endpoint = "logout")]
pub async fn logout() -> Result<(), AppError> {
    let state = crate::state::app_state()?;
    let principal = crate::guard::require(engine::auth::Role::Viewer)?;
    if let Some(token) = session_token() {
        engine::auth::logout(&state.pool, &token).await?;
    }
    let ip = crate::guard::client_ip();
    engine::audit::record(
        &state.pool,
        engine::audit::Entry {
            actor: &principal,
            source_ip: ip.as_deref(),
            action: "user.logout",
            target: Some(principal.username.clone()),
            filter: None,
            item_count: 1,
            outcome: "ok",
            detail: None,
        },
    )
    .await?;
    let resp = expect_context::<leptos_axum::ResponseOptions>();
    resp.append_header(
        http::header::SET_COOKIE,
        http::HeaderValue::from_static("revenant_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    leptos_axum::redirect("/login");
    Ok(())
}

#[cfg(feature = "ssr")]
pub fn session_token() -> Option<String> {
    let parts = use_context::<http::request::Parts>()?;
    cookie_value(parts.headers.get(http::header::COOKIE)?.to_str().ok()?, SESSION_COOKIE)
}

/// The value of one cookie in a `Cookie` header.
pub fn cookie_value(header: &str, name: &str) -> Option<String> {
    header.split(';').find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k == name).then(|| v.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed_after_sign_in() {
        assert_eq!(safe_next("/dead-letters?q=1"), "/dead-letters?q=1");
        assert_eq!(safe_next("//evil.example"), "/");
        assert_eq!(safe_next("https://evil.example"), "/");
        assert_eq!(safe_next("/\\evil"), "/");
        assert_eq!(safe_next("/api/users/change"), "/");
        assert_eq!(safe_next("/./api/users/change"), "/");
        assert_eq!(safe_next("/outbox#stuck"), "/outbox#stuck");
    }

    #[test]
    fn control_characters_never_reach_the_location_header() {
        for next in ["/\t/evil.example/", "/\n/evil.example", "/\r\nSet-Cookie: x=1", "/a\0b", "/a\x7fb"] {
            assert_eq!(safe_next(next), "/", "{next:?}");
        }
        assert_eq!(safe_next("/caf\u{e9}"), "/caf%C3%A9");
        assert!(safe_next("/caf\u{e9}?q=\u{e9} x").bytes().all(|b| (0x21..0x7f).contains(&b)));
    }

    #[test]
    fn a_cookie_is_found_among_others() {
        assert_eq!(cookie_value("a=1; revenant_session=abc; b=2", "revenant_session").as_deref(), Some("abc"));
        assert_eq!(cookie_value("a=1", "revenant_session"), None);
    }
}
