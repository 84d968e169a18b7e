//! Creating a plan, and the operator's pause, resume and cancel.
//!
//! Policy: each action is one transaction holding its effect and its audit entry
//! (`replay.create`, `replay.pause`, `replay.resume`, `replay.cancel`). Creation freezes the
//! set with `INSERT … SELECT` and moves exactly those dead letters awaiting → replaying; one
//! that a concurrent plan took first is dropped from this plan rather than sent twice.
//! Cancel gives every unsent item's dead letter back to awaiting; an item already in flight
//! when cancel lands is recorded as sent if its confirm arrives (it did reach the broker).

use serde_json::json;
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder};

use super::{
    ReplayError, TYPED_CONFIRMATION_ABOVE,
    model::{CreatePlan, Order, Plan},
    progress, selection,
};
use crate::{
    audit::{self, Entry},
    auth::Principal,
    dead_letter::headers,
};

fn check_options(req: &CreatePlan) -> Result<(), ReplayError> {
    if let Some(r) = req.rate_per_sec
        && !(r.is_finite() && r > 0.0)
    {
        return Err(ReplayError::Invalid("the rate must be a positive number of messages per second".into()));
    }
    if let Some(s) = req.auto_pause_share
        && !(s > 0.0 && s <= 1.0)
    {
        return Err(ReplayError::Invalid("the auto-pause share must be above 0 and at most 1".into()));
    }
    if let Order::Header(h) = &req.order {
        headers::check_name(h).map_err(|e| ReplayError::Invalid(format!("order by header: {e}")))?;
    }
    if req.auto_pause_window_secs <= 0 {
        return Err(ReplayError::Invalid("the auto-pause window must be at least one second".into()));
    }
    Ok(())
}

