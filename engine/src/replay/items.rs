//! The publisher's side of the tables: leasing plans, reading items to send, and the
//! single-statement group marks it writes after confirms.
//!
//! Policy: every statement here is short and stands alone; none is ever open while the broker
//! is awaited. A plan is sent by whoever holds its lease; the lease is renewed while sending
//! and an expired lease lets another instance take the plan over (re-sending what was not
//! marked). Item marks move an item out of `pending` once, and adjust the plan's counters in
//! the same statement, so counters stay exact under re-sends.

use std::time::Duration;

use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use super::model::{Plan, PlanStatus, TargetMode};
use crate::dead_letter::model::{DeadLetter, Status};

/// One item to send, with the dead letter it copies.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub plan_id: i64,
    pub seq: i64,
    pub exchange: String,
    pub routing_key: String,
    /// What its order is kept within (a per-key ordered plan); None: no key.
    pub order_key: Option<String>,
    pub dead_letter: DeadLetter,
}

/// Takes the next due plan nobody holds (scheduled ones become running), skipping `busy`.
pub async fn claim_plan(pool: &PgPool, owner: Uuid, lease: Duration, busy: &[i64]) -> sqlx::Result<Option<Plan>> {
    sqlx::query_as!(
        Plan,
        r#"UPDATE replay_plans SET status = 'running', lease_owner = $1,
            lease_expires_at = now() + make_interval(secs => $2), updated_at = now()
         WHERE id = (SELECT id FROM replay_plans
                     WHERE status IN ('scheduled', 'running') AND start_at <= now()
                       AND (lease_expires_at IS NULL OR lease_expires_at < now()) AND NOT (id = ANY($3))
                     ORDER BY start_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
         RETURNING id, created_by, created_at, source, target_mode AS "target_mode: TargetMode", target_exchange, target_routing_key,
            rate_per_sec, start_at, ordered, order_by, status AS "status: PlanStatus", auto_pause_share, auto_pause_window_secs, paused_reason, total,
            sent, failed, cancelled, updated_at, finished_at"#,
        owner,
        lease.as_secs_f64(),
        busy
    )
    .fetch_optional(pool)
    .await
}

/// Extends the lease; returns the plan's status, or None when the lease is no longer ours.
pub async fn renew(pool: &PgPool, plan_id: i64, owner: Uuid, lease: Duration) -> sqlx::Result<Option<PlanStatus>> {
    sqlx::query_scalar!(
        r#"UPDATE replay_plans SET lease_expires_at = now() + make_interval(secs => $3)
         WHERE id = $1 AND lease_owner = $2 RETURNING status AS "status: PlanStatus""#,
        plan_id,
        owner,
        lease.as_secs_f64()
    )
    .fetch_optional(pool)
    .await
}

pub async fn release(pool: &PgPool, plan_id: i64, owner: Uuid) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE replay_plans SET lease_owner = NULL, lease_expires_at = NULL WHERE id = $1 AND lease_owner = $2",
        plan_id,
        owner
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Marks the plan done when nothing is pending or unconfirmed any more. False when items are
/// still to send, or the plan was paused or cancelled meanwhile.
pub async fn finish(pool: &PgPool, plan_id: i64, owner: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE replay_plans SET status = 'done', finished_at = now(), updated_at = now(),
            lease_owner = NULL, lease_expires_at = NULL
         WHERE id = $1 AND lease_owner = $2 AND status = 'running'
           AND NOT EXISTS (SELECT 1 FROM replay_items WHERE plan_id = $1 AND status = 'pending')
           AND NOT EXISTS (SELECT 1 FROM replay_items WHERE plan_id = $1 AND status = 'unconfirmed')",
        plan_id,
        owner
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Whether items are still to send: pending, or unconfirmed (sent again on the next pass).
pub async fn pending_left(pool: &PgPool, plan_id: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM replay_items WHERE plan_id = $1 AND status = 'pending')
            OR EXISTS (SELECT 1 FROM replay_items WHERE plan_id = $1 AND status = 'unconfirmed') AS "pending!""#,
        plan_id
    )
    .fetch_one(pool)
    .await
}

