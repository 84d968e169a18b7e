//! Reading plans and their items: live progress, the list of plans, failed items.
//!
//! Policy: progress is the plan row's own counters (one read by id); lists are keyset
//! paginated (plans by id, items by seq) so a page costs the same for any plan size.

use sqlx::PgExecutor;

use super::{
    ReplayError,
    model::{ItemStatus, Plan, PlanItem, PlanStatus, TargetMode},
};

pub async fn get(db: impl PgExecutor<'_>, id: i64) -> Result<Plan, ReplayError> {
    sqlx::query_as!(
        Plan,
        r#"SELECT id, created_by, created_at, source, target_mode AS "target_mode: TargetMode", target_exchange, target_routing_key, rate_per_sec,
            start_at, ordered, order_by, status AS "status: PlanStatus", auto_pause_share, auto_pause_window_secs, paused_reason, total, sent, failed,
            cancelled, updated_at, finished_at
         FROM replay_plans WHERE id = $1"#,
        id
    )
    .fetch_optional(db)
    .await?
    .ok_or(ReplayError::NotFound(id))
}

/// Plans, newest first, with an id below `before_id` when given.
pub async fn list(db: impl PgExecutor<'_>, before_id: Option<i64>, limit: i64) -> Result<Vec<Plan>, ReplayError> {
    Ok(sqlx::query_as!(
        Plan,
        r#"SELECT id, created_by, created_at, source, target_mode AS "target_mode: TargetMode", target_exchange, target_routing_key, rate_per_sec,
            start_at, ordered, order_by, status AS "status: PlanStatus", auto_pause_share, auto_pause_window_secs, paused_reason, total, sent, failed,
            cancelled, updated_at, finished_at
         FROM replay_plans WHERE ($1::bigint IS NULL OR id < $1) ORDER BY id DESC LIMIT $2"#,
        before_id,
        limit.clamp(1, 500)
    )
    .fetch_all(db)
    .await?)
}

/// A plan's items in send order after `after_seq`, optionally only those in `status`.
pub async fn items(
    db: impl PgExecutor<'_>,
    plan_id: i64,
    status: Option<&str>,
    after_seq: Option<i64>,
    limit: i64,
) -> Result<Vec<PlanItem>, ReplayError> {
    Ok(sqlx::query_as!(
        PlanItem,
        r#"SELECT plan_id, dead_letter_id, seq, exchange, routing_key, status AS "status: ItemStatus", error, sent_at, settled_at
         FROM replay_items WHERE plan_id = $1 AND ($2::text IS NULL OR status = $2) AND seq > coalesce($3::bigint, 0)
         ORDER BY seq LIMIT $4"#,
        plan_id,
        status,
        after_seq,
        limit.clamp(1, 1000)
    )
    .fetch_all(db)
    .await?)
}

/// The plan's messages that died again: dead letters linked (`replay_of`) to one it sent,
/// stored after it was created, counted by the failure group they fell into (largest first).
pub async fn died_again(db: impl PgExecutor<'_>, plan_id: i64) -> Result<Vec<(Option<i64>, i64)>, ReplayError> {
    let rows = sqlx::query!(
        r#"SELECT d.group_id, count(*) AS "n!" FROM dead_letters d
           JOIN replay_items i ON i.dead_letter_id = d.replay_of AND i.plan_id = $1 AND i.status = 'sent'
           JOIN replay_plans p ON p.id = i.plan_id
           WHERE d.ingested_at >= p.created_at
           GROUP BY d.group_id ORDER BY count(*) DESC, d.group_id"#,
        plan_id
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.group_id, r.n)).collect())
}

/// `died_again` for several plans in one query: (plan, group, count) rows.
pub async fn died_again_of(
    db: impl PgExecutor<'_>,
    plan_ids: &[i64],
) -> Result<Vec<(i64, Option<i64>, i64)>, ReplayError> {
    let rows = sqlx::query!(
        r#"SELECT i.plan_id, d.group_id, count(*) AS "n!" FROM dead_letters d
           JOIN replay_items i ON i.dead_letter_id = d.replay_of AND i.plan_id = ANY($1) AND i.status = 'sent'
           JOIN replay_plans p ON p.id = i.plan_id
           WHERE d.ingested_at >= p.created_at
           GROUP BY i.plan_id, d.group_id ORDER BY i.plan_id, count(*) DESC, d.group_id"#,
        plan_ids
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.plan_id, r.group_id, r.n)).collect())
}

/// How many of the plan's items are unconfirmed now (they may have been delivered; they are
/// sent again on the plan's next pass).
pub async fn unconfirmed(db: impl PgExecutor<'_>, plan_id: i64) -> Result<i64, ReplayError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM replay_items WHERE plan_id = $1 AND status = 'unconfirmed'"#,
        plan_id
    )
    .fetch_one(db)
    .await?)
}
