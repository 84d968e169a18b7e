//! Triage of dead letters: archive picked messages, or a frozen selection of everything that
//! matched a filter, with a reason; restore archived ones; purge archived ones past a retention.
//!
//! Policy: only messages awaiting triage (or already replayed) are archived — one being
//! replayed right now is left alone — and only archived ones are restored or purged. The
//! effect and its audit entry commit in one transaction. A bulk archive is resolved into
//! `selection_items` inside PostgreSQL (one INSERT … SELECT, nothing held in memory), shown
//! with its size, and carried out once. A purge deletes in batches of `PURGE_BATCH`, each in
//! its own short transaction with its own `dead_letter.purge` entry (so no row is ever gone
//! without a record, and no transaction holds a million rows); its cutoff is fixed when it
//! starts, and it removes what references the rows: replay items, edits, `replay_of` links.

use chrono::Utc;
use serde::{Deserialize, Serialize};
use sqlx::{PgExecutor, PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use crate::audit::{self, Actor};
use crate::auth::Principal;
use crate::dead_letter::store::{self, ListFilter, Status};

#[derive(Debug, thiserror::Error)]
pub enum TriageError {
    #[error("{0}")]
    Invalid(String),
    #[error("this selection does not exist, has expired, or was already carried out")]
    SelectionGone,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Frozen {
    pub selection_id: Uuid,
    pub count: i64,
}

fn reason_ok(reason: &str) -> Result<&str, TriageError> {
    let r = reason.trim();
    if r.is_empty() {
        return Err(TriageError::Invalid("archiving needs a reason".into()));
    }
    if r.chars().count() > 1000 {
        return Err(TriageError::Invalid("the reason is longer than 1000 characters".into()));
    }
    Ok(r)
}

pub async fn archive_ids(pool: &PgPool, ids: &[i64], reason: &str, actor: &Actor<'_>) -> Result<u64, TriageError> {
    let reason = reason_ok(reason)?;
    if ids.is_empty() || ids.len() > 1000 {
        return Err(TriageError::Invalid("pick between 1 and 1000 messages".into()));
    }
    let mut tx = pool.begin().await?;
    let changed = store::archive(&mut *tx, ids, reason).await?;
    audit::record(
        &mut *tx,
        audit::Entry {
            actor: actor.principal,
            source_ip: actor.ip,
            action: "dead_letter.archive",
            target: Some(format!("{} dead letters", changed.len())),
            filter: None,
            item_count: changed.len() as i64,
            outcome: "ok",
            detail: Some(serde_json::json!({ "ids": changed, "reason": reason })),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(changed.len() as u64)
}

pub async fn freeze_archive(
    pool: &PgPool,
    f: &ListFilter,
    reason: &str,
    actor: &Principal,
) -> Result<Frozen, TriageError> {
    let reason = reason_ok(reason)?;
    let id = Uuid::new_v4();
    let mut tx = pool.begin().await?;
    sqlx::query!(
        "INSERT INTO selections (id, kind, source, action, reason, filter, created_by, expires_at)
         VALUES ($1, 'dead_letters', 'dead_letters', 'archive', $2, $3, $4, now() + interval '15 minutes')",
        id,
        reason,
        serde_json::to_value(f).unwrap_or_default(),
        actor.username
    )
    .execute(&mut *tx)
    .await?;
    // Runtime-checked: the WHERE clause depends on which list filters are given.
    let mut q = QueryBuilder::<Postgres>::new("INSERT INTO selection_items (selection_id, item) SELECT ");
    q.push_bind(id).push(", id::text FROM dead_letters WHERE status IN ('awaiting', 'replayed')");
    store::push_conditions(&mut q, f);
    let n = q.build().execute(&mut *tx).await?.rows_affected() as i64;
    sqlx::query!("UPDATE selections SET item_count = $2 WHERE id = $1", id, n).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(Frozen { selection_id: id, count: n })
}

pub async fn execute_archive(pool: &PgPool, selection: Uuid, actor: &Actor<'_>) -> Result<u64, TriageError> {
    let mut tx = pool.begin().await?;
    let sel = sqlx::query!(
        "SELECT reason, filter, item_count FROM selections
         WHERE id = $1 AND kind = 'dead_letters' AND executed_at IS NULL AND expires_at > now() FOR UPDATE",
        selection
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(sel) = sel else {
        return Err(TriageError::SelectionGone);
    };
    let (reason, filter, frozen) = (sel.reason, sel.filter, sel.item_count);
    let changed = sqlx::query!(
        "UPDATE dead_letters d SET status = 'archived', archived_reason = $2
         FROM selection_items s
         WHERE s.selection_id = $1 AND d.id = s.item::bigint AND d.status IN ('awaiting', 'replayed')",
        selection,
        reason.as_deref().unwrap_or_default()
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query!(
        "UPDATE selections SET executed_at = now(), executed_count = $2 WHERE id = $1",
        selection,
        changed as i64
    )
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut *tx,
        audit::Entry {
            actor: actor.principal,
            source_ip: actor.ip,
            action: "dead_letter.archive",
            target: Some("dead letters matching a filter".into()),
            filter: Some(filter),
            item_count: changed as i64,
            outcome: "ok",
            detail: Some(serde_json::json!({ "selection": selection, "frozen": frozen, "reason": reason })),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(changed)
}

fn ids_ok(ids: &[i64]) -> Result<(), TriageError> {
    if ids.is_empty() || ids.len() > 1000 {
        return Err(TriageError::Invalid("pick between 1 and 1000 messages".into()));
    }
    Ok(())
}

/// Puts archived `ids` back to awaiting triage (their archive reason cleared); the others are
/// left alone. Returns how many were restored.
pub async fn restore_ids(pool: &PgPool, ids: &[i64], actor: &Actor<'_>) -> Result<u64, TriageError> {
    ids_ok(ids)?;
    let mut tx = pool.begin().await?;
    let changed = sqlx::query_scalar!(
        "UPDATE dead_letters SET status = 'awaiting', archived_reason = NULL
         WHERE id = ANY($1) AND status = 'archived' RETURNING id",
        ids
    )
    .fetch_all(&mut *tx)
    .await?;
    audit::record(
        &mut *tx,
        audit::Entry {
            actor: actor.principal,
            source_ip: actor.ip,
            action: "dead_letter.restore",
            target: Some(format!("{} dead letters", changed.len())),
            filter: None,
            item_count: changed.len() as i64,
            outcome: "ok",
            detail: Some(serde_json::json!({ "ids": changed })),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(changed.len() as u64)
}

/// The longest retention a purge accepts, in days.
pub const PURGE_MAX_DAYS: i64 = 36_500;
/// Dead letters deleted per transaction by a purge.
pub const PURGE_BATCH: i64 = 500;

/// `f` narrowed to archived messages ingested more than `days` ago.
fn purge_filter(days: i64, f: &ListFilter) -> Result<ListFilter, TriageError> {
    if !(1..=PURGE_MAX_DAYS).contains(&days) {
        return Err(TriageError::Invalid(format!("keep archived messages between 1 and {PURGE_MAX_DAYS} days")));
    }
    let cutoff = Utc::now() - chrono::Duration::days(days);
    Ok(ListFilter {
        status: Some(Status::Archived),
        older_than: Some(f.older_than.map_or(cutoff, |o| o.min(cutoff))),
        ..f.clone()
    })
}

/// How many archived messages matching `f` and older than `days` a purge would delete now,
/// stopping at `cap` (the caller shows "more than").
pub async fn purge_count(
    db: impl PgExecutor<'_>,
    days: i64,
    f: &ListFilter,
    cap: i64,
) -> Result<(i64, bool), TriageError> {
    Ok(store::count(db, &purge_filter(days, f)?, cap).await?)
}

/// Deletes the archived dead letters matching `f` that were ingested more than `days` ago,
/// batch by batch (see the module policy). Returns how many were deleted.
pub async fn purge_archived(pool: &PgPool, days: i64, f: &ListFilter, actor: &Actor<'_>) -> Result<u64, TriageError> {
    let f = purge_filter(days, f)?;
    let filter = serde_json::to_value(&f).ok();
    let purge = Uuid::new_v4();
    let (mut total, mut batch) = (0u64, 0u32);
    loop {
        let mut tx = pool.begin().await?;
        // Runtime-checked: the WHERE clause depends on which list filters are given.
        let mut q = QueryBuilder::<Postgres>::new("SELECT id FROM dead_letters WHERE true");
        store::push_conditions(&mut q, &f);
        // Rows another transaction holds (a restore, say) are left for the next purge.
        q.push(" ORDER BY ingested_at, id LIMIT ").push_bind(PURGE_BATCH).push(" FOR UPDATE SKIP LOCKED");
        let ids: Vec<i64> = q.build_query_scalar().fetch_all(&mut *tx).await?;
        if ids.is_empty() {
            break;
        }
        sqlx::query!("DELETE FROM replay_items WHERE dead_letter_id = ANY($1)", &ids).execute(&mut *tx).await?;
        sqlx::query!("DELETE FROM dead_letter_edits WHERE dead_letter_id = ANY($1)", &ids).execute(&mut *tx).await?;
        sqlx::query!("UPDATE dead_letters SET replay_of = NULL WHERE replay_of = ANY($1)", &ids)
            .execute(&mut *tx)
            .await?;
        let n = sqlx::query!("DELETE FROM dead_letters WHERE id = ANY($1)", &ids).execute(&mut *tx).await?;
        let n = n.rows_affected();
        batch += 1;
        audit::record(
            &mut *tx,
            audit::Entry {
                actor: actor.principal,
                source_ip: actor.ip,
                action: "dead_letter.purge",
                target: Some(format!("{n} archived dead letters older than {days} days")),
                filter: filter.clone(),
                item_count: n as i64,
                outcome: "ok",
                detail: Some(serde_json::json!({
                    "purge": purge, "batch": batch, "older_than_days": days,
                    "first_id": ids.iter().min(), "last_id": ids.iter().max(),
                })),
            },
        )
        .await?;
        tx.commit().await?;
        total += n;
        if (ids.len() as i64) < PURGE_BATCH {
            break;
        }
    }
    tracing::info!(%purge, deleted = total, batches = batch, older_than_days = days, "archived dead letters purged");
    Ok(total)
}
