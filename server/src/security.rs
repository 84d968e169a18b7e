//! Request security: who is calling, what they may reach, and where a mutation came from.
//!
//! Policy, in order: (1) a mutation (any method but GET/HEAD/OPTIONS) must come from our own
//! origin — `Origin` equal to the request's host or an allowed origin, or, when a browser
//! sends no Origin, `Sec-Fetch-Site: same-origin`; anything else is refused with 403.
//! (2) The caller is resolved from the session cookie, or from `auth.proxy_user_header` when
//! the TCP peer is one of `auth.trusted_proxies`; the client address is the peer's, or the one
//! a trusted proxy forwards in `X-Forwarded-For`. (3) Server functions are POST only and are
//! checked against `app::policy` before they parse their arguments; an endpoint missing there
//! is refused; a body over `API_BODY_LIMIT` is 413, and a NUL byte (whatever the body's
//! content type) or a body that is not UTF-8 is 400, before the function runs. (4) Every page
//! but the sign-in page needs a signed-in user.
//! (5) When `public_url` or `auth.allowed_origins` is set, a `Host` not among them is refused
//! (DNS rebinding), except on the probes. (6) HSTS is sent when `auth.secure_cookies` is on.

pub mod hosts;

use axum::{
    body::Body,
    extract::{ConnectInfo, State},
    http::{HeaderValue, Method, Request, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Redirect, Response},
};
use engine::auth::{ClientIp, Principal};
use types::Access;

use crate::state::ServerState;

const PUBLIC_PREFIXES: &[&str] = &["/pkg/", "/healthz", "/readyz", "/metrics", "/favicon.svg", "/login"];
/// Probes are reached by address (a kubelet, a scraper), so they skip the `Host` check.
const PROBES: &[&str] = &["/healthz", "/readyz", "/metrics"];
/// The largest server-function request body.
pub const API_BODY_LIMIT: usize = 2 * 1024 * 1024;

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

async fn resolve(state: &ServerState, headers: &axum::http::HeaderMap, from_proxy: bool) -> Option<Principal> {
    let pool = &state.app.pool;
    if let Some(h) = state.app.settings.auth.proxy_user_header.as_ref().filter(|_| from_proxy)
        && let Some(user) = headers.get(h.as_str()).and_then(|v| v.to_str().ok())
    {
        return engine::auth::user_principal(pool, user.trim()).await.ok().flatten();
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

pub async fn hosts(State(state): State<ServerState>, req: Request<Body>, next: Next) -> Response {
    let allowed = &state.allowed_hosts;
    if allowed.is_empty() || PROBES.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).map(str::to_ascii_lowercase);
    if host.as_ref().is_some_and(|h| allowed.contains(h)) {
        return next.run(req).await;
    }
    tracing::warn!(host = host.as_deref().unwrap_or("-"), "refused a request for an unknown host");
    (StatusCode::MISDIRECTED_REQUEST, "this console answers only for its public_url / allowed_origins hosts\n")
        .into_response()
}

/// Where a request body holds a NUL byte (PostgreSQL text cannot), whatever its declared
/// type: every server function here decodes its body as a form whatever its `Content-Type`
/// (Leptos' `PostUrl`), so a `text/plain`, multipart or CBOR body reaches the same fields. The
/// answer names the field (a JSON path for JSON), or the body when no field name can be told.
fn nul_field(content_type: &str, body: &[u8]) -> Option<String> {
    const BODY: &str = "request body";
    let json = content_type.trim_start().get(..16).is_some_and(|t| t.eq_ignore_ascii_case("application/json"));
    if json && let Some(at) = serde_json::from_slice::<serde_json::Value>(body).ok().and_then(|v| json_nul("", &v)) {
        return Some(at);
    }
    if let Some((k, _)) = url::form_urlencoded::parse(body).find(|(k, v)| k.contains('\0') || v.contains('\0')) {
        return Some(if field_name(&k) { k.into_owned() } else { BODY.into() });
    }
    body.contains(&0).then(|| BODY.into())
}

fn json_nul(path: &str, v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => s.contains('\0').then(|| path.to_string()),
        serde_json::Value::Array(a) => a.iter().find_map(|v| json_nul(path, v)),
        serde_json::Value::Object(o) => o.iter().find_map(|(k, v)| {
            let at = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            if k.contains('\0') { Some(at) } else { json_nul(&at, v) }
        }),
        _ => None,
    }
}

/// Whether a form key reads as one of our fields (`username`, `q[queue]`), not as the raw
/// text of a body of another type.
fn field_name(k: &str) -> bool {
    !k.is_empty() && k.len() <= 64 && k.chars().all(|c| c.is_ascii_alphanumeric() || "_-.[]".contains(c))
}

