//! Request security: who is calling, what they may reach, and where a mutation came from.
//!
//! Policy, in order: (1) a mutation (any method but GET/HEAD/OPTIONS) must come from our own
//! origin — `Origin` equal to the request's host or an allowed origin, or, when a browser
//! sends no Origin, `Sec-Fetch-Site: same-origin`; anything else is refused with 403.
//! (2) The caller is resolved from the session cookie (or a trusted proxy header when the
//! operator turned that on). (3) Server functions are POST only and are checked against
//! `app::policy` before they parse their arguments; an endpoint missing there is refused.
//! (4) Every page but the sign-in page needs a signed-in user.

use axum::{
    body::Body,
    extract::{ConnectInfo, State},
    http::{HeaderValue, Method, Request, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Redirect, Response},
};
use engine::auth::{ClientIp, Principal, Role};

use crate::web::ServerState;

const PUBLIC_PREFIXES: &[&str] = &["/pkg/", "/healthz", "/readyz", "/metrics", "/favicon.svg", "/login"];

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a mutation's origin is ours. Pure, so it is tested without a server.
pub fn same_origin(headers: &axum::http::HeaderMap, allowed: &[String]) -> bool {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) {
        Some(origin) => {
            let origin = origin.trim_end_matches('/');
            let own = host.is_some_and(|h| origin == format!("http://{h}") || origin == format!("https://{h}"));
            own || allowed.iter().any(|a| a.trim_end_matches('/') == origin)
        }
        None => headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) == Some("same-origin"),
    }
}

pub async fn csrf(State(state): State<ServerState>, req: Request<Body>, next: Next) -> Response {
    if !is_safe(req.method()) && !same_origin(req.headers(), &state.app.settings.auth.allowed_origins) {
        tracing::warn!(method = %req.method(), path = req.uri().path(), "refused a cross-origin mutation");
        return (StatusCode::FORBIDDEN, "cross-origin request refused\n").into_response();
    }
    next.run(req).await
}

async fn resolve(state: &ServerState, headers: &axum::http::HeaderMap) -> Option<Principal> {
    let pool = &state.app.pool;
    if let Some(h) = &state.app.settings.auth.proxy_user_header {
        if let Some(user) = headers.get(h.as_str()).and_then(|v| v.to_str().ok()) {
            return engine::auth::user_principal(pool, user.trim()).await.ok().flatten();
        }
    }
    let cookies = headers.get(header::COOKIE)?.to_str().ok()?;
    let token = app::auth::cookie_value(cookies, app::auth::SESSION_COOKIE)?;
    match engine::auth::session_principal(pool, &token).await {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "session lookup failed");
            None
        }
    }
}

fn fn_error(status: StatusCode, err: app::error::AppError) -> Response {
    let body = serde_json::to_string(&err).unwrap_or_else(|_| "\"Internal\"".into());
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

pub async fn authenticate(
    State(state): State<ServerState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    mut req: Request<Body>,
    next: Next,
) -> Response {
    let principal = resolve(&state, &req.headers().clone()).await;
    req.extensions_mut().insert(ClientIp(Some(peer.ip().to_string())));
    if let Some(p) = &principal {
        req.extensions_mut().insert(p.clone());
    }
    let path = req.uri().path().to_string();
    if let Some(endpoint) = path.strip_prefix("/api/") {
        if req.method() != Method::POST {
            return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")], "server functions take POST only\n")
                .into_response();
        }
        let Some(min) = app::policy::min_role(endpoint) else {
            return fn_error(
                StatusCode::NOT_FOUND,
                app::error::AppError::NotFound(format!("no server function {endpoint}")),
            );
        };
        if min != "public" {
            let Some(p) = &principal else {
                return fn_error(StatusCode::UNAUTHORIZED, app::error::AppError::Unauthenticated);
            };
            let need = Role::parse(min).unwrap_or(Role::Admin);
            if p.role < need {
                return fn_error(
                    StatusCode::FORBIDDEN,
                    app::error::AppError::Forbidden(format!("this needs the {min} role; you are {}", p.role.as_str())),
                );
            }
        }
        return with_error_status(next.run(req).await).await;
    }
    let public = PUBLIC_PREFIXES.iter().any(|p| path == *p || path.starts_with(p));
    if !public && principal.is_none() && is_safe(req.method()) {
        let target = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
        return Redirect::to(&format!("/login?next={}", app::pages::audit::urlencode(target))).into_response();
    }
    next.run(req).await
}

/// Leptos answers every server-function error with 500; give the caller the status the error
/// means (400 invalid, 404, 409, 403, 503…) so clients and logs can tell them apart. `Internal`
/// stays 500.
async fn with_error_status(resp: Response) -> Response {
    if resp.status() != StatusCode::INTERNAL_SERVER_ERROR {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response();
    };
    if let Ok(err) = serde_json::from_slice::<app::error::AppError>(&bytes) {
        if let Ok(status) = StatusCode::from_u16(err.status()) {
            parts.status = status;
        }
    }
    Response::from_parts(parts, Body::from(bytes))
}

pub async fn headers(req: Request<Body>, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'self'; script-src 'self'; object-src 'none'; frame-ancestors 'none'",
            ),
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn a_mutation_from_our_own_origin_passes() {
        assert!(same_origin(&h(&[("host", "ops.local:3000"), ("origin", "http://ops.local:3000")]), &[]));
    }

    #[test]
    fn a_mutation_from_a_foreign_origin_is_refused() {
        assert!(!same_origin(&h(&[("host", "ops.local:3000"), ("origin", "https://evil.example")]), &[]));
        assert!(!same_origin(&h(&[("host", "ops.local:3000"), ("origin", "null")]), &[]));
    }

    #[test]
    fn a_mutation_without_origin_needs_same_origin_fetch_metadata() {
        assert!(!same_origin(&h(&[("host", "ops.local:3000")]), &[]));
        assert!(same_origin(&h(&[("host", "ops.local:3000"), ("sec-fetch-site", "same-origin")]), &[]));
        assert!(!same_origin(&h(&[("host", "ops.local:3000"), ("sec-fetch-site", "cross-site")]), &[]));
    }

    #[test]
    fn an_allowed_origin_passes() {
        let allowed = vec!["https://revenant.example.com".to_string()];
        assert!(same_origin(&h(&[("host", "10.0.0.5:3000"), ("origin", "https://revenant.example.com")]), &allowed));
    }
}