/// The keys of a per-key ordered plan that an earlier failure holds back, each with the
/// first dead letter that failed: a sender that takes the plan over (after a pause, a crash)
/// must not send their later messages.
pub async fn held_keys(pool: &PgPool, plan_id: i64) -> sqlx::Result<Vec<(String, i64)>> {
    let rows = sqlx::query!(
        r#"SELECT order_key AS "order_key!", (array_agg(dead_letter_id ORDER BY seq))[1] AS "first!" FROM replay_items
         WHERE plan_id = $1 AND status = 'failed' AND order_key IS NOT NULL GROUP BY order_key"#,
        plan_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.order_key, r.first)).collect())
}

/// The next pending items after `after_seq`, in seq order, each with its dead letter as it is
/// to be sent: its latest edit when it was edited.
pub async fn next_pending(pool: &PgPool, plan_id: i64, after_seq: i64, limit: i64) -> sqlx::Result<Vec<Outgoing>> {
    let rows = sqlx::query!(
        "SELECT seq, dead_letter_id, exchange, routing_key, order_key FROM replay_items
         WHERE plan_id = $1 AND status = 'pending' AND seq > $2 ORDER BY seq LIMIT $3",
        plan_id,
        after_seq,
        limit
    )
    .fetch_all(pool)
    .await?;
    let ids: Vec<i64> = rows.iter().map(|r| r.dead_letter_id).collect();
    let letters = sqlx::query_as!(
        DeadLetter,
        r#"SELECT id, queue, message_id, correlation_id, content_type, content_encoding, amqp_timestamp,
            app_id, msg_type, user_id, cluster_id, delivery_mode, priority, expiration, reply_to, headers, body,
            body_size, exchange, routing_key, reason, original_queue, original_exchange, original_routing_keys,
            death_count, first_death_at, error_type, error_message, fingerprint, group_id,
            status AS "status: Status", archived_reason, replay_of, ingested_at, unreadable
         FROM dead_letters WHERE id = ANY($1)"#,
        &ids
    )
    .fetch_all(pool)
    .await?;
    let mut by_id: std::collections::HashMap<i64, DeadLetter> = letters.into_iter().map(|d| (d.id, d)).collect();
    // An edited message is sent as its latest edit (see `edit`).
    for e in super::edit::latest_for(pool, &ids).await? {
        if let Some(dl) = by_id.get_mut(&e.dead_letter_id) {
            e.apply_to(dl);
        }
    }
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            by_id.remove(&r.dead_letter_id).map(|dead_letter| Outgoing {
                plan_id,
                seq: r.seq,
                exchange: r.exchange,
                routing_key: r.routing_key,
                order_key: r.order_key,
                dead_letter,
            })
        })
        .collect())
}

/// After their confirms: the items are sent and their dead letters replayed, in one
/// statement for the whole group. An item cancelled while its publish was in flight is
/// recorded as sent too: it did reach the broker. Items no longer pending or cancelled (a
/// re-send already marked) are left alone, so counters stay exact. Returns how many changed.
///
/// The plan's row is locked first, as `plan::cancel` does, so a flush and a cancel queue up
/// behind each other instead of deadlocking over the items they both touch. The items are
/// found with `= ANY($2)` on the primary key: that is an index condition whatever the
/// statistics say, where a semi-join on `unnest` was planned, on a fresh plan's items not yet
/// analyzed, as a loop over every pending item of the plan (200 ms a group instead of 2).
pub async fn mark_sent(db: impl PgExecutor<'_>, plan_id: i64, dead_letter_ids: &[i64]) -> sqlx::Result<u64> {
    if dead_letter_ids.is_empty() {
        return Ok(0);
    }
    let n = sqlx::query_scalar!(
        r#"WITH pl AS (SELECT id FROM replay_plans WHERE id = $1 FOR NO KEY UPDATE),
         o AS (
            SELECT i.dead_letter_id, i.status AS was FROM replay_items i
            WHERE EXISTS (SELECT 1 FROM pl) AND i.plan_id = $1
              AND i.dead_letter_id = ANY($2::bigint[]) AND i.status IN ('pending', 'cancelled')
            ORDER BY i.dead_letter_id FOR UPDATE OF i),
         it AS (
            UPDATE replay_items i SET status = 'sent', sent_at = now(), settled_at = now(), error = NULL
            FROM o WHERE i.plan_id = $1 AND i.dead_letter_id = o.dead_letter_id
            RETURNING i.dead_letter_id, o.was),
         dl AS (
            UPDATE dead_letters SET status = 'replayed'
            WHERE id IN (SELECT dead_letter_id FROM it) AND status IN ('replaying', 'awaiting')),
         p AS (
            UPDATE replay_plans SET sent = sent + (SELECT count(*) FROM it),
                cancelled = cancelled - (SELECT count(*) FROM it WHERE was = 'cancelled'), updated_at = now()
            WHERE id = $1)
         SELECT count(*) AS "n!" FROM it"#,
        plan_id,
        dead_letter_ids
    )
    .fetch_one(db)
    .await?;
    Ok(n as u64)
}