/// Resolves, freezes and schedules a replay. Nothing is sent here: a publisher picks the
/// plan up at `start_at`.
pub async fn create(
    pool: &PgPool,
    by: &Principal,
    client_ip: Option<&str>,
    req: &CreatePlan,
) -> Result<Plan, ReplayError> {
    selection::validate(&req.selection, &req.target)?;
    check_options(req)?;
    let source = serde_json::to_value(&req.selection).map_err(|e| ReplayError::Invalid(e.to_string()))?;
    let (exchange, routing_key) = req.target.fixed().map_or((None, None), |(e, k)| (Some(e), Some(k)));
    let mut tx = pool.begin().await?;
    let plan_id = sqlx::query_scalar!(
        "INSERT INTO replay_plans (created_by, source, target_mode, target_exchange, target_routing_key,
            rate_per_sec, start_at, ordered, order_by, auto_pause_share, auto_pause_window_secs)
         VALUES ($1, $2, $3, $4, $5, $6, coalesce($7, now()), $8, $9, $10, $11) RETURNING id",
        by.username,
        source,
        req.target.mode().as_str(),
        exchange,
        routing_key,
        req.rate_per_sec,
        req.start_at,
        req.order == Order::Plan,
        req.order.column(),
        req.auto_pause_share,
        req.auto_pause_window_secs
    )
    .fetch_one(&mut *tx)
    .await
    .map_err(ReplayError::from_db)?;

    // Runtime-checked: the selection (ids, group or list filter) and the target shape the SQL.
    let mut q = QueryBuilder::<Postgres>::new(
        "INSERT INTO replay_items (plan_id, dead_letter_id, seq, exchange, routing_key, order_key, status)
         SELECT ",
    );
    q.push_bind(plan_id).push(
        ", dead_letter_id, row_number() OVER (ORDER BY failed_at, dead_letter_id), coalesce(exchange, ''),
            coalesce(routing_key, ''), order_key, CASE WHEN exchange IS NULL THEN 'failed' ELSE 'pending' END FROM (",
    );
    selection::push_resolved(&mut q, &req.selection, &req.target, &req.order);
    q.push(") s");
    q.build().execute(&mut *tx).await.map_err(ReplayError::from_db)?;
    let without_destination = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM replay_items WHERE plan_id = $1 AND status = 'failed'"#,
        plan_id
    )
    .fetch_one(&mut *tx)
    .await?;
    if without_destination > 0 {
        return Err(ReplayError::Invalid(format!(
            "{without_destination} of the selected messages name no {} (no x-death, no failure headers); \
             replay them to an exchange or a queue",
            if req.target == super::Target::Origin {
                "queue they died in"
            } else {
                "original exchange and routing key"
            }
        )));
    }

    // READ COMMITTED re-checks `status = 'awaiting'` on rows a concurrent plan just took;
    // those are dropped from this plan, so no message is in two running plans.
    let total = sqlx::query_scalar!(
        r#"WITH moved AS (
            UPDATE dead_letters d SET status = 'replaying' FROM replay_items i
            WHERE i.plan_id = $1 AND d.id = i.dead_letter_id AND d.status = 'awaiting' RETURNING d.id),
         dropped AS (
            DELETE FROM replay_items i WHERE i.plan_id = $1
            AND NOT EXISTS (SELECT 1 FROM moved m WHERE m.id = i.dead_letter_id))
         SELECT count(*) AS "n!" FROM moved"#,
        plan_id
    )
    .fetch_one(&mut *tx)
    .await?;
    if total == 0 {
        return Err(ReplayError::Invalid("nothing to replay: none of the selected messages awaits triage".into()));
    }
    match req.confirm_count {
        Some(typed) if typed != total => {
            return Err(ReplayError::Conflict(format!(
                "the selection now holds {total} messages, not {typed}; preview again"
            )));
        }
        None if total > TYPED_CONFIRMATION_ABOVE => {
            return Err(ReplayError::Invalid(format!("type the number of messages ({total}) to confirm this replay")));
        }
        _ => {}
    }
    sqlx::query!("UPDATE replay_plans SET total = $2 WHERE id = $1", plan_id, total).execute(&mut *tx).await?;
    let detail = json!({
        "plan_id": plan_id, "target": req.target, "rate_per_sec": req.rate_per_sec, "start_at": req.start_at,
        "order": req.order, "auto_pause_share": req.auto_pause_share,
        "auto_pause_window_secs": req.auto_pause_window_secs,
    });
    audit::record(
        &mut *tx,
        Entry {
            actor: by,
            source_ip: client_ip,
            action: "replay.create",
            target: Some(format!("replay_plan:{plan_id}")),
            filter: Some(source),
            item_count: total,
            outcome: "ok",
            detail: Some(detail),
        },
    )
    .await?;
    let plan = progress::get(&mut *tx, plan_id).await?;
    tx.commit().await?;
    tracing::info!(plan_id, total, by = %by.username, mode = req.target.mode().as_str(), "replay plan created");
    Ok(plan)
}

/// Why a control action found nothing to change: no such plan, or not in a state it applies to.
async fn refused(conn: &mut PgConnection, id: i64, action: &str) -> ReplayError {
    match progress::get(conn, id).await {
        Ok(p) => ReplayError::Conflict(format!("cannot {action} a plan that is {}", p.status)),
        Err(e) => e,
    }
}

async fn audit_control(
    conn: &mut PgConnection,
    by: &Principal,
    client_ip: Option<&str>,
    action: &str,
    plan: &Plan,
    items: i64,
    detail: serde_json::Value,
) -> Result<(), ReplayError> {
    let entry = Entry {
        actor: by,
        source_ip: client_ip,
        action,
        target: Some(format!("replay_plan:{}", plan.id)),
        filter: None,
        item_count: items,
        outcome: "ok",
        detail: Some(detail),
    };
    audit::record(conn, entry).await?;
    Ok(())
}

