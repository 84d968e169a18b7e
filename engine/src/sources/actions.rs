//! Operator actions on outbox rows: retry now and archive, on picked rows or on a frozen
//! selection of everything that matched a filter.
//!
//! Policy: an action only touches rows still in a state it applies to (pending or failed),
//! so a row published meanwhile is left alone. A bulk action is two steps: `freeze` resolves
//! the filter into a stored id set and reports its size; `execute` acts on exactly that set
//! (never re-evaluating the filter), once, before the selection expires. On Revenant's own
//! outbox the effect and its audit entry commit in one transaction. A mapped table lives in
//! another database: its update commits first, then the audit entry records the outcome.

use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use super::{Source, query};
use crate::audit;
use crate::auth::Principal;

use types::RowAction;

#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error("{0}")]
    Invalid(String),
    #[error("this selection does not exist, has expired, or was already carried out")]
    SelectionGone,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

pub use crate::audit::Actor;

fn check(src: &Source, action: RowAction, reason: Option<&str>) -> Result<(), ActionError> {
    let relayed = src.cols.relayed;
    if action == RowAction::Archive {
        if !relayed {
            return Err(ActionError::Invalid(format!(
                "source `{}` is a mapped table Revenant does not relay, with no archived state; archive it in its own service",
                src.name
            )));
        }
        if reason.map(str::trim).unwrap_or("").is_empty() {
            return Err(ActionError::Invalid("archiving needs a reason".into()));
        }
    }
    if action == RowAction::Retry && !relayed && src.cols.attempts_col.is_none() {
        return Err(ActionError::Invalid(format!(
            "source `{}` declares no attempts_column: its own relay decides when to retry",
            src.name
        )));
    }
    Ok(())
}

/// The ids (bound as `$1`, text) of the rows of a mapped table that an action may touch: still
/// unpublished by the table's own test.
fn mapped_targets(src: &Source) -> String {
    let c = &src.cols;
    format!(
        "SELECT {key} AS row_id FROM {t} WHERE {p} AND {id} = ANY($1::text[]::{ty}[])",
        key = c.row_key(),
        t = c.table,
        p = c.pending_cond,
        id = c.id,
        ty = c.id_type
    )
}

/// The action on a mapped table. Retry forgets the relay's state of the rows (due now, no
/// attempts, no error; archived rows come back too) and resets the table's own attempts and
/// error columns when it has them; archive records the reason in the relay's state. Each is one
/// statement, so one commit.
fn mapped_sql(src: &Source, action: RowAction) -> String {
    let c = &src.cols;
    let targets = mapped_targets(src);
    let lit = &c.source_literal;
    match action {
        RowAction::Retry if !c.relayed => {
            let mut sets = vec![format!("{} = 0", c.attempts_col.clone().unwrap_or_default())];
            if let Some(le) = &c.last_error_col {
                sets.push(format!("{le} = NULL"));
            }
            format!(
                "UPDATE {} SET {} WHERE {} AND {} = ANY($1::text[]::{}[])",
                c.table,
                sets.join(", "),
                c.pending_cond,
                c.id,
                c.id_type
            )
        }
        RowAction::Retry => {
            let mut sets = Vec::new();
            if let Some(a) = &c.attempts_col {
                sets.push(format!("{a} = 0"));
            }
            if let Some(le) = &c.last_error_col {
                sets.push(format!("{le} = NULL"));
            }
            let own = if sets.is_empty() {
                String::new()
            } else {
                format!(
                    ", own AS (UPDATE {t} SET {s} WHERE {k} IN (SELECT row_id FROM targets))",
                    t = c.table,
                    s = sets.join(", "),
                    k = c.row_key()
                )
            };
            // The commit-stream relay has passed the rows it failed or held, and archived
            // ones: their state stays, due now, with a position (0 for one it never held),
            // so that relay sends them, each at the head of its key.
            let forget = if matches!(src.capture, crate::settings::Capture::Logical { .. }) {
                format!(
                    "forgot AS (DELETE FROM revenant.relay_state s USING targets \
                                WHERE s.source = {lit} AND s.row_id = targets.row_id \
                                  AND s.stream_lsn IS NULL AND s.status = 'pending'), \
                     kept AS (UPDATE revenant.relay_state s \
                                 SET status = 'pending', attempts = 0, last_error = NULL, archived_reason = NULL, \
                                     next_attempt_at = now(), stream_lsn = coalesce(s.stream_lsn, 0), updated_at = now() \
                                FROM targets WHERE s.source = {lit} AND s.row_id = targets.row_id \
                                 AND (s.stream_lsn IS NOT NULL OR s.status <> 'pending'))"
                )
            } else {
                format!(
                    "forgot AS (DELETE FROM revenant.relay_state s USING targets \
                                WHERE s.source = {lit} AND s.row_id = targets.row_id)"
                )
            };
            format!("WITH targets AS ({targets}), {forget}{own} SELECT count(*)::bigint FROM targets")
        }
        RowAction::Archive => format!(
            "WITH targets AS ({targets}), \
             archived AS (INSERT INTO revenant.relay_state AS s (source, row_id, status, archived_reason, updated_at) \
                          SELECT {lit}, row_id, 'archived', $2, now() FROM targets \
                          ON CONFLICT (source, row_id) DO UPDATE \
                          SET status = 'archived', archived_reason = EXCLUDED.archived_reason, updated_at = now() \
                          RETURNING 1) \
             SELECT count(*)::bigint FROM archived"
        ),
    }
}

