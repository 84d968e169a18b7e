//! A list download's response body: each dead letter as its NDJSON line, cut off at the
//! download's deadline, audited when it ends however it ends.
//!
//! Policy: the body holds the download's slot and (through the row stream) its database
//! connection, and gives both back when dropped: when it ends, when the client goes away,
//! and when the connection is closed because the client stopped reading (`stall.rs`). The
//! deadline is checked whenever the body is polled and wakes it while it waits for rows; a
//! client that stopped reading is cut by the stall limit instead (the server then does not
//! poll the body), so a slot is held at most until the deadline, or until the stall limit
//! has passed with nothing read.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use engine::auth::Principal;
use engine::dead_letter::{export, store};
use futures::{Stream, StreamExt, stream::BoxStream};
use tokio::time::Sleep;

use super::{ACTION, slots::Slot};

/// What the audit entry at the end of a list download needs.
pub struct Ended {
    pub pool: sqlx::PgPool,
    pub who: Principal,
    pub ip: Option<String>,
    pub filter: Option<serde_json::Value>,
}

/// How a download ended: the audit entry's outcome, and why when it was cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Running,
    Ok,
    Failed,
    /// The deadline passed while it was still sending.
    Deadline,
}

/// The response body: each row as its line; audits when dropped.
pub struct Lines {
    rows: BoxStream<'static, Result<store::DeadLetter, sqlx::Error>>,
    sent: i64,
    end: End,
    deadline: Pin<Box<Sleep>>,
    limit: Duration,
    stall: Duration,
    /// When the last line was handed to the server, until it asks for the next one.
    handed_at: Option<Instant>,
    /// The longest the server took to ask for the next line. It asks once the socket has
    /// taken the last ones, so a wait as long as the stall limit means the client stopped
    /// reading and the connection was closed for it (`stall.rs`). Not the last wait alone:
    /// hyper takes a few more lines into its buffer while it closes.
    longest_wait: Duration,
    ended: Option<Ended>,
    _slot: Slot,
}

impl Lines {
    pub fn new(
        rows: BoxStream<'static, Result<store::DeadLetter, sqlx::Error>>,
        limits: engine::settings::DownloadSettings,
        ended: Ended,
        slot: Slot,
    ) -> Self {
        Self {
            rows,
            sent: 0,
            end: End::Running,
            deadline: Box::pin(tokio::time::sleep(limits.deadline)),
            limit: limits.deadline,
            stall: limits.stall,
            handed_at: None,
            longest_wait: Duration::ZERO,
            ended: Some(ended),
            _slot: slot,
        }
    }

    /// The longest the server has waited to ask for more, the wait since the last line
    /// included when it has not asked again.
    fn waited(&self) -> Duration {
        self.longest_wait.max(self.handed_at.map(|t| t.elapsed()).unwrap_or_default())
    }

    /// The audit entry's outcome, and what cut the download off when something did.
    fn outcome(&self) -> (&'static str, Option<&'static str>) {
        match self.end {
            End::Ok => ("ok", None),
            End::Failed => ("failed", None),
            End::Deadline => ("cut_off", Some("deadline")),
            End::Running if self.waited() >= self.stall => ("cut_off", Some("stalled")),
            End::Running => ("aborted", None),
        }
    }
}

impl Stream for Lines {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.end != End::Running {
            return Poll::Ready(None);
        }
        if let Some(t) = self.handed_at.take() {
            self.longest_wait = self.longest_wait.max(t.elapsed());
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            tracing::warn!(
                sent = self.sent,
                limit_secs = self.limit.as_secs(),
                "dead-letter export cut off at its deadline"
            );
            self.end = End::Deadline;
            // An error, not the end: the client sees a broken download, not a short file
            // that looks complete.
            return Poll::Ready(Some(Err(std::io::Error::other("the download reached its time limit"))));
        }
        Poll::Ready(match ready!(self.rows.poll_next_unpin(cx)) {
            Some(Ok(d)) => {
                self.sent += 1;
                self.handed_at = Some(Instant::now());
                Some(Ok(Bytes::from(export::line(&d))))
            }
            Some(Err(e)) => {
                tracing::error!(error = %e, sent = self.sent, "dead-letter export failed mid-stream");
                self.end = End::Failed;
                Some(Err(std::io::Error::other("the database failed during the export")))
            }
            None => {
                self.end = End::Ok;
                None
            }
        })
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        let Some(e) = self.ended.take() else { return };
        let sent = self.sent;
        let (outcome, cut_off) = self.outcome();
        tracing::info!(sent, outcome, cut_off, "dead-letter export ended");
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(sent, outcome, "cannot audit a dead-letter export: no runtime");
            return;
        };
        runtime.spawn(async move {
            let mut detail =
                serde_json::json!({ "limit": export::MAX_ROWS, "reached_limit": sent >= export::MAX_ROWS });
            if let Some(why) = cut_off {
                detail["cut_off"] = serde_json::json!(why);
            }
            let entry = engine::audit::Entry {
                actor: &e.who,
                source_ip: e.ip.as_deref(),
                action: ACTION,
                target: Some(format!("{sent} dead letters matching a filter")),
                filter: e.filter.clone(),
                item_count: sent,
                outcome,
                detail: Some(detail),
            };
            if let Err(err) = engine::audit::record(&e.pool, entry).await {
                tracing::error!(error = %err, sent, "cannot audit a dead-letter export");
            }
        });
    }
}
