//! Sign-in, sign-out and "who am I", as server functions.

use leptos::prelude::*;

use super::*;
use crate::error::AppError;

#[server(prefix = "/api", endpoint = "me")]
pub async fn whoami() -> Result<Option<Caller>, AppError> {
    Ok(crate::guard::principal().map(|p| Caller { username: p.username, role: p.role }))
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
    let max_age = cookie::time::Duration::seconds(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX));
    let cookie = super::session_cookie(token, max_age, state.settings.auth.secure_cookies);
    let resp = expect_context::<leptos_axum::ResponseOptions>();
    resp.append_header(
        http::header::SET_COOKIE,
        http::HeaderValue::from_str(&cookie.to_string()).map_err(AppError::internal)?,
    );
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
    let gone = super::session_cookie(String::new(), cookie::time::Duration::ZERO, state.settings.auth.secure_cookies);
    resp.append_header(
        http::header::SET_COOKIE,
        http::HeaderValue::from_str(&gone.to_string()).map_err(AppError::internal)?,
    );
    leptos_axum::redirect("/login");
    Ok(())
}