async fn apply<'e>(
    exec: impl sqlx::PgExecutor<'e>,
    src: &Source,
    action: RowAction,
    ids: &[String],
    reason: Option<&str>,
) -> Result<u64, sqlx::Error> {
    let done = match (src.native(), action) {
        (true, RowAction::Retry) => {
            sqlx::query!(
                // A failed row the commit-stream relay never held (failed while polled) is held
                // now, so that relay sends it too (at the head of its key: it is older).
                "UPDATE outbox SET status = 'pending', attempts = 0, last_error = NULL, next_attempt_at = now(),
                        lease_owner = NULL, lease_expires_at = NULL,
                        stream_lsn = CASE WHEN status = 'failed' THEN coalesce(stream_lsn, 0) ELSE stream_lsn END
                 WHERE status IN ('pending', 'failed') AND id::text = ANY($1)",
                ids,
            )
            .execute(exec)
            .await?
        }
        (true, RowAction::Archive) => {
            sqlx::query!(
            "UPDATE outbox SET status = 'archived', archived_reason = $2, lease_owner = NULL, lease_expires_at = NULL
             WHERE status IN ('pending', 'failed') AND id::text = ANY($1)",
            ids,
            reason.unwrap_or_default().trim(),
        )
            .execute(exec)
            .await?
        }
        // Runtime-checked: a mapped table's name and columns come from configuration.
        (false, RowAction::Retry) if !src.cols.relayed => {
            sqlx::query(sqlx::AssertSqlSafe(mapped_sql(src, action))).bind(ids.to_vec()).execute(exec).await?
        }
        (false, _) => {
            // Runtime-checked: a mapped table's name and columns come from configuration.
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(mapped_sql(src, action)))
                .bind(ids.to_vec())
                .bind(reason.unwrap_or_default().trim())
                .fetch_one(exec)
                .await?;
            return Ok(n as u64);
        }
    };
    Ok(done.rows_affected())
}

fn entry<'a>(
    actor: &'a Actor<'a>,
    src: &Source,
    action: RowAction,
    n: i64,
    filter: Option<serde_json::Value>,
    detail: serde_json::Value,
) -> audit::Entry<'a> {
    audit::Entry {
        actor: actor.principal,
        source_ip: actor.ip,
        action: if action == RowAction::Retry { "outbox.retry" } else { "outbox.archive" },
        target: Some(format!("outbox source {}", src.name)),
        filter,
        item_count: n,
        outcome: "ok",
        detail: Some(detail),
    }
}

/// Whether the source's rows are in Revenant's own database, so the action and its audit entry
/// (or the selection's bookkeeping) commit in one transaction. Revenant's schema installed in a
/// service's database (`native = true` with `database_url`) is acted on there, on its own.
fn in_own_db(src: &Source) -> bool {
    src.name == super::NATIVE
}