/// Reads a server function's body within the limit and refuses NUL bytes in its fields.
async fn checked_body(req: Request<Body>) -> Result<Request<Body>, Response> {
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    let too_large = || {
        fn_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            app::error::AppError::Invalid(format!("the request is larger than {} MiB", API_BODY_LIMIT >> 20)),
        )
    };
    if declared.is_some_and(|n| n > API_BODY_LIMIT) {
        return Err(too_large());
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, API_BODY_LIMIT).await else {
        return Err(too_large());
    };
    let content_type = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if let Some(field) = nul_field(content_type, &bytes) {
        let field = app::format::clip(&field, 64);
        return Err(fn_error(
            StatusCode::BAD_REQUEST,
            app::error::AppError::Invalid(format!("{field}: contains a NUL byte, which a text field cannot hold")),
        ));
    }
    // Every server function reads its body as text: anything else would fail there as a 500.
    if std::str::from_utf8(&bytes).is_err() {
        return Err(fn_error(
            StatusCode::BAD_REQUEST,
            app::error::AppError::Invalid("the request body is not UTF-8 text (send a form)".into()),
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
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
    let proxies = &state.app.settings.auth.trusted_proxies;
    let from_proxy = proxies.trusts(peer.ip());
    let forwarded = req.headers().get("x-forwarded-for").and_then(|v| v.to_str().ok());
    let client = proxies.client(peer.ip(), forwarded);
    let principal = resolve(&state, &req.headers().clone(), from_proxy).await;
    req.extensions_mut().insert(ClientIp(Some(client.to_string())));
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
        if let Access::AtLeast(need) = min {
            let Some(p) = &principal else {
                return fn_error(StatusCode::UNAUTHORIZED, app::error::AppError::Unauthenticated);
            };
            if p.role < need {
                return fn_error(
                    StatusCode::FORBIDDEN,
                    app::error::AppError::Forbidden(format!("this needs the {min} role; you are {}", p.role.as_str())),
                );
            }
        }
        let req = match checked_body(req).await {
            Ok(req) => req,
            Err(refused) => return refused,
        };
        return with_error_status(next.run(req).await).await;
    }
    let public = PUBLIC_PREFIXES.iter().any(|p| path == *p || path.starts_with(p));
    if !public && principal.is_none() && is_safe(req.method()) {
        let target = after_sign_in(&path, req.uri().query());
        return Redirect::to(&format!("/login?next={}", app::format::urlencode(&target))).into_response();
    }
    next.run(req).await
}

/// Where a signed-out caller goes once signed in: back where they were, except that a download
/// (`export`) sends them to the page it downloads from, with the same filter: the console's
/// redirect after signing in navigates inside the app, which cannot fetch a file. The same
/// check as after sign-in (`safe_next`) applies, so the sign-in link never carries a `next`
/// off the console (a request for `//evil.example/` is asked to sign in, then lands on `/`).
fn after_sign_in(path: &str, query: Option<&str>) -> String {
    use types::routes::seg::{DEAD_LETTERS, EXPORT};
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    let download =
        path.strip_prefix(&format!("/{DEAD_LETTERS}")).and_then(|rest| rest.strip_suffix(&format!("/{EXPORT}")));
    let target = match download {
        Some("") => format!("/{DEAD_LETTERS}{query}"),
        Some(id) => format!("/{DEAD_LETTERS}{id}"),
        None => format!("{path}{query}"),
    };
    app::auth::safe_next(&target)
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
    if let Ok(err) = serde_json::from_slice::<app::error::AppError>(&bytes)
        && let Ok(status) = StatusCode::from_u16(err.status())
    {
        parts.status = status;
    }
    Response::from_parts(parts, Body::from(bytes))
}

pub async fn headers(State(state): State<ServerState>, req: Request<Body>, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    if state.app.settings.auth.secure_cookies {
        // Served over TLS (that is what secure cookies mean): browsers should never downgrade.
        h.insert(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static("max-age=31536000; includeSubDomains"));
    }
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
    fn signing_in_from_a_download_leads_to_the_page_it_downloads_from() {
        assert_eq!(
            after_sign_in("/dead-letters/export.ndjson", Some("queue=a&body=x")),
            "/dead-letters?queue=a&body=x"
        );
        assert_eq!(after_sign_in("/dead-letters/42/export.ndjson", None), "/dead-letters/42");
        assert_eq!(after_sign_in("/outbox", Some("bucket=failed")), "/outbox?bucket=failed");
        assert_eq!(after_sign_in("/dead-letters/42", None), "/dead-letters/42");
    }

    #[test]
    fn the_sign_in_link_never_carries_a_next_off_the_console() {
        for path in ["//evil.example/", "/.//evil.example/", "/%2f%2fevil.example", "/%5cevil.example"] {
            assert_eq!(after_sign_in(path, None), "/", "{path}");
        }
        assert_eq!(after_sign_in("/outbox", Some("source=a%2Fb")), "/outbox?source=a%2Fb");
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
    fn nul_bytes_are_found_in_form_and_json_fields() {
        let form = "application/x-www-form-urlencoded";
        assert_eq!(nul_field(form, b"username=a%00b&password=x").as_deref(), Some("username"));
        assert_eq!(nul_field(form, b"username=ab&password=x"), None);
        let json = "application/json";
        assert_eq!(nul_field(json, br#"{"input":{"name":"a\u0000"}}"#).as_deref(), Some("input.name"));
        assert_eq!(nul_field(json, br#"{"input":{"name":"a"}}"#), None);
    }

    #[test]
    fn nul_bytes_are_found_whatever_the_content_type_says() {
        let form = b"username=a%00b&password=x";
        for ct in ["text/plain", "", "APPLICATION/X-WWW-FORM-URLENCODED", "application/cbor", "multipart/form-data"] {
            assert_eq!(nul_field(ct, form).as_deref(), Some("username"), "{ct:?}");
        }
        assert_eq!(nul_field("Application/JSON; charset=utf-8", br#"{"a":["\u0000"]}"#).as_deref(), Some("a"));
        let multipart = b"--b\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nvie\0wer\r\n--b--\r\n";
        assert_eq!(nul_field("multipart/form-data; boundary=b", multipart).as_deref(), Some("request body"));
        let cbor = b"\xa1\x68username\x63a\x00b";
        assert_eq!(nul_field("application/cbor", cbor).as_deref(), Some("request body"));
        assert_eq!(nul_field("text/plain", b"username=viewer&password=x"), None);
    }

    #[test]
    fn an_allowed_origin_passes() {
        let allowed = vec!["https://revenant.example.com".to_string()];
        assert!(same_origin(&h(&[("host", "10.0.0.5:3000"), ("origin", "https://revenant.example.com")]), &allowed));
    }
}
