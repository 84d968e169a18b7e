//! The commit stream's bookkeeping in PostgreSQL: the publication (inserts into the outbox
//! table), the logical replication slot (`pgoutput`), what start-up needs, and the slot's lag.
//!
//! Policy:
//! - names are made from the source's name, reduced to `[a-z0-9_]` (so they can be quoted into
//!   DDL safely) and prefixed `revenant_`; a slot is cluster-wide, so one of that name in another
//!   database is refused by name rather than shared;
//! - set-up is idempotent and safe to race: a publication or slot another relay just created is
//!   taken as it is;
//! - what is missing (wal_level, the REPLICATION privilege, a free slot) is said in one line;
//! - the slot's position only moves by [`advance`], which the relay calls with a position below
//!   which every event is settled durably, so a crash re-reads from there and loses nothing.

use sqlx::{PgExecutor, PgPool};

/// A source's publication and slot names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub publication: String,
    pub slot: String,
}

impl Names {
    pub fn for_source(source: &str) -> Names {
        let mut base: String =
            source.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
        // Slot names hold 63 bytes; leave room for the prefix.
        base.truncate(54);
        let name = format!("revenant_{base}");
        Names { publication: name.clone(), slot: name }
    }
}

impl Names {
    /// The names a commit-stream relay uses for `source` in the database of `db`: the database
    /// is in them, since a slot is cluster-wide.
    pub async fn of_source(db: impl PgExecutor<'_>, source: &str) -> Result<Names, sqlx::Error> {
        let name: String = sqlx::query_scalar!(r#"SELECT current_database()::text AS "db!""#).fetch_one(db).await?;
        Ok(Names::for_source(&format!("{name}_{source}")))
    }
}

/// A commit-stream source as its card shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamCard {
    pub slot: String,
    /// None: the slot is not made yet (no relay has started).
    pub status: Option<SlotStatus>,
    /// Events held: refused heads and the events behind them.
    pub held_events: i64,
    /// Of those, the heads that failed for good and wait for an operator.
    pub failed_heads: i64,
}

/// What the database lacks for logical capture, in one line; `Ok` when nothing.
pub async fn preflight(pool: &PgPool, names: &Names) -> Result<(), String> {
    let row = sqlx::query!(
        r#"SELECT current_setting('wal_level') AS "wal_level!",
                  current_user::text AS "role!",
                  (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user) AS "may_replicate!",
                  current_setting('max_replication_slots')::int AS "max_slots!",
                  (SELECT count(*) FROM pg_replication_slots)::int AS "used_slots!",
                  EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1) AS "ours_exists!""#,
        names.slot
    )
    .fetch_one(pool)
    .await
    .map_err(|e| format!("cannot read the replication settings: {e}"))?;
    let mut missing = Vec::new();
    if row.wal_level != "logical" {
        missing.push(format!(
            "wal_level = logical (it is {}: ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)",
            row.wal_level
        ));
    }
    if !row.may_replicate {
        missing.push(format!("the REPLICATION privilege for role {} (ALTER ROLE {} REPLICATION)", row.role, row.role));
    }
    if !row.ours_exists && row.used_slots >= row.max_slots {
        missing.push(format!(
            "a free replication slot (max_replication_slots = {}, all in use: raise it and restart)",
            row.max_slots
        ));
    }
    if missing.is_empty() { Ok(()) } else { Err(format!("logical capture needs {}", missing.join("; "))) }
}

#[derive(Debug, PartialEq, Eq)]
pub enum SetUp {
    Created,
    AlreadyThere,
}

/// Creates the publication of inserts into `table` (schema-qualified, already checked to
/// exist) and the slot, unless they exist.
pub async fn ensure(pool: &PgPool, names: &Names, table: &str) -> anyhow::Result<SetUp> {
    let mut created = false;
    let has_pub: bool = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1) AS "x!""#,
        names.publication
    )
    .fetch_one(pool)
    .await?;
    if !has_pub {
        // Runtime-checked: both names are made of [a-z0-9_.] by Names::for_source and the
        // caller's checked table name, quoted.
        let ddl = format!(
            "CREATE PUBLICATION \"{}\" FOR TABLE {} WITH (publish = 'insert')",
            names.publication,
            quote_table(table)?
        );
        match sqlx::raw_sql(sqlx::AssertSqlSafe(ddl)).execute(pool).await {
            Ok(_) => created = true,
            Err(e) if is_duplicate(&e) => {}
            Err(e) => return Err(anyhow::anyhow!("cannot create publication {}: {e}", names.publication)),
        }
    }
    let elsewhere: Option<Option<String>> =
        sqlx::query_scalar!("SELECT database::text FROM pg_replication_slots WHERE slot_name = $1", names.slot)
            .fetch_optional(pool)
            .await?;
    match elsewhere {
        Some(db) => {
            let here: String =
                sqlx::query_scalar!(r#"SELECT current_database()::text AS "db!""#).fetch_one(pool).await?;
            if db.as_deref() != Some(here.as_str()) {
                anyhow::bail!(
                    "replication slot {} already exists for database {} (slots are cluster-wide): rename this source or drop that slot",
                    names.slot,
                    db.unwrap_or_else(|| "(physical)".into())
                );
            }
        }
        None => {
            let res = sqlx::query!(
                r#"SELECT slot_name::text AS "slot!" FROM pg_create_logical_replication_slot($1, 'pgoutput')"#,
                names.slot
            )
            .fetch_one(pool)
            .await;
            match res {
                Ok(_) => created = true,
                Err(e) if is_duplicate(&e) => {}
                Err(e) => return Err(anyhow::anyhow!("cannot create replication slot {}: {e}", names.slot)),
            }
        }
    }
    Ok(if created { SetUp::Created } else { SetUp::AlreadyThere })
}