/// Acts on rows the operator picked. Returns how many rows changed.
pub async fn act_on_ids(
    audit_pool: &PgPool,
    src: &Source,
    action: RowAction,
    ids: &[String],
    reason: Option<&str>,
    actor: &Actor<'_>,
) -> Result<u64, ActionError> {
    check(src, action, reason)?;
    if ids.is_empty() || ids.len() > 1000 {
        return Err(ActionError::Invalid("pick between 1 and 1000 rows".into()));
    }
    let detail = serde_json::json!({ "ids": ids, "reason": reason });
    if in_own_db(src) {
        let mut tx = src.pool.begin().await?;
        let n = apply(&mut *tx, src, action, ids, reason).await?;
        audit::record(&mut *tx, entry(actor, src, action, n as i64, None, detail)).await?;
        tx.commit().await?;
        Ok(n)
    } else {
        let n = apply(&src.pool, src, action, ids, reason).await?;
        audit::record(audit_pool, entry(actor, src, action, n as i64, None, detail)).await?;
        Ok(n)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Frozen {
    pub selection_id: Uuid,
    pub count: i64,
}

/// Resolves the filter now and stores the matching ids (streamed in pages, never all in
/// memory). The selection lives 15 minutes.
pub async fn freeze(
    own: &PgPool,
    src: &Source,
    filter: &query::Filter,
    action: RowAction,
    reason: Option<&str>,
    actor: &Principal,
) -> Result<Frozen, ActionError> {
    check(src, action, reason)?;
    if matches!(filter.bucket, query::Bucket::Published | query::Bucket::Archived) {
        return Err(ActionError::Invalid(format!(
            "rows that are {} cannot be retried or archived",
            filter.bucket.as_str()
        )));
    }
    let id = Uuid::new_v4();
    sqlx::query!(
        "INSERT INTO selections (id, kind, source, action, reason, filter, created_by, expires_at)
         VALUES ($1, 'outbox', $2, $3, $4, $5, $6, now() + interval '15 minutes')",
        id,
        &src.name,
        action.as_str(),
        reason.map(str::trim),
        serde_json::to_value(filter).unwrap_or_default(),
        &actor.username,
    )
    .execute(own)
    .await?;
    let mut after: Option<String> = None;
    let mut total = 0i64;
    loop {
        let (rows, next) = query::list(src, filter, after.as_deref(), 5000).await?;
        if rows.is_empty() {
            break;
        }
        let ids: Vec<String> = rows.into_iter().map(|r| r.id).collect();
        total += ids.len() as i64;
        sqlx::query!(
            "INSERT INTO selection_items (selection_id, item) SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING",
            id,
            &ids,
        )
        .execute(own)
        .await?;
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    sqlx::query!("UPDATE selections SET item_count = $2 WHERE id = $1", id, total).execute(own).await?;
    Ok(Frozen { selection_id: id, count: total })
}

/// Carries out a frozen selection once. Returns how many rows changed (rows that left the
/// applicable states since the freeze are skipped, and the audit entry says so).
pub async fn execute(own: &PgPool, sources: &[Source], selection: Uuid, actor: &Actor<'_>) -> Result<u64, ActionError> {
    let mut tx = own.begin().await?;
    let sel = sqlx::query!(
        "SELECT source, action, reason, filter, item_count FROM selections
         WHERE id = $1 AND kind = 'outbox' AND executed_at IS NULL AND expires_at > now() FOR UPDATE",
        selection,
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(sel) = sel else {
        return Err(ActionError::SelectionGone);
    };
    let (reason, filter, frozen) = (sel.reason, sel.filter, sel.item_count);
    let src = super::find(sources, &sel.source).ok_or(ActionError::SelectionGone)?;
    let action = RowAction::parse(&sel.action).ok_or(ActionError::SelectionGone)?;
    let mut changed = 0u64;
    let mut last = String::new();
    loop {
        let ids: Vec<String> = sqlx::query_scalar!(
            "SELECT item FROM selection_items WHERE selection_id = $1 AND item > $2 ORDER BY item LIMIT 5000",
            selection,
            &last,
        )
        .fetch_all(&mut *tx)
        .await?;
        let Some(l) = ids.last() else { break };
        last = l.clone();
        changed += if in_own_db(src) {
            apply(&mut *tx, src, action, &ids, reason.as_deref()).await?
        } else {
            apply(&src.pool, src, action, &ids, reason.as_deref()).await?
        };
    }
    sqlx::query!(
        "UPDATE selections SET executed_at = now(), executed_count = $2 WHERE id = $1",
        selection,
        changed as i64
    )
    .execute(&mut *tx)
    .await?;
    let detail = serde_json::json!({ "selection": selection, "frozen": frozen, "changed": changed, "reason": reason });
    audit::record(&mut *tx, entry(actor, src, action, changed as i64, Some(filter), detail)).await?;
    tx.commit().await?;
    Ok(changed)
}
