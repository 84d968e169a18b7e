//! The table's side of the commit-stream driver: what it reads and writes in the relayed
//! table and where a held event's position is kept, one implementation per kind of table.
//!
//! Policy: every method speaks of rows by their bigint id and of events *held* (pending, with
//! the position of their commit kept durably) the same way, so the stream driver holds,
//! releases and settles both kinds alike:
//! - `own.rs`: Revenant's `outbox` schema; the position is `outbox.stream_lsn`;
//! - `mapped_table.rs`: a service's own table through its mapping; the
//!   position, attempts and errors are kept in `revenant.relay_state` beside it.

use std::future::Future;

use sqlx::{PgConnection, PgPool};

use crate::outbox::{
    logical::{event::Layout, pgoutput::Relation},
    store::{AttemptOutcome, ClaimedRow, FailedAttempt, StoreError},
};

/// A held key's event: `run` when it goes out now (due, in its key's run from the head on).
pub(crate) struct Held {
    pub key: String,
    pub id: i64,
    pub run: bool,
}

/// A row the table has, and whether it is settled (published, archived, failed or held).
pub(crate) struct Known {
    pub id: i64,
    pub settled: bool,
}

/// Failed attempts of one flush, as [`StreamTable::write_failed`] records them.
pub(crate) struct Refusals<'a> {
    pub failed: &'a [FailedAttempt],
    /// Each event's commit position (`None` for a held head: it has one).
    pub at: &'a [Option<i64>],
    /// Whether an earlier event of its key is refused in the same flush (it is only held).
    pub follower: &'a [bool],
    /// The ordering key's header, or `None` for the routing key.
    pub header: Option<&'a str>,
    pub max_attempts: i32,
}

impl Refusals<'_> {
    /// The refusals as a statement's arrays: ids, reasons (clipped), backoff in seconds.
    pub fn arrays(&self) -> (Vec<i64>, Vec<String>, Vec<f64>) {
        let ids = self.failed.iter().map(|a| a.id).collect();
        let reasons = self.failed.iter().map(|a| crate::outbox::store::clip(&a.reason)).collect();
        let retry = self.failed.iter().map(|a| a.retry_in.as_secs_f64()).collect();
        (ids, reasons, retry)
    }
}

pub(crate) trait StreamTable: Send + Sync + 'static {
    /// How this table's inserts are read from the stream's description of it.
    fn layout(&self, rel: &Relation) -> Result<Layout, String>;

    /// Whether the database has what holding events needs (one line when not); the table's
    /// oid and `schema.name`, which the publication covers.
    fn ready(&self, pool: &PgPool) -> impl Future<Output = Result<(u32, String), String>> + Send;

    /// Holds every pending row not in `streamed` (written before the slot) at `at`.
    fn adopt(
        &self,
        conn: &mut PgConnection,
        at: i64,
        streamed: &[i64],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// The held keys and of each the run of due events from its head on (up to `batch`).
    fn held(
        &self,
        conn: &mut PgConnection,
        header: Option<&str>,
        batch: i64,
    ) -> impl Future<Output = Result<Vec<Held>, StoreError>> + Send;

    /// Which of these rows the table has, and whether each is settled.
    fn known(
        &self,
        conn: &mut PgConnection,
        ids: &[i64],
    ) -> impl Future<Output = Result<Vec<Known>, StoreError>> + Send;

    /// The events of these rows, in id order.
    fn rows(
        &self,
        conn: &mut PgConnection,
        ids: &[i64],
    ) -> impl Future<Output = Result<Vec<ClaimedRow>, StoreError>> + Send;

    /// Holds these still pending, unheld rows at their commit's position: `(id, position)`.
    fn hold(
        &self,
        conn: &mut PgConnection,
        hold: &[(i64, i64)],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Fails a row that can never be published as it stands; false when it was not pending.
    fn mark_bad(
        &self,
        conn: &mut PgConnection,
        id: i64,
        reason: &str,
        at: Option<i64>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Marks these rows published (in the caller's transaction); `delete`: deletes them instead.
    fn write_published(
        &self,
        conn: &mut PgConnection,
        delete: bool,
        ids: &[i64],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Records refused events (in the caller's transaction): a head's attempt with its
    /// backoff, or `failed` at `max_attempts`; an event behind an earlier held or refused one
    /// of its key only held, no attempt counted. Returns each row's new status.
    fn write_failed(
        &self,
        conn: &mut PgConnection,
        r: Refusals<'_>,
    ) -> impl Future<Output = Result<Vec<(i64, AttemptOutcome)>, StoreError>> + Send;

    /// How many events are held, and how many of them failed for good (the card's figures).
    fn held_counts(&self, pool: &PgPool) -> impl Future<Output = Result<(i64, i64), sqlx::Error>> + Send;
}

/// A refused event's new status as the relay counts it.
pub(super) fn outcome(status: &str) -> AttemptOutcome {
    match status {
        "failed" => AttemptOutcome::Failed,
        "pending" => AttemptOutcome::Retry,
        _ => AttemptOutcome::NotOwned,
    }
}

/// The table's oid (the stream names the relation it changed by it) and its `schema.name`.
pub(super) async fn table_of(pool: &PgPool, table: &str) -> Result<(u32, String), String> {
    let row = sqlx::query!(
        r#"SELECT c.oid::bigint AS "oid!", n.nspname::text AS "schema!", c.relname::text AS "name!"
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.oid = to_regclass($1)"#,
        table
    )
    .fetch_optional(pool)
    .await
    .map_err(|e| format!("cannot read table {table}: {e}"))?
    .ok_or_else(|| format!("table {table} does not exist"))?;
    Ok((row.oid as u32, format!("{}.{}", row.schema, row.name)))
}
