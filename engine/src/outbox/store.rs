//! The `outbox` table: what a service writes, and the relay's claim / mark / release.
//!
//! Policy: a row is published at least once and marked soon after its own confirm, in groups. The
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

/// The channel the `outbox` retry trigger notifies when an operator puts a row back to
/// pending (nothing notifies on insert: see `outbox::poll`).
pub const NOTIFY_CHANNEL: &str = "revenant_outbox";

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
    /// The event id as text: a uuid in Revenant's schema, whatever the column holds in a
    /// mapped table. It becomes the message's `message_id`.
    pub event_id: String,
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
/// business change commits. Nothing else runs on that commit: relays find the row by polling.
pub async fn enqueue(ex: impl PgExecutor<'_>, ev: &NewEvent) -> Result<Uuid, StoreError> {
    short("exchange", &ev.exchange)?;
    short("routing key", &ev.routing_key)?;
    short("content type", &ev.content_type)?;
    if !ev.headers.is_object() {
        return Err(StoreError::Invalid("headers must be a JSON object".into()));
    }
    let res = sqlx::query!(
        "INSERT INTO outbox (event_id, event_type, exchange, routing_key, payload, content_type, headers)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        ev.event_id,
        ev.event_type,
        ev.exchange,
        ev.routing_key,
        ev.payload,
        ev.content_type,
        ev.headers
    )
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
    let mut rows = sqlx::query_as!(
        ClaimedRow,
        r#"WITH due AS (
             SELECT id FROM outbox
             WHERE status = 'pending' AND next_attempt_at <= now()
               AND (lease_expires_at IS NULL OR lease_expires_at < now())
             ORDER BY next_attempt_at, id
             LIMIT $2
             FOR UPDATE SKIP LOCKED)
         UPDATE outbox o
            SET lease_owner = $1, lease_expires_at = now() + make_interval(secs => $3)
           FROM due WHERE o.id = due.id
         RETURNING o.id, o.event_id::text AS "event_id!", o.event_type, o.exchange, o.routing_key,
                   o.payload, o.content_type, o.headers, o.created_at, o.attempts, o.next_attempt_at"#,
        owner,
        batch,
        lease.as_secs_f64()
    )
    .fetch_all(ex)
    .await?;
    // RETURNING has no order of its own; publish in the order the rows became due.
    rows.sort_by_key(|r| (r.next_attempt_at, r.id));
    Ok(rows)
}

/// Marks rows published after their confirms, many in one statement (the relay's group
/// commit). A row another relay already failed is still marked: the broker has it, and that
/// is what the console must show. Archived stays archived. Returns how many rows changed.
pub async fn mark_published(ex: impl PgExecutor<'_>, ids: &[i64]) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let res = sqlx::query!(
        "UPDATE outbox o
            SET status = 'published', published_at = now(), attempts = o.attempts + 1,
                lease_owner = NULL, lease_expires_at = NULL
           FROM unnest($1::bigint[]) AS m(id)
          WHERE o.id = m.id AND o.status IN ('pending', 'failed')",
        ids
    )
    .execute(ex)
    .await?;
    Ok(res.rows_affected())
}

/// Deletes published rows instead of marking them (the commit stream's `after_publish =
/// "delete"`: the log carried the event, the table stays small). An archived row stays.
pub async fn delete_published(ex: impl PgExecutor<'_>, ids: &[i64]) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let res = sqlx::query!("DELETE FROM outbox WHERE id = ANY($1) AND status IN ('pending', 'failed')", ids)
        .execute(ex)
        .await?;
    Ok(res.rows_affected())
}

/// One failed attempt to record: the row, the broker's reason, when to try again.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedAttempt {
    pub id: i64,
    pub reason: String,
    pub retry_in: Duration,
}

/// Records failed attempts by `owner`, many in one statement: each row goes back to pending,
/// due after its `retry_in`, or to `failed` once `attempts` reaches `max_attempts`. Only the
/// lease holder may do this, so a relay whose lease was taken over cannot push back a row
/// another relay now handles. Returns each changed row's outcome; rows not listed were not ours.
pub async fn mark_attempts_failed(
    ex: impl PgExecutor<'_>,
    owner: Uuid,
    attempts: &[FailedAttempt],
    max_attempts: i32,
) -> Result<Vec<(i64, AttemptOutcome)>, StoreError> {
    if attempts.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = attempts.iter().map(|a| a.id).collect();
    let reasons: Vec<String> = attempts.iter().map(|a| clip(&a.reason)).collect();
    let retry: Vec<f64> = attempts.iter().map(|a| a.retry_in.as_secs_f64()).collect();
    let rows = sqlx::query!(
        "UPDATE outbox o
            SET attempts = o.attempts + 1, last_error = f.reason,
                status = CASE WHEN o.attempts + 1 >= $5 THEN 'failed' ELSE 'pending' END,
                next_attempt_at = now() + make_interval(secs => f.retry),
                lease_owner = NULL, lease_expires_at = NULL
           FROM unnest($2::bigint[], $3::text[], $4::float8[]) AS f(id, reason, retry)
          WHERE o.id = f.id AND o.lease_owner = $1 AND o.status = 'pending'
         RETURNING o.id, o.status",
        owner,
        &ids,
        &reasons,
        &retry,
        max_attempts
    )
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.id, if r.status == "failed" { AttemptOutcome::Failed } else { AttemptOutcome::Retry }))
        .collect())
}

pub(crate) fn clip(reason: &str) -> String {
    if reason.len() <= MAX_ERROR_LEN {
        return reason.to_string();
    }
    let mut end = MAX_ERROR_LEN;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &reason[..end])
}

/// Records one failed attempt by `owner` (see [`mark_attempts_failed`]).
pub async fn mark_attempt_failed(
    ex: impl PgExecutor<'_>,
    id: i64,
    owner: Uuid,
    reason: &str,
    max_attempts: i32,
    retry_in: Duration,
) -> Result<AttemptOutcome, StoreError> {
    let one = [FailedAttempt { id, reason: reason.to_string(), retry_in }];
    let done = mark_attempts_failed(ex, owner, &one, max_attempts).await?;
    Ok(done.first().map_or(AttemptOutcome::NotOwned, |(_, o)| *o))
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
    let res = sqlx::query!(
        "UPDATE outbox SET lease_owner = NULL, lease_expires_at = NULL
          WHERE lease_owner = $1 AND status = 'pending' AND id = ANY($2)",
        owner,
        ids
    )
    .execute(ex)
    .await?;
    Ok(res.rows_affected())
}
