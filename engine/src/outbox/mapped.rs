//! Relaying a service's own outbox table (a mapped source with `relay = true`).
//!
//! Policy:
//! - such a table has no lease columns, so one relay at a time publishes it: the one holding
//!   the table's lock ([`super::standby`], keyed by the table's oid); a lost lock shows up at
//!   the next claim (at most one poll later) and the session stops;
//! - a claim reads due rows in id order, skipping the rows this relay still has in flight
//!   or unmarked, and rows held back in `revenant.relay_state` (failed, archived, or waiting
//!   for their retry); the rows are marked the way the table marks them (its flag and/or its
//!   timestamp), attempts and errors are kept in `revenant.relay_state`;
//! - the crash bound is the native one: a standby taking over re-sends at most the publishes
//!   awaiting their confirm plus the unflushed marks (`window + mark_batch - 1`).

use std::{collections::HashSet, sync::Mutex, time::Duration};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{
    driver::{Driver, Written},
    standby::{LockOn, Standby},
    store::{AttemptOutcome, ClaimedRow, FailedAttempt, StoreError},
};
use crate::sources::{Source, mapping::Cols};

pub(crate) struct Mapped {
    pub(crate) source: String,
    marks_pool: PgPool,
    claim_sql: String,
    mark_sql: String,
    /// The advisory lock; claims run on its connection.
    lock: Standby,
    /// Rows claimed and not yet marked or given back: never claimed twice.
    held: Mutex<HashSet<i64>>,
}

impl Mapped {
    pub(crate) fn new(src: &Source, marks_pool: PgPool) -> Self {
        let c = &src.cols;
        Self {
            source: src.name.clone(),
            marks_pool,
            claim_sql: claim_sql(c),
            mark_sql: mark_sql(c),
            lock: Standby::new(&src.name, src.pool.clone(), LockOn::Table(c.table.clone())),
            held: Mutex::new(HashSet::new()),
        }
    }

    async fn claim_rows(&self, batch: i64) -> Result<Vec<ClaimedRow>, StoreError> {
        // Taken before the query: a row leaves `held` only after its mark committed, so a row
        // missing from this list is either unclaimed or already marked when the query starts.
        let skip: Vec<i64> = self.held.lock().unwrap_or_else(|p| p.into_inner()).iter().copied().collect();
        let mut slot = self.lock.conn().await;
        let Some(conn) = slot.as_mut() else {
            return Err(StoreError::Invalid("this relay no longer holds the table's lock".into()));
        };
        // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
        let res = sqlx::query_as::<_, ClaimedRow>(sqlx::AssertSqlSafe(self.claim_sql.clone()))
            .bind(&skip)
            .bind(batch)
            .fetch_all(&mut *conn)
            .await;
        let rows = match res {
            Ok(rows) => rows,
            Err(e) => {
                // The lock lives and dies with this connection: assume it is gone.
                *slot = None;
                return Err(StoreError::Db(e));
            }
        };
        drop(slot);
        self.held.lock().unwrap_or_else(|p| p.into_inner()).extend(rows.iter().map(|r| r.id));
        Ok(rows)
    }

    /// Rows no longer in flight (marked, given back, or a flush that failed).
    fn forget(&self, ids: &[i64]) -> u64 {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        ids.iter().filter(|id| held.remove(id)).count() as u64
    }

    /// One transaction on the table's database: the published marks in one statement, the
    /// failed attempts in another.
    async fn write_all(
        &self,
        published: &[i64],
        failed: &[FailedAttempt],
        max_attempts: i32,
    ) -> Result<(u64, Vec<(i64, AttemptOutcome)>), StoreError> {
        if failed.is_empty() {
            return Ok((self.mark_published(&self.marks_pool, published).await?, Vec::new()));
        }
        let mut tx = self.marks_pool.begin().await?;
        let changed = self.mark_published(&mut *tx, published).await?;
        let outcomes = self.write_failed(&mut *tx, failed, max_attempts).await?;
        tx.commit().await?;
        Ok((changed, outcomes))
    }

    async fn mark_published(&self, ex: impl sqlx::PgExecutor<'_>, ids: &[i64]) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(self.mark_sql.clone()))
            .bind(ids)
            .bind(&self.source)
            .fetch_one(ex)
            .await?;
        Ok(n as u64)
    }

    /// Records failed attempts in `revenant.relay_state`: back to pending after the row's
    /// backoff, or `failed` at `max_attempts`. An archived row stays archived.
    async fn write_failed(
        &self,
        ex: impl sqlx::PgExecutor<'_>,
        attempts: &[FailedAttempt],
        max_attempts: i32,
    ) -> Result<Vec<(i64, AttemptOutcome)>, StoreError> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = attempts.iter().map(|a| a.id).collect();
        let reasons: Vec<String> = attempts.iter().map(|a| super::store::clip(&a.reason)).collect();
        let retry: Vec<f64> = attempts.iter().map(|a| a.retry_in.as_secs_f64()).collect();
        let rows = sqlx::query!(
            "INSERT INTO revenant.relay_state AS s (source, row_id, status, attempts, last_error, next_attempt_at, updated_at)
             SELECT $1, f.id, CASE WHEN 1 >= $5 THEN 'failed' ELSE 'pending' END, 1, f.reason,
                    now() + make_interval(secs => f.retry), now()
               FROM unnest($2::bigint[], $3::text[], $4::float8[]) AS f(id, reason, retry)
             ON CONFLICT (source, row_id) DO UPDATE
                SET attempts = s.attempts + 1, last_error = EXCLUDED.last_error,
                    status = CASE WHEN s.status = 'archived' THEN 'archived'
                                  WHEN s.attempts + 1 >= $5 THEN 'failed' ELSE 'pending' END,
                    next_attempt_at = EXCLUDED.next_attempt_at, updated_at = now()
             RETURNING s.row_id, s.status",
            &self.source,
            &ids,
            &reasons,
            &retry,
            max_attempts
        )
        .fetch_all(ex)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let outcome = match r.status.as_str() {
                    "failed" => AttemptOutcome::Failed,
                    "pending" => AttemptOutcome::Retry,
                    _ => AttemptOutcome::NotOwned,
                };
                (r.row_id, outcome)
            })
            .collect())
    }
}

