//! Every logical replication slot of a source's database, as the console shows them, and the
//! admin's audited drop.
//!
//! Policy: a slot nobody reads keeps every byte of write-ahead log written since its position,
//! until the disk is full; the console lists each logical slot of each source's database (its
//! own and any other tool's) with what it holds back, and says which nobody reads. Dropping one
//! is an admin's action: typed confirmation (the console's), refused while a session reads the
//! slot, audited with what it held back. Whatever read the slot loses its place in the log
//! (the console names a slot by its name and plugin only, so say so before confirming).

use sqlx::PgExecutor;

use crate::audit::{self, Actor};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRow {
    pub name: String,
    /// The database it belongs to (several sources may share one).
    pub database: String,
    pub plugin: Option<String>,
    /// The backend reading it now, or the session of the Revenant relay that reads it between
    /// claims; None: nobody reads it.
    pub active_pid: Option<i32>,
    /// Write-ahead log kept for it: `pg_current_wal_lsn() − restart_lsn`.
    pub retained_bytes: Option<i64>,
    /// PostgreSQL's own verdict: reserved, extended, unreserved or lost.
    pub wal_status: Option<String>,
}

/// The logical slots of this connection's database, most WAL held back first.
pub async fn list(db: impl PgExecutor<'_>) -> Result<Vec<SlotRow>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT slot_name::text AS "name!", database::text AS "database!", plugin::text AS plugin,
                  -- A commit-stream relay reads its slot between claims too: the session holding
                  -- the slot's relay lock (outbox/standby.rs) is its reader.
                  coalesce(active_pid, (SELECT l.pid FROM pg_locks l
                                         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                                           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                                           AND l.classid::bigint = (hashtextextended('revenant.stream:' || slot_name, 0) >> 32) & 4294967295
                                           AND l.objid::bigint = hashtextextended('revenant.stream:' || slot_name, 0) & 4294967295
                                         LIMIT 1)) AS active_pid,
                  (pg_current_wal_lsn() - restart_lsn)::bigint AS retained, wal_status
             FROM pg_replication_slots
            WHERE slot_type = 'logical' AND database = current_database()
            ORDER BY retained DESC NULLS LAST, slot_name"#
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| SlotRow {
            name: r.name,
            database: r.database,
            plugin: r.plugin,
            active_pid: r.active_pid,
            retained_bytes: r.retained,
            wal_status: r.wal_status,
        })
        .collect())
}

#[derive(Debug, thiserror::Error)]
pub enum DropError {
    #[error("no logical replication slot `{0}` in this source's database")]
    NotFound(String),
    #[error("slot `{slot}` is being read (backend {pid}); stop what reads it first")]
    Active { slot: String, pid: i32 },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Drops `slot` of `source`'s database (on `src_db`) and records it in the audit log (on
/// `audit_db`). Returns the bytes of WAL it held back.
pub async fn drop_audited(
    src_db: &sqlx::PgPool,
    audit_db: &sqlx::PgPool,
    source: &str,
    slot: &str,
    actor: &Actor<'_>,
) -> Result<Option<i64>, DropError> {
    let found = list(src_db).await?.into_iter().find(|s| s.name == slot);
    let Some(found) = found else { return Err(DropError::NotFound(slot.to_string())) };
    if let Some(pid) = found.active_pid {
        return Err(DropError::Active { slot: slot.to_string(), pid });
    }
    if let Err(e) = super::slot::drop_slot(src_db, slot).await {
        // Taken by a reader between the look and the drop: PostgreSQL refuses, "in use".
        if e.as_database_error().and_then(|d| d.code()).is_some_and(|c| c == "55006") {
            return Err(DropError::Active { slot: slot.to_string(), pid: 0 });
        }
        return Err(e.into());
    }
    let detail = serde_json::json!({
        "retained_bytes": found.retained_bytes,
        "plugin": found.plugin,
        "wal_status": found.wal_status,
    });
    audit::record(
        audit_db,
        audit::Entry {
            actor: actor.principal,
            source_ip: actor.ip,
            action: "outbox.slot_drop",
            target: Some(format!("outbox source {source} slot {slot}")),
            filter: None,
            item_count: 1,
            outcome: "ok",
            detail: Some(detail),
        },
    )
    .await?;
    Ok(found.retained_bytes)
}

/// Drops every logical replication slot of database `db` (a test's or a bench's, about to be
/// dropped: PostgreSQL refuses to drop a database with slots); a session still reading one is
/// ended first. Best effort: errors leave the slots, and the database's drop says so.
pub async fn drop_all_of(admin: &mut sqlx::PgConnection, db: &str) {
    let _ = sqlx::query!(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL",
        db
    )
    .fetch_all(&mut *admin)
    .await;
    for _ in 0..20 {
        // Runtime-checked: the function returns void, which the macros cannot type.
        let dropped = sqlx::query(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active",
        )
        .bind(db)
        .execute(&mut *admin)
        .await;
        let left: i64 =
            sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM pg_replication_slots WHERE database = $1"#, db)
                .fetch_one(&mut *admin)
                .await
                .unwrap_or(0);
        if dropped.is_ok() && left == 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
