//! A service's own outbox table (a mapped source) read from the commit stream: the stream
//! gives each inserted row's id in commit order, the row itself is read through the mapping
//! (its expressions are SQL), and a held event's position, attempts and error are kept in
//! `revenant.relay_state` beside the table, as the polling relay keeps its failures.
//!
//! Policy: the service's table is only ever marked the table's way (its flag and/or
//! timestamp), never deleted from; the relay's state rows name columns `revenant_*` wherever
//! they meet the table's, so a mapped column named like one of them cannot be confused.

use sqlx::{PgConnection, PgPool};

use super::table::{Held, Known, Refusals, StreamTable};
use crate::{
    outbox::{
        logical::{event::Layout, pgoutput::Relation},
        store::{self, AttemptOutcome, ClaimedRow, StoreError},
    },
    sources::{Source, mapping::Cols},
};

pub(crate) struct MappedTable {
    source: String,
    cols: Cols,
    held_sql: String,
    known_sql: String,
    rows_sql: String,
    hold_sql: String,
    adopt_sql: String,
    mark_sql: String,
    failed_sql: String,
    counts_sql: String,
}

impl MappedTable {
    pub(crate) fn new(src: &Source) -> Self {
        let c = &src.cols;
        Self {
            source: src.name.clone(),
            cols: c.clone(),
            held_sql: held_sql(c),
            known_sql: known_sql(c),
            rows_sql: format!(
                "{} WHERE {t}.{id} = ANY($1::bigint[]) ORDER BY {t}.{id}",
                crate::outbox::mapped::select_sql(c),
                t = c.table,
                id = c.id
            ),
            hold_sql: hold_sql(c),
            adopt_sql: adopt_sql(c),
            mark_sql: crate::outbox::mapped::mark_sql(c),
            failed_sql: failed_sql(c),
            counts_sql: counts_sql(c),
        }
    }
}

/// The relay's state of the table's held events joined to the rows still pending, with the
/// ordering key (`$1`: a header, or NULL for the routing key) as `k`.
fn held_rows(c: &Cols) -> String {
    format!(
        "SELECT coalesce(CASE WHEN $1::text IS NULL THEN {rk} ELSE ({h})->>$1 END, '') AS k, \
                st.revenant_row AS id, st.revenant_status AS status, st.revenant_attempts AS attempts, \
                st.revenant_next AS next_attempt_at, st.revenant_lsn AS stream_lsn \
           FROM (SELECT s.row_id AS revenant_row, s.status AS revenant_status, s.attempts AS revenant_attempts, \
                        s.next_attempt_at AS revenant_next, s.stream_lsn AS revenant_lsn \
                   FROM revenant.relay_state s \
                  WHERE s.source = {lit} AND s.stream_lsn IS NOT NULL AND s.status IN ('pending', 'failed')) st \
           JOIN {t} ON {t}.{id} = st.revenant_row \
          WHERE {p}",
        rk = c.routing_key,
        h = c.headers,
        lit = c.source_literal,
        t = c.table,
        id = c.id,
        p = c.pending_cond,
    )
}

fn held_sql(c: &Cols) -> String {
    format!(
        "SELECT k AS key, id, (run AND (rn = 1 OR head_attempts = 0)) AS run \
           FROM (SELECT k, id, row_number() OVER w AS rn, first_value(attempts) OVER w AS head_attempts, \
                        bool_and(status = 'pending' AND next_attempt_at <= now()) OVER w AS run \
                   FROM ({held}) h \
                 WINDOW w AS (PARTITION BY k ORDER BY stream_lsn, id)) x \
          WHERE rn = 1 OR (run AND head_attempts = 0 AND rn <= $2) \
          ORDER BY k, rn",
        held = held_rows(c)
    )
}

fn known_sql(c: &Cols) -> String {
    format!(
        "SELECT {key} AS id, (NOT {p} OR EXISTS (SELECT 1 FROM revenant.relay_state s \
                 WHERE s.source = {lit} AND s.row_id = {key} \
                   AND (s.stream_lsn IS NOT NULL OR s.status <> 'pending'))) AS settled \
           FROM {t} WHERE {t}.{id} = ANY($1::bigint[])",
        key = c.row_key(),
        p = c.pending_cond,
        lit = c.source_literal,
        t = c.table,
        id = c.id,
    )
}

