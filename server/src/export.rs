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
//! database connection while it streams), more are 503.
//!
//! Audit: every download writes one `dead_letter.export` entry. One message is audited
//! before it is sent. A list download is audited when its stream ends — complete, cut by a
//! database error, or dropped because the client went away — with the filter, the number of
//! messages sent and the outcome (`ok`, `failed`, `aborted`): the count is then what left,
//! not an estimate. The price: a process killed mid-download leaves no entry.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use app::{error::AppError, pages::dead_letters::api::DlQuery};
use axum::{
    Extension, Router,
    body::{Body, Bytes},
    extract::{Path, Query, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use engine::auth::{ClientIp, Principal};
use engine::dead_letter::{export, store};
use futures::{Stream, StreamExt, stream::BoxStream};
use types::routes::seg::{DEAD_LETTERS, EXPORT};

use crate::state::ServerState;

/// List downloads running at once in this process.
pub const AT_ONCE: usize = 2;
const NDJSON: &str = "application/x-ndjson";
const ACTION: &str = "dead_letter.export";

pub fn routes() -> Router<ServerState> {
    Router::new()
        .route(&format!("/{DEAD_LETTERS}/{EXPORT}"), get(filtered).head(filtered_head))
        // `{id}` as the dead letter page names it: one name per position in the router.
        .route(&format!("/{DEAD_LETTERS}/{{id}}/{EXPORT}"), get(one))
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

async fn filtered(
    State(state): State<ServerState>,
    principal: Option<Extension<Principal>>,
    ip: Option<Extension<ClientIp>>,
    Query(q): Query<DlQuery>,
) -> Response {
    let who = match caller(principal) {
        Ok(p) => p,
        Err(e) => return refuse(e),
    };
    let f = match app::pages::dead_letters::api::filter_for(&q) {
        Ok(f) => f,
        Err(e) => return refuse(e),
    };
    let Ok(permit) = state.exports.clone().try_acquire_owned() else {
        let busy = AppError::Unavailable(format!("{AT_ONCE} downloads are running; try again when one has finished"));
        let mut resp = refuse(busy);
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
        return resp;
    };
    let pool = state.app.pool.clone();
    let rows = export::stream(pool.clone(), f.clone(), export::MAX_ROWS).boxed();
    let ended =
        Ended { pool, who, ip: ip.and_then(|Extension(ClientIp(ip))| ip), filter: serde_json::to_value(&f).ok() };
    let lines = Lines { rows, sent: 0, outcome: "aborted", ended: Some(ended), _permit: permit };
    let name = format!("dead-letters-{}.ndjson", chrono::Utc::now().format("%Y%m%d-%H%M%S"));
    download(Body::from_stream(lines), &name)
}

/// HEAD: the answer a GET would start with (refusals included), without running the export:
/// nothing is sent, so nothing is audited.
async fn filtered_head(principal: Option<Extension<Principal>>, Query(q): Query<DlQuery>) -> Response {
    if let Err(e) = caller(principal).and_then(|_| app::pages::dead_letters::api::filter_for(&q).map(|_| ())) {
        return refuse(e);
    }
    download(Body::empty(), "dead-letters.ndjson")
}

/// What the audit entry at the end of a list download needs.
struct Ended {
    pool: sqlx::PgPool,
    who: Principal,
    ip: Option<String>,
    filter: Option<serde_json::Value>,
}

/// The response body: each row as its line; audits when dropped, which the server does
/// when the body ends or the client goes away.
struct Lines {
    rows: BoxStream<'static, Result<store::DeadLetter, sqlx::Error>>,
    sent: i64,
    /// `aborted` (the client left early) until the stream ends otherwise; once it is not,
    /// the body is over.
    outcome: &'static str,
    ended: Option<Ended>,
    /// Released with the body, as the query's connection is.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Stream for Lines {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.outcome != "aborted" {
            return Poll::Ready(None);
        }
        Poll::Ready(match ready!(self.rows.poll_next_unpin(cx)) {
            Some(Ok(d)) => {
                self.sent += 1;
                Some(Ok(Bytes::from(export::line(&d))))
            }
            Some(Err(e)) => {
                tracing::error!(error = %e, sent = self.sent, "dead-letter export failed mid-stream");
                self.outcome = "failed";
                // An error ends the body early, so the client sees a failed download rather
                // than a file that looks complete.
                Some(Err(std::io::Error::other("the database failed during the export")))
            }
            None => {
                self.outcome = "ok";
                None
            }
        })
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        let Some(e) = self.ended.take() else { return };
        let (sent, outcome) = (self.sent, self.outcome);
        tracing::info!(sent, outcome, "dead-letter export ended");
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(sent, outcome, "cannot audit a dead-letter export: no runtime");
            return;
        };
        runtime.spawn(async move {
            let entry = engine::audit::Entry {
                actor: &e.who,
                source_ip: e.ip.as_deref(),
                action: ACTION,
                target: Some(format!("{sent} dead letters matching a filter")),
                filter: e.filter.clone(),
                item_count: sent,
                outcome,
                detail: Some(
                    serde_json::json!({ "limit": export::MAX_ROWS, "reached_limit": sent >= export::MAX_ROWS }),
                ),
            };
            if let Err(err) = engine::audit::record(&e.pool, entry).await {
                tracing::error!(error = %err, sent, "cannot audit a dead-letter export");
            }
        });
    }
}