/// Stops sending; items in flight finish, the rest wait for `resume`.
pub async fn pause(
    pool: &PgPool,
    by: &Principal,
    client_ip: Option<&str>,
    id: i64,
    reason: Option<&str>,
) -> Result<Plan, ReplayError> {
    let mut tx = pool.begin().await?;
    let reason = format!("paused by {}{}", by.username, reason.map(|r| format!(": {r}")).unwrap_or_default());
    let changed = sqlx::query!(
        "UPDATE replay_plans SET status = 'paused', paused_reason = $2, updated_at = now()
         WHERE id = $1 AND status IN ('scheduled', 'running')",
        id,
        reason
    )
    .execute(&mut *tx)
    .await?;
    if changed.rows_affected() == 0 {
        return Err(refused(&mut tx, id, "pause").await);
    }
    let plan = progress::get(&mut *tx, id).await?;
    audit_control(&mut tx, by, client_ip, "replay.pause", &plan, plan.left(), json!({"reason": reason})).await?;
    tx.commit().await?;
    tracing::info!(plan_id = id, by = %by.username, "replay plan paused");
    Ok(plan)
}

/// Carries on with the items not yet sent (after an operator's or an automatic pause).
pub async fn resume(pool: &PgPool, by: &Principal, client_ip: Option<&str>, id: i64) -> Result<Plan, ReplayError> {
    let mut tx = pool.begin().await?;
    let changed = sqlx::query!(
        "UPDATE replay_plans SET status = 'running', paused_reason = NULL, updated_at = now()
         WHERE id = $1 AND status = 'paused'",
        id
    )
    .execute(&mut *tx)
    .await?;
    if changed.rows_affected() == 0 {
        return Err(refused(&mut tx, id, "resume").await);
    }
    let plan = progress::get(&mut *tx, id).await?;
    audit_control(&mut tx, by, client_ip, "replay.resume", &plan, plan.left(), json!({})).await?;
    tx.commit().await?;
    tracing::info!(plan_id = id, by = %by.username, "replay plan resumed");
    Ok(plan)
}

/// Ends the plan: unsent items are cancelled and their dead letters await triage again.
pub async fn cancel(pool: &PgPool, by: &Principal, client_ip: Option<&str>, id: i64) -> Result<Plan, ReplayError> {
    let mut tx = pool.begin().await?;
    let changed = sqlx::query!(
        "UPDATE replay_plans SET status = 'cancelled', updated_at = now(), finished_at = now()
         WHERE id = $1 AND status IN ('scheduled', 'running', 'paused')",
        id
    )
    .execute(&mut *tx)
    .await?;
    if changed.rows_affected() == 0 {
        return Err(refused(&mut tx, id, "cancel").await);
    }
    let returned = sqlx::query_scalar!(
        r#"WITH items AS (
            UPDATE replay_items SET status = 'cancelled', settled_at = now()
            WHERE plan_id = $1 AND status IN ('pending', 'unconfirmed') RETURNING dead_letter_id),
         back AS (
            UPDATE dead_letters SET status = 'awaiting'
            WHERE id IN (SELECT dead_letter_id FROM items) AND status = 'replaying' RETURNING id),
         counted AS (
            UPDATE replay_plans SET cancelled = cancelled + (SELECT count(*) FROM items) WHERE id = $1)
         SELECT count(*) AS "n!" FROM back"#,
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    let plan = progress::get(&mut *tx, id).await?;
    audit_control(&mut tx, by, client_ip, "replay.cancel", &plan, returned, json!({"returned_to_awaiting": returned}))
        .await?;
    tx.commit().await?;
    tracing::info!(plan_id = id, by = %by.username, returned, "replay plan cancelled");
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{Selection, Target};

    #[test]
    fn an_order_by_header_an_operator_typed_wrong_is_refused_saying_why() {
        let mut req = CreatePlan::new(Selection::Ids(vec![1]), Target::Origin);
        let long = "x".repeat(256);
        for (header, why) in [
            ("order\nid", "U+000A at character 6"),
            ("order-id\t", "U+0009 at character 9"),
            ("\u{1b}[2Jid", "U+001B at character 1"),
            (" ", "name the header"),
            (long.as_str(), "at most 255 bytes"),
        ] {
            req.order = Order::Header(header.into());
            match check_options(&req) {
                Err(ReplayError::Invalid(m)) => assert!(m.starts_with("order by header: ") && m.contains(why), "{m}"),
                other => panic!("{header:?}: {other:?}"),
            }
        }
        req.order = Order::Header("order-id".into());
        assert!(check_options(&req).is_ok());
    }
}