/// After returns, nacks, or refusals before sending: each item failed with its reason and its
/// dead letter awaits triage again, one statement for the group. Returns how many changed.
/// Found and locked as in [`mark_sent`] (`IN ('pending', 'cancelled')` keeps the planner off
/// the partial pending index, which it would otherwise walk whole on a fresh plan).
pub async fn mark_failed(db: impl PgExecutor<'_>, plan_id: i64, failed: &[(i64, String)]) -> sqlx::Result<u64> {
    if failed.is_empty() {
        return Ok(0);
    }
    let ids: Vec<i64> = failed.iter().map(|f| f.0).collect();
    let reasons: Vec<&str> = failed.iter().map(|f| f.1.as_str()).collect();
    let n = sqlx::query_scalar!(
        r#"WITH pl AS (SELECT id FROM replay_plans WHERE id = $1 FOR NO KEY UPDATE),
         o AS (
            SELECT i.dead_letter_id, i.status AS was FROM replay_items i
            WHERE EXISTS (SELECT 1 FROM pl) AND i.plan_id = $1
              AND i.dead_letter_id = ANY($2::bigint[]) AND i.status IN ('pending', 'cancelled')
            ORDER BY i.dead_letter_id FOR UPDATE OF i),
         it AS (
            UPDATE replay_items i SET status = 'failed', error = u.reason, settled_at = now()
            FROM o, unnest($2::bigint[], $3::text[]) AS u(id, reason)
            WHERE o.was = 'pending' AND u.id = o.dead_letter_id
              AND i.plan_id = $1 AND i.dead_letter_id = o.dead_letter_id
            RETURNING i.dead_letter_id),
         dl AS (
            UPDATE dead_letters SET status = 'awaiting'
            WHERE id IN (SELECT dead_letter_id FROM it) AND status = 'replaying'),
         p AS (
            UPDATE replay_plans SET failed = failed + (SELECT count(*) FROM it), updated_at = now() WHERE id = $1)
         SELECT count(*) AS "n!" FROM it"#,
        plan_id,
        &ids,
        &reasons as &[&str]
    )
    .fetch_one(db)
    .await?;
    Ok(n as u64)
}

/// After publishes with no confirm in time, or whose channel went away: each item is
/// unconfirmed with the reason (it may have been delivered), its dead letter left as it is
/// (replaying: out of triage). Not a failure and not an attempt. Returns how many changed.
pub async fn mark_unconfirmed(db: impl PgExecutor<'_>, plan_id: i64, items: &[(i64, String)]) -> sqlx::Result<u64> {
    if items.is_empty() {
        return Ok(0);
    }
    let ids: Vec<i64> = items.iter().map(|f| f.0).collect();
    let reasons: Vec<&str> = items.iter().map(|f| f.1.as_str()).collect();
    let n = sqlx::query!(
        "UPDATE replay_items i SET status = 'unconfirmed', error = u.reason
         FROM unnest($2::bigint[], $3::text[]) AS u(id, reason)
         WHERE i.plan_id = $1 AND i.dead_letter_id = u.id AND i.dead_letter_id = ANY($2::bigint[])
           AND i.status = 'pending'",
        plan_id,
        &ids,
        &reasons as &[&str]
    )
    .execute(db)
    .await?;
    Ok(n.rows_affected())
}

/// Makes the plan's unconfirmed items pending again, to be sent again under the same message
/// id (their note stays until they are sent). Run when a sender takes the plan and before
/// each further pass. Returns how many.
pub async fn retry_unconfirmed(pool: &PgPool, plan_id: i64) -> sqlx::Result<u64> {
    let n = sqlx::query!(
        "UPDATE replay_items SET status = 'pending' WHERE plan_id = $1 AND status = 'unconfirmed'",
        plan_id
    )
    .execute(pool)
    .await?;
    Ok(n.rows_affected())
}
