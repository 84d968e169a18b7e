//! The `outbox` table: what a service writes, and the relay's claim / mark / release.
//!
//! Policy: a row is published at least once and marked right after its own confirm. The
//! relay claims rows with a *lease* (owner + expiry) in one short statement using
//! `FOR UPDATE SKIP LOCKED`, so several relays share the table without waiting on each other
//! and without holding a transaction open while the broker answers. A lease that expires
//! (its relay crashed or stalled) makes the row claimable again: that is where duplicates
//! come from, never losses. Marks check the row's state so a stale relay cannot undo the
//! work of the relay that took its row over.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

/// AMQP short strings (exchange, routing key, content type, header names) hold 255 bytes.
pub const MAX_SHORT_STRING: usize = 255;
/// `last_error` is for a human; a broker's or driver's message past this is cut.
const MAX_ERROR_LEN: usize = 1_000;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("event {0} is already in the outbox")]
    DuplicateEvent(Uuid),
    #[error("invalid event: {0}")]
    Invalid(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// An event as a service hands it over, inside its own transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub event_id: Uuid,
    pub event_type: String,
    /// `""` is the default exchange (routing key = queue name).
    pub exchange: String,
    pub routing_key: String,
    pub payload: Vec<u8>,
    pub content_type: String,
    /// A JSON object; each value becomes an AMQP header of the matching type.
    pub headers: serde_json::Value,
}

impl NewEvent {
    /// A JSON event with a fresh time-ordered event id and no headers.
    pub fn new(
        event_type: impl Into<String>,
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
        payload: impl Into<Vec<u8>>,
    ) -> Self {
        Self {
            event_id: Uuid::now_v7(),
            event_type: event_type.into(),
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            payload: payload.into(),
            content_type: "application/json".into(),
            headers: serde_json::Value::Object(Default::default()),
        }
    }

    pub fn with_event_id(mut self, id: Uuid) -> Self {
        self.event_id = id;
        self
    }

    pub fn with_content_type(mut self, ct: impl Into<String>) -> Self {
        self.content_type = ct.into();
        self
    }

    pub fn with_headers(mut self, headers: serde_json::Value) -> Self {
        self.headers = headers;
        self
    }
}

/// A row leased to one relay, with everything needed to publish it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedRow {
    pub id: i64,
    pub event_id: Uuid,
    pub event_type: String,
    pub exchange: String,
    pub routing_key: String,
    pub payload: Vec<u8>,
    pub content_type: String,
    pub headers: serde_json::Value,
    pub created_at: DateTime<Utc>,
    /// Attempts made before this claim.
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub lease_expires_at: DateTime<Utc>,
}

/// What a failed attempt did to the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// Back to pending, due again later.
    Retry,
    /// Max attempts reached (or a bad row): `failed`, left for an operator.
    Failed,
    /// The row is no longer ours (lease taken over, published or archived meanwhile): untouched.
    NotOwned,
}

fn short(field: &str, v: &str) -> Result<(), StoreError> {
    if v.len() > MAX_SHORT_STRING {
        return Err(StoreError::Invalid(format!("{field} is {} bytes; AMQP allows {MAX_SHORT_STRING}", v.len())));
    }
    Ok(())
}

/// Writes an event; call it with the service's transaction so the event exists iff the
/// business change commits. The insert fires the NOTIFY that wakes relays at commit.
pub async fn enqueue(ex: impl PgExecutor<'_>, ev: &NewEvent) -> Result<Uuid, StoreError> {
    short("exchange", &ev.exchange)?;
    short("routing key", &ev.routing_key)?;
    short("content type", &ev.content_type)?;
    if !ev.headers.is_object() {
        return Err(StoreError::Invalid("headers must be a JSON object".into()));
    }
    let res = sqlx::query(
        "INSERT INTO outbox (event_id, event_type, exchange, routing_key, payload, content_type, headers)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(ev.event_id)
    .bind(&ev.event_type)
    .bind(&ev.exchange)
    .bind(&ev.routing_key)
    .bind(&ev.payload)
    .bind(&ev.content_type)
    .bind(&ev.headers)
    .execute(ex)
    .await;
    match res {
        Ok(_) => Ok(ev.event_id),
        Err(sqlx::Error::Database(e)) if e.constraint() == Some("outbox_event_id_key") => {
            Err(StoreError::DuplicateEvent(ev.event_id))
        }
        Err(e) => Err(e.into()),
    }
}

/// Leases up to `batch` due rows to `owner` for `lease`, oldest due first.
///
/// One statement, so one short transaction: SKIP LOCKED lets concurrent relays take
/// disjoint rows instead of queueing behind each other's row locks, and the lease (not a
/// held lock) is what keeps the row ours while we wait on the broker.
pub async fn claim(
    ex: impl PgExecutor<'_>,
    owner: Uuid,
    batch: i64,
    lease: Duration,
) -> Result<Vec<ClaimedRow>, StoreError> {
    let mut rows: Vec<ClaimedRow> = sqlx::query_as(
        "WITH due AS (
             SELECT id FROM outbox
             WHERE status = 'pending' AND next_attempt_at <= now()
               AND (lease_expires_at IS NULL OR lease_expires_at < now())
             ORDER BY next_attempt_at, id
             LIMIT $2
             FOR UPDATE SKIP LOCKED)
         UPDATE outbox o
            SET lease_owner = $1, lease_expires_at = now() + make_interval(secs => $3)
           FROM due WHERE o.id = due.id
         RETURNING o.id, o.event_id, o.event_type, o.exchange, o.routing_key, o.payload,
                   o.content_type, o.headers, o.created_at, o.attempts, o.next_attempt_at,
                   o.lease_expires_at",
    )
    .bind(owner)
    .bind(batch)
    .bind(lease.as_secs_f64())
    .fetch_all(ex)
    .await?;
    // RETURNING has no order of its own; publish in the order the rows became due.
    rows.sort_by_key(|r| (r.next_attempt_at, r.id));
    Ok(rows)
}