impl Driver for Mapped {
    async fn acquire(&self, shutdown: &CancellationToken) -> bool {
        self.lock.acquire(shutdown).await
    }

    /// Forgets every row of an ended session: its lost confirms may or may not have reached
    /// the broker, and they are sent again (at least once), as a native lease's expiry would.
    fn reset(&self) {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    async fn unlock(&self) {
        self.lock.release().await
    }

    async fn claim(&self, _owner: Uuid, batch: i64, _lease: Duration) -> Result<Vec<ClaimedRow>, StoreError> {
        self.claim_rows(batch).await
    }

    async fn release(&self, _owner: Uuid, ids: &[i64]) -> Result<u64, StoreError> {
        Ok(self.forget(ids))
    }

    fn leased(&self) -> bool {
        false
    }

    async fn mark_bad(&self, id: i64, _owner: Uuid, reason: &str) -> Result<AttemptOutcome, StoreError> {
        let one = [FailedAttempt { id, reason: reason.to_string(), retry_in: Duration::ZERO }];
        let done = self.write_failed(&self.marks_pool, &one, 1).await?;
        self.forget(&[id]);
        Ok(done.first().map_or(AttemptOutcome::NotOwned, |(_, o)| *o))
    }

    async fn write_marks(
        &self,
        _owner: Uuid,
        max_attempts: i32,
        published: &[i64],
        failed: &[FailedAttempt],
    ) -> Result<Written, StoreError> {
        self.write_all(published, failed, max_attempts).await
    }

    /// Marked or not, the rows are no longer in flight, and a flush given up makes them
    /// claimable again (re-sent, never lost), as a crash would.
    fn flushed(&self, ids: &[i64]) {
        self.forget(ids);
    }
}

/// Due rows in id order: unpublished by the table's test, not held by this relay (`$1`), not
/// held back by the relay's state; `$2` rows at most.
fn claim_sql(c: &Cols) -> String {
    format!(
        "{select} \
          WHERE {p} AND {t}.{id} <> ALL($1::bigint[]) \
            AND NOT EXISTS (SELECT 1 FROM revenant.relay_state s \
                             WHERE s.source = {lit} AND s.row_id = {key} \
                               AND (s.status IN ('failed', 'archived') OR s.next_attempt_at > now())) \
          ORDER BY {t}.{id} LIMIT $2",
        select = select_sql(c),
        key = c.row_key(),
        t = c.table,
        id = c.id,
        p = c.pending_cond,
        lit = c.source_literal,
    )
}

/// The table's rows as the relay publishes them (a `ClaimedRow`), without a condition.
pub(crate) fn select_sql(c: &Cols) -> String {
    format!(
        "SELECT {key} AS id, coalesce({eid}, '') AS event_id, coalesce({ty}, '') AS event_type, \
                coalesce({ex}, '') AS exchange, coalesce({rk}, '') AS routing_key, \
                coalesce({pl}, ''::bytea) AS payload, {ct} AS content_type, {h} AS headers, \
                coalesce({ca}, now()) AS created_at, {at} AS attempts, now() AS next_attempt_at \
           FROM {t}",
        key = c.row_key(),
        eid = c.event_id,
        ty = c.event_type,
        ex = c.exchange,
        rk = c.routing_key,
        pl = c.payload,
        ct = c.content_type,
        h = c.headers,
        ca = c.created_at,
        at = c.attempts,
        t = c.table,
    )
}

/// Marks confirmed rows (`$1`) published the table's way, unless an operator archived them
/// meanwhile; rows with earlier failures get `published` in the relay's state. One statement.
/// The rows are found with `id = ANY($1)`, which the planner takes through the primary key
/// whatever the table's statistics say; a join with `unnest($1)` was planned as a scan of the
/// whole table once the statistics were stale (a table grown since its last ANALYZE: 7 ms a
/// flush at 21 000 rows instead of 2 ms, growing with the table).
pub(crate) fn mark_sql(c: &Cols) -> String {
    format!(
        "WITH marked AS ( \
           UPDATE {t} SET {set} \
            WHERE {t}.{id} = ANY($1::bigint[]) AND {p} \
              AND NOT EXISTS (SELECT 1 FROM revenant.relay_state x WHERE x.source = $2 \
                               AND x.row_id = {key} AND x.status = 'archived') \
           RETURNING {key} AS row_id), \
         noted AS ( \
           UPDATE revenant.relay_state s SET status = 'published', attempts = s.attempts + 1, updated_at = now() \
             FROM marked WHERE s.source = $2 AND s.row_id = marked.row_id) \
         SELECT count(*)::bigint FROM marked",
        key = c.row_key(),
        t = c.table,
        set = c.mark_published_set,
        id = c.id,
        p = c.pending_cond,
    )
}
