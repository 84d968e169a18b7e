//! Triage of dead letters: archive picked messages, or a frozen selection of everything that
//! matched a filter, with a reason.
//!
//! Policy: only messages awaiting triage (or already replayed) are archived — one being
//! replayed right now is left alone. The effect and its audit entry commit in one
//! transaction. A bulk archive is resolved into `selection_items` inside PostgreSQL (one
//! INSERT … SELECT, nothing held in memory), shown with its size, and carried out once.

use serde::{Deserialize, Serialize};
use sqlx::{PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use crate::audit::{self, Actor};
use crate::auth::Principal;
use crate::dead_letter::store::{self, ListFilter};

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
    sqlx::query(
        "INSERT INTO selections (id, kind, source, action, reason, filter, created_by, expires_at)
         VALUES ($1, 'dead_letters', 'dead_letters', 'archive', $2, $3, $4, now() + interval '15 minutes')",
    )
    .bind(id)
    .bind(reason)
    .bind(serde_json::to_value(f).unwrap_or_default())
    .bind(&actor.username)
    .execute(&mut *tx)
    .await?;
    let mut q = QueryBuilder::<Postgres>::new("INSERT INTO selection_items (selection_id, item) SELECT ");
    q.push_bind(id).push(", id::text FROM dead_letters WHERE status IN ('awaiting', 'replayed')");
    store::push_conditions(&mut q, f);
    let n = q.build().execute(&mut *tx).await?.rows_affected() as i64;
    sqlx::query("UPDATE selections SET item_count = $2 WHERE id = $1").bind(id).bind(n).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(Frozen { selection_id: id, count: n })
}

pub async fn execute_archive(pool: &PgPool, selection: Uuid, actor: &Actor<'_>) -> Result<u64, TriageError> {
    let mut tx = pool.begin().await?;
    let sel: Option<(Option<String>, serde_json::Value, i64)> = sqlx::query_as(
        "SELECT reason, filter, item_count FROM selections
         WHERE id = $1 AND kind = 'dead_letters' AND executed_at IS NULL AND expires_at > now() FOR UPDATE",
    )
    .bind(selection)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((reason, filter, frozen)) = sel else {
        return Err(TriageError::SelectionGone);
    };
    let changed = sqlx::query(
        "UPDATE dead_letters d SET status = 'archived', archived_reason = $2
         FROM selection_items s
         WHERE s.selection_id = $1 AND d.id = s.item::bigint AND d.status IN ('awaiting', 'replayed')",
    )
    .bind(selection)
    .bind(reason.as_deref().unwrap_or_default())
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query("UPDATE selections SET executed_at = now(), executed_count = $2 WHERE id = $1")
        .bind(selection)
        .bind(changed as i64)
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