fn is_duplicate(e: &sqlx::Error) -> bool {
    e.as_database_error().and_then(|d| d.code()).is_some_and(|c| c == "42710")
}

/// `schema.table` quoted part by part; only plain identifiers are accepted.
fn quote_table(table: &str) -> anyhow::Result<String> {
    let parts: Vec<&str> = table.split('.').collect();
    let plain = |p: &&str| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if parts.len() != 2 || !parts.iter().all(plain) {
        anyhow::bail!("`{table}` is not a plain schema.table name");
    }
    Ok(format!("\"{}\".\"{}\"", parts[0], parts[1]))
}

/// A slot as PostgreSQL reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotStatus {
    /// Whether a session is reading it now, and which backend.
    pub active_pid: Option<i32>,
    /// Everything before this position is settled (bytes from the start of the log).
    pub confirmed: Option<i64>,
    /// Write-ahead log PostgreSQL keeps for this slot: `pg_current_wal_lsn() − restart_lsn`.
    pub retained_bytes: Option<i64>,
}

pub async fn status(db: impl PgExecutor<'_>, slot: &str) -> Result<Option<SlotStatus>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT active_pid,
                  (confirmed_flush_lsn - '0/0')::bigint AS confirmed,
                  (pg_current_wal_lsn() - restart_lsn)::bigint AS retained
             FROM pg_replication_slots WHERE slot_name = $1"#,
        slot
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| SlotStatus { active_pid: r.active_pid, confirmed: r.confirmed, retained_bytes: r.retained }))
}

/// One decoded change as the slot hands it over, not yet read.
#[derive(Debug, Clone)]
pub struct Change {
    pub lsn: i64,
    pub data: Vec<u8>,
}

/// The changes after the slot's position, whole transactions only, about `max` at most; the
/// slot does not move.
pub async fn peek(db: impl PgExecutor<'_>, names: &Names, max: i32) -> Result<Vec<Change>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT (lsn - '0/0')::bigint AS "lsn!", data AS "data!"
             FROM pg_logical_slot_peek_binary_changes($1, NULL, $2,
                  'proto_version', '1', 'publication_names', $3, 'messages', 'true')"#,
        names.slot,
        max,
        names.publication
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| Change { lsn: r.lsn, data: r.data }).collect())
}

/// Moves the slot to `to` (a commit's end position): PostgreSQL may then recycle the log
/// before it, and the next [`peek`] starts after it.
pub async fn advance(db: impl PgExecutor<'_>, slot: &str, to: i64) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"SELECT slot_name::text AS "slot!" FROM pg_replication_slot_advance($1, $2::text::pg_lsn)"#,
        slot,
        lsn_text(to)
    )
    .fetch_one(db)
    .await?;
    Ok(())
}

/// A logical message on an idle database, so its slot's position keeps moving. Written in a
/// transaction of its own: its commit is flushed, so the stream carries it at once (PostgreSQL
/// 15 decodes only flushed WAL, and a non-transactional message is not flushed), and its commit
/// is a position the relay can move the slot to.
pub async fn heartbeat(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(r#"SELECT pg_logical_emit_message(true, 'revenant.heartbeat', '')::text AS "lsn!""#)
        .fetch_one(db)
        .await?;
    Ok(())
}

pub async fn drop_slot(db: impl PgExecutor<'_>, slot: &str) -> Result<(), sqlx::Error> {
    // Runtime-checked: the function returns void, which the macros cannot type.
    sqlx::query("SELECT pg_drop_replication_slot($1)").bind(slot).execute(db).await?;
    Ok(())
}

/// A position as PostgreSQL writes it: `16/B374D848`.
pub fn lsn_text(lsn: i64) -> String {
    let lsn = lsn as u64;
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_and_short_and_positions_read_as_postgresql_writes_them() {
        let n = Names::for_source("Billing-EU/orders");
        assert_eq!(n.slot, "revenant_billing_eu_orders");
        assert!(Names::for_source(&"x".repeat(200)).slot.len() <= 63);
        assert_eq!(lsn_text(0x16_B374_D848), "16/B374D848");
        assert_eq!(quote_table("revenant.outbox").unwrap(), "\"revenant\".\"outbox\"");
        assert!(quote_table("outbox; DROP TABLE x").is_err());
        assert!(quote_table("a.b.c").is_err());
    }
}