/// Marks a row published after its confirm. A row another relay already failed is still
/// marked: the broker has it, and that is what the console must show. Archived stays archived.
/// Returns whether the row changed.
pub async fn mark_published(ex: impl PgExecutor<'_>, id: i64) -> Result<bool, StoreError> {
    let res = sqlx::query(
        "UPDATE outbox
            SET status = 'published', published_at = now(), attempts = attempts + 1,
                lease_owner = NULL, lease_expires_at = NULL
          WHERE id = $1 AND status IN ('pending', 'failed')",
    )
    .bind(id)
    .execute(ex)
    .await?;
    Ok(res.rows_affected() == 1)
}

fn clip(reason: &str) -> String {
    if reason.len() <= MAX_ERROR_LEN {
        return reason.to_string();
    }
    let mut end = MAX_ERROR_LEN;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &reason[..end])
}

/// Records a failed attempt by `owner`: the row goes back to pending, due after `retry_in`,
/// or to `failed` once `attempts` reaches `max_attempts`. Only the lease holder may do this,
/// so a relay whose lease was taken over cannot push back a row another relay now handles.
pub async fn mark_attempt_failed(
    ex: impl PgExecutor<'_>,
    id: i64,
    owner: Uuid,
    reason: &str,
    max_attempts: i32,
    retry_in: Duration,
) -> Result<AttemptOutcome, StoreError> {
    let status: Option<String> = sqlx::query_scalar(
        "UPDATE outbox
            SET attempts = attempts + 1, last_error = $3,
                status = CASE WHEN attempts + 1 >= $4 THEN 'failed' ELSE 'pending' END,
                next_attempt_at = now() + make_interval(secs => $5),
                lease_owner = NULL, lease_expires_at = NULL
          WHERE id = $1 AND lease_owner = $2 AND status = 'pending'
         RETURNING status",
    )
    .bind(id)
    .bind(owner)
    .bind(clip(reason))
    .bind(max_attempts)
    .bind(retry_in.as_secs_f64())
    .fetch_optional(ex)
    .await?;
    Ok(match status.as_deref() {
        None => AttemptOutcome::NotOwned,
        Some("failed") => AttemptOutcome::Failed,
        Some(_) => AttemptOutcome::Retry,
    })
}

/// A row that can never be published as it stands (headers not an object, a name too long
/// for AMQP…): `failed` at once, so it neither blocks nor burns retries. An operator fixes
/// or archives it.
pub async fn mark_bad(
    ex: impl PgExecutor<'_>,
    id: i64,
    owner: Uuid,
    reason: &str,
) -> Result<AttemptOutcome, StoreError> {
    mark_attempt_failed(ex, id, owner, reason, 1, Duration::ZERO).await
}

/// Gives back leases on rows `owner` holds but will not publish (shutdown, lost channel),
/// so other relays take them now rather than after the lease expires.
pub async fn release(ex: impl PgExecutor<'_>, owner: Uuid, ids: &[i64]) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let res = sqlx::query(
        "UPDATE outbox SET lease_owner = NULL, lease_expires_at = NULL
          WHERE lease_owner = $1 AND status = 'pending' AND id = ANY($2)",
    )
    .bind(owner)
    .bind(ids)
    .execute(ex)
    .await?;
    Ok(res.rows_affected())
}
