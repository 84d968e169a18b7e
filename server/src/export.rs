//! NDJSON downloads of dead letters: one message (`/dead-letters/{id}/export.ndjson`), or
//! everything the list's filter selects (`/dead-letters/export.ndjson?<the list's query>`).
//!
//! Policy: plain GET routes beside the pages, so a browser downloads them with its session;
//! an anonymous caller is sent to sign in by `security::authenticate`, as for any page, and
//! each route checks the caller against `app::policy::DOWNLOADS` (viewer: what the list's
//! server functions need). The filter is the list's own (`DlQuery` → `ListFilter`, the same
//! validation): a malformed value is 400 naming it. A list download streams rows from
//! PostgreSQL to the client as they arrive (`engine::dead_letter::export`), newest first, at
//! most `export::MAX_ROWS`; at most [`AT_ONCE`] run at a time per process (each holds a
//! database connection while it streams), more are 503, and at most [`PER_USER`] per user,
//! more are 429 (`slots`). A download still sending at `downloads.deadline_secs` is cut off,
//! and so is one whose client has read nothing for `downloads.stall_secs` (`body`,
//! `crate::stall`): either way its slot comes back. Filters are checked before anything is
//! sent (a NUL byte, which PostgreSQL refuses in text, is 400 rather than a broken stream).
//! HEAD answers what GET would (refusals included) and holds no slot, runs no export and
//! audits nothing.
//!
//! Audit: every download writes one `dead_letter.export` entry. One message is audited
//! before it is sent. A list download is audited when its stream ends — complete, cut by a
//! database error, dropped because the client went away, or cut off — with the filter, the
//! number of messages sent and the outcome (`ok`, `failed`, `aborted`, `cut_off` with
//! `detail.cut_off` = `deadline` or `stalled`): the count is then what left, not an
//! estimate. The price: a process killed mid-download leaves no entry.

mod body;
pub mod slots;

use app::{error::AppError, pages::dead_letters::api::DlQuery};
use axum::{
    Extension, Router,
    body::Body,
    extract::{Path, Query, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use engine::auth::{ClientIp, Principal};
use engine::dead_letter::{export, store};
use futures::StreamExt;
use types::routes::seg::{DEAD_LETTERS, EXPORT};

use crate::state::ServerState;

pub use slots::{AT_ONCE, PER_USER};

const NDJSON: &str = "application/x-ndjson";
const ACTION: &str = "dead_letter.export";

pub fn routes() -> Router<ServerState> {
    Router::new()
        .route(&format!("/{DEAD_LETTERS}/{EXPORT}"), get(filtered).head(filtered_head))
        // `{id}` as the dead letter page names it: one name per position in the router.
        .route(&format!("/{DEAD_LETTERS}/{{id}}/{EXPORT}"), get(one).head(one_head))
}

fn refuse(e: AppError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, format!("{e}\n")).into_response()
}

/// The caller, when `app::policy::DOWNLOADS` lets them download.
fn caller(p: Option<Extension<Principal>>) -> Result<Principal, AppError> {
    let Some(Extension(p)) = p else { return Err(AppError::Unauthenticated) };
    let needs = app::policy::DOWNLOADS;
    if !needs.allows(Some(p.role)) {
        return Err(AppError::Forbidden(format!("this needs the {needs} role; you are {}", p.role)));
    }
    Ok(p)
}

fn download(body: Body, filename: &str) -> Response {
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(NDJSON));
    // Only [a-z0-9.-] in the names made below, so no quoting rules apply.
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{filename}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    // Message contents: never kept by a browser cache or a proxy.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn one(
    State(state): State<ServerState>,
    principal: Option<Extension<Principal>>,
    ip: Option<Extension<ClientIp>>,
    Path(id): Path<i64>,
) -> Response {
    let who = match caller(principal) {
        Ok(p) => p,
        Err(e) => return refuse(e),
    };
    let pool = &state.app.pool;
    let d = match store::get(pool, id).await {
        Ok(d) => d,
        Err(store::StoreError::NotFound(_)) => return refuse(AppError::NotFound(format!("no dead letter #{id}"))),
        Err(e) => return refuse(AppError::internal(e)),
    };
    let ip = ip.and_then(|Extension(ClientIp(ip))| ip);
    let entry = engine::audit::Entry {
        actor: &who,
        source_ip: ip.as_deref(),
        action: ACTION,
        target: Some(format!("dead letter #{id}")),
        filter: None,
        item_count: 1,
        outcome: "ok",
        detail: Some(serde_json::json!({ "ids": [id] })),
    };
    // Audited before a byte leaves: no entry, no download.
    if let Err(e) = engine::audit::record(pool, entry).await {
        return refuse(AppError::from(e));
    }
    download(Body::from(export::line(&d)), &format!("dead-letter-{id}.ndjson"))
}