/// `$1` ids, `$2` positions: held unless the row is published, or failed, archived or held
/// already.
fn hold_sql(c: &Cols) -> String {
    format!(
        "INSERT INTO revenant.relay_state AS s (source, row_id, status, attempts, stream_lsn, next_attempt_at, updated_at) \
         SELECT {lit}, h.revenant_id, 'pending', 0, h.revenant_at, now(), now() \
           FROM unnest($1::bigint[], $2::bigint[]) AS h(revenant_id, revenant_at) \
           JOIN {t} ON {t}.{id} = h.revenant_id \
          WHERE {t}.{id} = ANY($1::bigint[]) AND {p} \
         ON CONFLICT (source, row_id) DO UPDATE SET stream_lsn = EXCLUDED.stream_lsn, updated_at = now() \
          WHERE s.stream_lsn IS NULL AND s.status = 'pending'",
        lit = c.source_literal,
        t = c.table,
        id = c.id,
        p = c.pending_cond,
    )
}

/// `$1` the slot's start, `$2` the ids in its stream: every other pending row without a
/// failure or archive of its own is held at the start.
fn adopt_sql(c: &Cols) -> String {
    format!(
        "INSERT INTO revenant.relay_state AS s (source, row_id, status, attempts, stream_lsn, next_attempt_at, updated_at) \
         SELECT {lit}, {key}, 'pending', 0, $1, now(), now() FROM {t} \
          WHERE {p} AND {t}.{id} <> ALL($2::bigint[]) \
         ON CONFLICT (source, row_id) DO UPDATE SET stream_lsn = EXCLUDED.stream_lsn, updated_at = now() \
          WHERE s.stream_lsn IS NULL AND s.status = 'pending'",
        lit = c.source_literal,
        key = c.row_key(),
        t = c.table,
        id = c.id,
        p = c.pending_cond,
    )
}

/// `$1` source, `$2` id, `$3` reason, `$4` position.
const BAD_SQL: &str = "INSERT INTO revenant.relay_state AS s (source, row_id, status, attempts, last_error, stream_lsn, updated_at) \
     VALUES ($1, $2, 'failed', 1, $3, $4, now()) \
     ON CONFLICT (source, row_id) DO UPDATE \
        SET status = 'failed', attempts = s.attempts + 1, last_error = EXCLUDED.last_error, \
            stream_lsn = coalesce(s.stream_lsn, EXCLUDED.stream_lsn), updated_at = now() \
      WHERE s.status = 'pending' \
     RETURNING s.row_id";

/// Refused events: `$1` ids, `$2` reasons, `$3` backoff seconds, `$4` max attempts, `$5`
/// positions, `$6` followers, `$7` the ordering header. An event is *behind* when an earlier
/// held event of its key exists (or it follows one refused with it): then only held.
fn failed_sql(c: &Cols) -> String {
    format!(
        "WITH f AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::float8[], $5::bigint[], $6::bool[]) \
                             AS f(fid, freason, fretry, fat, ffollower)), \
              mine AS (SELECT {key} AS kid, coalesce(CASE WHEN $7::text IS NULL THEN {rk} ELSE ({h})->>$7 END, '') AS kk, \
                              (SELECT s.stream_lsn FROM revenant.relay_state s WHERE s.source = {lit} AND s.row_id = {key}) AS klsn \
                         FROM {t} WHERE {t}.{id} = ANY($1::bigint[])), \
              held AS ({held}), \
              b AS (SELECT f.*, f.ffollower OR EXISTS ( \
                      SELECT 1 FROM mine o, held p \
                       WHERE o.kid = f.fid AND p.id <> f.fid AND p.k = o.kk \
                         AND (p.stream_lsn, p.id) < (coalesce(o.klsn, f.fat), f.fid)) AS behind \
                      FROM f) \
         INSERT INTO revenant.relay_state AS s (source, row_id, status, attempts, last_error, next_attempt_at, stream_lsn, updated_at) \
         SELECT {lit}, b.fid, CASE WHEN NOT b.behind AND 1 >= $4 THEN 'failed' ELSE 'pending' END, \
                CASE WHEN b.behind THEN 0 ELSE 1 END, \
                CASE WHEN b.behind THEN 'held behind an earlier event of its key; refused: ' || b.freason ELSE b.freason END, \
                CASE WHEN b.behind THEN now() ELSE now() + make_interval(secs => b.fretry) END, b.fat, now() \
           FROM b \
         ON CONFLICT (source, row_id) DO UPDATE \
            SET attempts = s.attempts + EXCLUDED.attempts, last_error = EXCLUDED.last_error, \
                status = CASE WHEN EXCLUDED.attempts = 1 AND s.attempts + 1 >= $4 THEN 'failed' ELSE 'pending' END, \
                next_attempt_at = CASE WHEN EXCLUDED.attempts = 0 THEN s.next_attempt_at ELSE EXCLUDED.next_attempt_at END, \
                stream_lsn = coalesce(s.stream_lsn, EXCLUDED.stream_lsn), updated_at = now() \
          WHERE s.status = 'pending' \
         RETURNING s.row_id, s.status",
        key = c.row_key(),
        rk = c.routing_key,
        h = c.headers,
        lit = c.source_literal,
        t = c.table,
        id = c.id,
        held = held_rows(c).replace("$1", "$7"),
    )
}

