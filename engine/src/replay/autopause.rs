//! The died-again brake: a plan pauses itself when too many of the messages it just sent
//! come back as dead letters again.
//!
//! Policy: among the items a plan sent within its window (`auto_pause_window_secs`), the share
//! whose dead letter has a newer dead letter linked to it (`replay_of`, set at ingest from
//! `x-revenant-replay-id`) must stay at or below `auto_pause_share`. It is judged only once
//! at least [`MIN_SAMPLE`] items were sent in the window, so the first failure of a large
//! plan does not stop it. The pause and its audit entry (actor `system:replay`) commit together.

use serde_json::json;
use sqlx::PgPool;

use crate::{
    audit::{self, Entry},
    auth::{Principal, Role},
};

/// Items sent within the window before the share is judged.
pub const MIN_SAMPLE: i64 = 5;

/// Whether `died` of `sent` is too many for `share`.
pub fn should_pause(sent: i64, died: i64, share: f32) -> bool {
    sent >= MIN_SAMPLE && (died as f64) > f64::from(share) * sent as f64
}

/// The principal automatic actions are audited as.
pub fn system_principal() -> Principal {
    Principal { username: "system:replay".into(), role: Role::Admin }
}

/// Evaluates the brake for a running plan and pauses it when it trips; returns the reason.
pub async fn check(pool: &PgPool, plan_id: i64) -> sqlx::Result<Option<String>> {
    let row = sqlx::query!(
        r#"WITH p AS (SELECT id, created_at, auto_pause_share, auto_pause_window_secs FROM replay_plans
                    WHERE id = $1 AND status = 'running' AND auto_pause_share IS NOT NULL),
              w AS (SELECT i.dead_letter_id FROM replay_items i, p
                    WHERE i.plan_id = p.id AND i.status = 'sent'
                      AND i.sent_at >= now() - make_interval(secs => p.auto_pause_window_secs))
         SELECT p.auto_pause_share AS "auto_pause_share!", p.auto_pause_window_secs,
                (SELECT count(*) FROM w) AS "sent!",
                (SELECT count(*) FROM w WHERE EXISTS (
                    SELECT 1 FROM dead_letters d WHERE d.replay_of = w.dead_letter_id AND d.ingested_at >= p.created_at))
                    AS "died!"
         FROM p"#,
        plan_id
    )
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let (share, window, sent, died) = (row.auto_pause_share, row.auto_pause_window_secs, row.sent, row.died);
    if !should_pause(sent, died, share) {
        return Ok(None);
    }
    let reason = format!(
        "auto-paused: {died} of the last {sent} replayed messages died again within {window} s (limit {:.0}%)",
        f64::from(share) * 100.0
    );
    let mut tx = pool.begin().await?;
    let changed = sqlx::query!(
        "UPDATE replay_plans SET status = 'paused', paused_reason = $2, updated_at = now()
         WHERE id = $1 AND status = 'running'",
        plan_id,
        reason
    )
    .execute(&mut *tx)
    .await?;
    if changed.rows_affected() == 0 {
        return Ok(None);
    }
    let by = system_principal();
    let entry = Entry {
        actor: &by,
        source_ip: None,
        action: "replay.pause",
        target: Some(format!("replay_plan:{plan_id}")),
        filter: None,
        item_count: sent,
        outcome: "ok",
        detail: Some(json!({"reason": reason, "sent_in_window": sent, "died_again": died, "automatic": true})),
    };
    audit::record(&mut *tx, entry).await?;
    tx.commit().await?;
    tracing::warn!(plan_id, sent, died, "replay plan auto-paused: replayed messages are dying again");
    Ok(Some(reason))
}

/// Pauses a running plan on the publisher's own decision (e.g. an ordered plan whose item
/// failed: sending the next one would break the order), audited as `system:replay`.
pub async fn pause_for(pool: &PgPool, plan_id: i64, reason: &str) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let changed = sqlx::query!(
        "UPDATE replay_plans SET status = 'paused', paused_reason = $2, updated_at = now()
         WHERE id = $1 AND status = 'running'",
        plan_id,
        reason
    )
    .execute(&mut *tx)
    .await?;
    if changed.rows_affected() == 0 {
        return Ok(false);
    }
    let by = system_principal();
    let entry = Entry {
        actor: &by,
        source_ip: None,
        action: "replay.pause",
        target: Some(format!("replay_plan:{plan_id}")),
        filter: None,
        item_count: 0,
        outcome: "ok",
        detail: Some(json!({"reason": reason, "automatic": true})),
    };
    audit::record(&mut *tx, entry).await?;
    tx.commit().await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_sample_never_trips_the_brake() {
        assert!(!should_pause(MIN_SAMPLE - 1, MIN_SAMPLE - 1, 0.5));
    }

    #[test]
    fn the_brake_trips_only_above_the_share() {
        assert!(!should_pause(10, 5, 0.5), "exactly the share is still allowed");
        assert!(should_pause(10, 6, 0.5));
        assert!(!should_pause(10, 10, 1.0), "a share of 1 never trips");
    }
}