/// HEAD of one message: its headers when it exists and the caller may download it; nothing
/// sent, so nothing audited.
async fn one_head(
    State(state): State<ServerState>,
    principal: Option<Extension<Principal>>,
    Path(id): Path<i64>,
) -> Response {
    if let Err(e) = caller(principal) {
        return refuse(e);
    }
    match store::get(&state.app.pool, id).await {
        Ok(_) => download(Body::empty(), &format!("dead-letter-{id}.ndjson")),
        Err(store::StoreError::NotFound(_)) => refuse(AppError::NotFound(format!("no dead letter #{id}"))),
        Err(e) => refuse(AppError::internal(e)),
    }
}

/// The caller and the filter, when a list download may start (for GET and HEAD alike).
fn admit(principal: Option<Extension<Principal>>, q: &DlQuery) -> Result<(Principal, store::ListFilter), AppError> {
    let who = caller(principal)?;
    let f = app::pages::dead_letters::api::filter_for(q)?;
    Ok((who, f))
}

/// The refusal when no slot is free: 503 when the process runs all it may, 429 when this
/// user already runs theirs; both say when to retry.
fn full(why: slots::Full) -> Response {
    let mut resp = match why {
        slots::Full::Everyone => {
            refuse(AppError::Unavailable(format!("{AT_ONCE} downloads are running; try again when one has finished")))
        }
        slots::Full::You => (
            StatusCode::TOO_MANY_REQUESTS,
            format!("you already have {PER_USER} download running; try again when it has finished\n"),
        )
            .into_response(),
    };
    resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
    resp
}

async fn filtered(
    State(state): State<ServerState>,
    principal: Option<Extension<Principal>>,
    ip: Option<Extension<ClientIp>>,
    Query(q): Query<DlQuery>,
) -> Response {
    let (who, f) = match admit(principal, &q) {
        Ok(ok) => ok,
        Err(e) => return refuse(e),
    };
    let slot = match state.exports.take(&who.username) {
        Ok(slot) => slot,
        Err(why) => return full(why),
    };
    let pool = state.app.pool.clone();
    let rows = export::stream(pool.clone(), f.clone(), export::MAX_ROWS).boxed();
    let ended =
        body::Ended { pool, who, ip: ip.and_then(|Extension(ClientIp(ip))| ip), filter: serde_json::to_value(&f).ok() };
    let lines = body::Lines::new(rows, state.app.settings.downloads, ended, slot);
    let name = format!("dead-letters-{}.ndjson", chrono::Utc::now().format("%Y%m%d-%H%M%S"));
    download(Body::from_stream(lines), &name)
}

/// HEAD: the answer a GET would start with (refusals included, a full house too), without
/// taking a slot or running the export: nothing is sent, so nothing is audited.
async fn filtered_head(
    State(state): State<ServerState>,
    principal: Option<Extension<Principal>>,
    Query(q): Query<DlQuery>,
) -> Response {
    let (who, _) = match admit(principal, &q) {
        Ok(ok) => ok,
        Err(e) => return refuse(e),
    };
    if let Err(why) = state.exports.check(&who.username) {
        return full(why);
    }
    download(Body::empty(), "dead-letters.ndjson")
}