fn counts_sql(c: &Cols) -> String {
    format!(
        "SELECT count(*), count(*) FILTER (WHERE status = 'failed') FROM ({}) h",
        held_rows(c).replace("$1::text", "NULL::text").replace("->>$1", "->>NULL::text")
    )
}

impl StreamTable for MappedTable {
    fn layout(&self, rel: &Relation) -> Result<Layout, String> {
        Layout::ids_only(rel, &self.cols.id)
    }

    async fn ready(&self, pool: &PgPool) -> Result<(u32, String), String> {
        crate::sources::mapping::ensure_relay_state(pool)
            .await
            .map_err(|e| format!("cannot create revenant.relay_state beside {}: {e}", self.cols.table))?;
        super::table::table_of(pool, &self.cols.table).await
    }

    async fn adopt(&self, conn: &mut PgConnection, at: i64, streamed: &[i64]) -> Result<u64, StoreError> {
        // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
        Ok(sqlx::query(sqlx::AssertSqlSafe(self.adopt_sql.clone()))
            .bind(at)
            .bind(streamed)
            .execute(conn)
            .await?
            .rows_affected())
    }

    async fn held(&self, conn: &mut PgConnection, header: Option<&str>, batch: i64) -> Result<Vec<Held>, StoreError> {
        // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
        let rows: Vec<(String, i64, bool)> =
            sqlx::query_as(sqlx::AssertSqlSafe(self.held_sql.clone())).bind(header).bind(batch).fetch_all(conn).await?;
        Ok(rows.into_iter().map(|(key, id, run)| Held { key, id, run }).collect())
    }

    async fn known(&self, conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<Known>, StoreError> {
        // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
        let rows: Vec<(i64, bool)> =
            sqlx::query_as(sqlx::AssertSqlSafe(self.known_sql.clone())).bind(ids).fetch_all(conn).await?;
        Ok(rows.into_iter().map(|(id, settled)| Known { id, settled }).collect())
    }

    async fn rows(&self, conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<ClaimedRow>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
        Ok(sqlx::query_as::<_, ClaimedRow>(sqlx::AssertSqlSafe(self.rows_sql.clone()))
            .bind(ids)
            .fetch_all(conn)
            .await?)
    }

    async fn hold(&self, conn: &mut PgConnection, hold: &[(i64, i64)]) -> Result<u64, StoreError> {
        if hold.is_empty() {
            return Ok(0);
        }
        let (ids, at): (Vec<i64>, Vec<i64>) = hold.iter().copied().unzip();
        // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
        Ok(sqlx::query(sqlx::AssertSqlSafe(self.hold_sql.clone()))
            .bind(&ids)
            .bind(&at)
            .execute(conn)
            .await?
            .rows_affected())
    }

    async fn mark_bad(
        &self,
        conn: &mut PgConnection,
        id: i64,
        reason: &str,
        at: Option<i64>,
    ) -> Result<bool, StoreError> {
        // Runtime-checked: a constant statement on the relay's state.
        let done: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(BAD_SQL))
            .bind(&self.source)
            .bind(id)
            .bind(store::clip(reason))
            .bind(at)
            .fetch_optional(conn)
            .await?;
        Ok(done.is_some())
    }

    async fn write_published(&self, conn: &mut PgConnection, _delete: bool, ids: &[i64]) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(self.mark_sql.clone()))
            .bind(ids)
            .bind(&self.source)
            .fetch_one(conn)
            .await?;
        Ok(n as u64)
    }

    async fn write_failed(
        &self,
        conn: &mut PgConnection,
        r: Refusals<'_>,
    ) -> Result<Vec<(i64, AttemptOutcome)>, StoreError> {
        if r.failed.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, reasons, retry) = r.arrays();
        // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
        let rows: Vec<(i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(self.failed_sql.clone()))
            .bind(&ids)
            .bind(&reasons)
            .bind(&retry)
            .bind(r.max_attempts)
            .bind(r.at)
            .bind(r.follower)
            .bind(r.header)
            .fetch_all(conn)
            .await?;
        Ok(rows.into_iter().map(|(id, status)| (id, super::table::outcome(&status))).collect())
    }

    async fn held_counts(&self, pool: &PgPool) -> Result<(i64, i64), sqlx::Error> {
        // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
        sqlx::query_as(sqlx::AssertSqlSafe(self.counts_sql.clone())).fetch_one(pool).await
    }
}
