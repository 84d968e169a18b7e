//! Revenant's `outbox` schema read from the commit stream: a held event keeps its commit's
//! position in `outbox.stream_lsn`, its attempts and error in its own row.

use sqlx::{PgConnection, PgPool};

use super::table::{Held, Known, Refusals, StreamTable};
use crate::outbox::{
    logical::{event::Layout, pgoutput::Relation},
    store::{self, AttemptOutcome, ClaimedRow, StoreError},
};

/// The table the publication covers.
const TABLE: &str = "revenant.outbox";

pub(crate) struct Own;

impl StreamTable for Own {
    fn layout(&self, rel: &Relation) -> Result<Layout, String> {
        Layout::of(rel, "routing_key")
    }

    async fn ready(&self, pool: &PgPool) -> Result<(u32, String), String> {
        let has = crate::outbox::install::has_stream_held(pool)
            .await
            .map_err(|e| format!("cannot read revenant.outbox: {e}"))?;
        if !has {
            return Err("revenant.outbox lacks the column stream_lsn: run `revenant outbox install` against its database (or `revenant migrate` for Revenant's own)".into());
        }
        super::table::table_of(pool, TABLE).await
    }

    async fn adopt(&self, conn: &mut PgConnection, at: i64, streamed: &[i64]) -> Result<u64, StoreError> {
        Ok(sqlx::query!(
            "UPDATE revenant.outbox SET stream_lsn = $1 WHERE status = 'pending' AND stream_lsn IS NULL AND NOT (id = ANY($2))",
            at,
            streamed
        )
        .execute(conn)
        .await?
        .rows_affected())
    }

    async fn held(&self, conn: &mut PgConnection, header: Option<&str>, batch: i64) -> Result<Vec<Held>, StoreError> {
        Ok(sqlx::query_as!(
            Held,
            r#"SELECT k AS "key!", id AS "id!", (run AND (rn = 1 OR head_attempts = 0)) AS "run!"
                 FROM (SELECT k, id, row_number() OVER w AS rn, first_value(attempts) OVER w AS head_attempts,
                              bool_and(status = 'pending' AND next_attempt_at <= now()) OVER w AS run
                         FROM (SELECT coalesce(CASE WHEN $1::text IS NULL THEN routing_key ELSE headers->>$1 END, '') AS k,
                                      id, status, attempts, next_attempt_at, stream_lsn
                                 FROM revenant.outbox
                                WHERE stream_lsn IS NOT NULL AND status IN ('pending', 'failed')) h
                       WINDOW w AS (PARTITION BY k ORDER BY stream_lsn, id)) x
                WHERE rn = 1 OR (run AND head_attempts = 0 AND rn <= $2)
                ORDER BY k, rn"#,
            header,
            batch
        )
        .fetch_all(conn)
        .await?)
    }

    async fn known(&self, conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<Known>, StoreError> {
        Ok(sqlx::query_as!(
            Known,
            r#"SELECT id, (status <> 'pending' OR stream_lsn IS NOT NULL) AS "settled!" FROM revenant.outbox WHERE id = ANY($1)"#,
            ids
        )
        .fetch_all(conn)
        .await?)
    }

    async fn rows(&self, conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<ClaimedRow>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(sqlx::query_as!(
            ClaimedRow,
            r#"SELECT id, event_id::text AS "event_id!", event_type, exchange, routing_key, payload, content_type,
                      headers, created_at, attempts, next_attempt_at
                 FROM revenant.outbox WHERE id = ANY($1) ORDER BY id"#,
            ids
        )
        .fetch_all(conn)
        .await?)
    }

    async fn hold(&self, conn: &mut PgConnection, hold: &[(i64, i64)]) -> Result<u64, StoreError> {
        if hold.is_empty() {
            return Ok(0);
        }
        let (ids, at): (Vec<i64>, Vec<i64>) = hold.iter().copied().unzip();
        let res = sqlx::query!(
            "UPDATE revenant.outbox o SET stream_lsn = h.at
               FROM unnest($1::bigint[], $2::bigint[]) AS h(id, at)
              WHERE o.id = h.id AND o.status = 'pending' AND o.stream_lsn IS NULL",
            &ids,
            &at
        )
        .execute(conn)
        .await?;
        Ok(res.rows_affected())
    }

    async fn mark_bad(
        &self,
        conn: &mut PgConnection,
        id: i64,
        reason: &str,
        at: Option<i64>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query_scalar!(
            "UPDATE revenant.outbox SET status = 'failed', attempts = attempts + 1, last_error = $2,
                               stream_lsn = coalesce(stream_lsn, $3)
              WHERE id = $1 AND status = 'pending' RETURNING id",
            id,
            store::clip(reason),
            at
        )
        .fetch_optional(conn)
        .await?;
        Ok(done.is_some())
    }

    async fn write_published(&self, conn: &mut PgConnection, delete: bool, ids: &[i64]) -> Result<u64, StoreError> {
        if delete { store::delete_published(conn, ids).await } else { store::mark_published(conn, ids).await }
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
        let rows = sqlx::query!(
            r#"WITH f AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::float8[], $5::bigint[], $6::bool[])
                                   AS f(id, reason, retry, at, follower)),
                    b AS (SELECT f.*, f.follower OR EXISTS (
                            SELECT 1 FROM revenant.outbox o, revenant.outbox p
                             WHERE o.id = f.id AND p.id <> f.id
                               AND p.stream_lsn IS NOT NULL AND p.status IN ('pending', 'failed')
                               AND coalesce(CASE WHEN $7::text IS NULL THEN p.routing_key ELSE p.headers->>$7 END, '')
                                 = coalesce(CASE WHEN $7::text IS NULL THEN o.routing_key ELSE o.headers->>$7 END, '')
                               AND (p.stream_lsn, p.id) < (coalesce(o.stream_lsn, f.at), f.id)) AS behind
                            FROM f)
             UPDATE revenant.outbox o
                SET attempts = o.attempts + CASE WHEN b.behind THEN 0 ELSE 1 END,
                    last_error = CASE WHEN b.behind THEN 'held behind an earlier event of its key; refused: ' || b.reason
                                      ELSE b.reason END,
                    status = CASE WHEN NOT b.behind AND o.attempts + 1 >= $4 THEN 'failed' ELSE 'pending' END,
                    next_attempt_at = CASE WHEN b.behind THEN o.next_attempt_at
                                           ELSE now() + make_interval(secs => b.retry) END,
                    stream_lsn = coalesce(o.stream_lsn, b.at)
               FROM b
              WHERE o.id = b.id AND o.status = 'pending'
             RETURNING o.id, o.status"#,
            &ids,
            &reasons,
            &retry,
            r.max_attempts,
            r.at as &[Option<i64>],
            r.follower,
            r.header
        )
        .fetch_all(conn)
        .await?;
        Ok(rows.into_iter().map(|r| (r.id, super::table::outcome(&r.status))).collect())
    }

    async fn held_counts(&self, pool: &PgPool) -> Result<(i64, i64), sqlx::Error> {
        let held = sqlx::query!(
            r#"SELECT count(*) AS "held!", count(*) FILTER (WHERE status = 'failed') AS "failed!"
                 FROM revenant.outbox WHERE stream_lsn IS NOT NULL AND status IN ('pending', 'failed')"#
        )
        .fetch_one(pool)
        .await?;
        Ok((held.held, held.failed))
    }
}
