//! Lists, counts and details of outbox rows, for any source.
//!
//! Policy: keyset pagination on (created_at, id) — never OFFSET — so the 1000th page costs
//! what the first does; counts stop at [`COUNT_CAP`] and say "more than", because an exact
//! count of millions of rows is a full scan the on-call engineer does not need.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{Postgres, QueryBuilder, Row};

use super::Source;
pub use types::Bucket;

pub const COUNT_CAP: i64 = 10_000;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Filter {
    pub bucket: Bucket,
    pub event_type: Option<String>,
    pub routing_key: Option<String>,
    /// Substring of the last error (case-insensitive).
    pub error: Option<String>,
    /// Substring of the payload bytes (e.g. an order id), for finding one event.
    pub payload: Option<String>,
    pub event_id: Option<String>,
    pub older_than_mins: Option<i64>,
    pub newer_than_mins: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cursor {
    pub created_at: DateTime<Utc>,
    pub id: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RowSummary {
    pub id: String,
    pub event_id: String,
    pub event_type: String,
    pub exchange: String,
    pub routing_key: String,
    pub created_at: DateTime<Utc>,
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub published_at: Option<DateTime<Utc>>,
    pub payload_size: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Count {
    pub n: i64,
    /// True when the count stopped at the cap: "more than n".
    pub capped: bool,
}

fn escape_like(s: &str) -> String {
    format!("%{}%", s.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"))
}

/// Appends ` AND …` conditions for the filter.
pub fn push_conditions(q: &mut QueryBuilder<Postgres>, src: &Source, f: &Filter) {
    let c = &src.cols;
    q.push(" AND ");
    match f.bucket {
        Bucket::Pending => {
            q.push(&c.bucket_pending);
        }
        Bucket::Stuck => {
            q.push(&c.bucket_pending).push(" AND (").push(&c.created_at).push(" < now() - make_interval(secs => ");
            q.push_bind(src.stuck_after.as_secs_f64());
            q.push(") OR ").push(&c.attempts).push(" >= ").push_bind(src.stuck_attempts).push(")");
        }
        // A mapped table Revenant does not relay has no such state.
        Bucket::Failed => {
            q.push(c.bucket_failed.as_deref().unwrap_or("false"));
        }
        Bucket::Archived => {
            q.push(c.bucket_archived.as_deref().unwrap_or("false"));
        }
        Bucket::Published if c.native => {
            q.push("status = 'published'");
        }
        Bucket::Published => {
            q.push("NOT ").push(&c.pending_cond);
        }
    }
    if let Some(t) = &f.event_type {
        q.push(" AND ").push(&c.event_type).push(" = ").push_bind(t.clone());
    }
    if let Some(rk) = &f.routing_key {
        q.push(" AND ").push(&c.routing_key).push(" = ").push_bind(rk.clone());
    }
    if let Some(e) = &f.error {
        q.push(" AND ").push(&c.last_error).push(" ILIKE ").push_bind(escape_like(e));
    }
    if let Some(p) = &f.payload {
        q.push(" AND position(").push_bind(p.as_bytes().to_vec()).push("::bytea in ").push(&c.payload).push(") > 0");
    }
    if let Some(id) = &f.event_id {
        q.push(" AND ").push(&c.event_id).push(" = ").push_bind(id.clone());
    }
    if let Some(m) = f.older_than_mins {
        q.push(" AND ").push(&c.created_at).push(" < now() - make_interval(mins => ").push_bind(m as i32).push(")");
    }
    if let Some(m) = f.newer_than_mins {
        q.push(" AND ").push(&c.created_at).push(" >= now() - make_interval(mins => ").push_bind(m as i32).push(")");
    }
}

fn select_summary(c: &super::mapping::Cols, extra: &str) -> String {
    format!(
        "SELECT {id}::text AS id, {eid} AS event_id, {ty} AS event_type, {ex} AS exchange, {rk} AS routing_key, \
         {ca} AS created_at, {st} AS status, {at} AS attempts, {le} AS last_error, {pa} AS published_at, \
         octet_length({pl})::bigint AS payload_size{extra} FROM {t}",
        id = c.id,
        eid = c.event_id,
        ty = c.event_type,
        ex = c.exchange,
        rk = c.routing_key,
        ca = c.created_at,
        st = c.status,
        at = c.attempts,
        le = c.last_error,
        pa = c.published_at,
        pl = c.payload,
        t = c.table
    )
}

fn summary(row: &sqlx::postgres::PgRow) -> Result<RowSummary, sqlx::Error> {
    Ok(RowSummary {
        id: row.try_get("id")?,
        event_id: row.try_get("event_id")?,
        event_type: row.try_get("event_type")?,
        exchange: row.try_get("exchange")?,
        routing_key: row.try_get("routing_key")?,
        created_at: row.try_get("created_at")?,
        status: row.try_get("status")?,
        attempts: row.try_get("attempts")?,
        last_error: row.try_get("last_error")?,
        published_at: row.try_get("published_at")?,
        payload_size: row.try_get("payload_size")?,
    })
}

/// One page of rows and the cursor of the next page (None at the end). `after` is the
/// opaque cursor string a previous page returned.
pub async fn list(
    src: &Source,
    f: &Filter,
    after: Option<&str>,
    limit: i64,
) -> Result<(Vec<RowSummary>, Option<String>), sqlx::Error> {
    let p = page(src, f, after.map_or(At::Start, At::After), limit).await?;
    Ok((p.rows, p.next))
}

/// Where a page of the list starts; the cursors are the opaque strings a page returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At<'a> {
    /// The first page.
    Start,
    /// The rows just after the cursor, in the bucket's order: the next page.
    After(&'a str),
    /// The rows just before it: the previous page.
    Before(&'a str),
}

/// A page of rows in the bucket's order, and the cursors of the pages on either side.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub rows: Vec<RowSummary>,
    /// None on the last page.
    pub next: Option<String>,
    /// None on the first page.
    pub prev: Option<String>,
}

/// The page at `at`. A previous page reads the same index the other way from its cursor
/// (`LIMIT n + 1`, so it knows whether there is one more before it), then is reversed.
pub async fn page(src: &Source, f: &Filter, at: At<'_>, limit: i64) -> Result<Page, sqlx::Error> {
    let c = &src.cols;
    let backward = matches!(at, At::Before(_));
    // Pending rows are listed oldest first, the rest newest first; a previous page the other way.
    let asc = f.bucket.ascending() != backward;
    // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
    let mut q = QueryBuilder::<Postgres>::new(select_summary(c, ""));
    q.push(" WHERE true");
    push_conditions(&mut q, src, f);
    let cursor = match at {
        At::Start => None,
        At::After(s) | At::Before(s) => parse_cursor(s),
    };
    if let Some((ts, id)) = cursor {
        q.push(" AND (").push(&c.created_at).push(", ").push(&c.id).push(if asc { ") > (" } else { ") < (" });
        q.push_bind(ts).push(", ").push_bind(id).push("::text::").push(&c.id_type).push(")");
    }
    let dir = if asc { "ASC" } else { "DESC" };
    q.push(format!(" ORDER BY {} {dir}, {} {dir} LIMIT ", c.created_at, c.id)).push_bind(limit + 1);
    // Unprepared: planned with this call's values (a generic plan, chosen after five calls,
    // took the trigram index for every error filter: 0.9 s instead of 1 ms at 10 M rows).
    let rows = q.build().persistent(false).fetch_all(&src.pool).await?;
    let mut rows = rows.iter().map(summary).collect::<Result<Vec<_>, _>>()?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    if backward {
        rows.reverse();
    }
    let key = |r: &RowSummary| format!("{}~{}", r.created_at.timestamp_micros(), r.id);
    let (first, last) = (rows.first().map(key), rows.last().map(key));
    Ok(match at {
        At::Start => Page { next: last.filter(|_| more), prev: None, rows },
        At::After(_) => Page { next: last.filter(|_| more), prev: first, rows },
        At::Before(_) => Page { next: last, prev: first.filter(|_| more), rows },
    })
}

fn parse_cursor(s: &str) -> Option<(DateTime<Utc>, String)> {
    let (ts, id) = s.split_once('~')?;
    let ts = DateTime::<Utc>::from_timestamp_micros(ts.parse().ok()?)?;
    Some((ts, id.to_string()))
}

pub async fn count(src: &Source, f: &Filter) -> Result<Count, sqlx::Error> {
    // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
    let mut q =
        QueryBuilder::<Postgres>::new(format!("SELECT count(*) FROM (SELECT 1 FROM {} WHERE true", src.cols.table));
    push_conditions(&mut q, src, f);
    q.push(" LIMIT ").push_bind(COUNT_CAP + 1).push(") capped");
    let n: i64 = q.build_query_scalar().persistent(false).fetch_one(&src.pool).await?;
    Ok(Count { n: n.min(COUNT_CAP), capped: n > COUNT_CAP })
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Health {
    pub source: String,
    pub oldest_pending: Option<DateTime<Utc>>,
    pub pending: Count,
    pub stuck: Count,
    pub failed: Count,
}

/// What the Overview shows per source: the age of the oldest pending row above all.
pub async fn health(src: &Source) -> Result<Health, sqlx::Error> {
    let c = &src.cols;
    // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
    let oldest: Option<DateTime<Utc>> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT min({}) FROM {} WHERE {}",
        c.created_at, c.table, c.bucket_pending
    )))
    .fetch_one(&src.pool)
    .await?;
    let f = |bucket| Filter { bucket, ..Filter::default() };
    Ok(Health {
        source: src.name.clone(),
        oldest_pending: oldest,
        pending: count(src, &f(Bucket::Pending)).await?,
        stuck: count(src, &f(Bucket::Stuck)).await?,
        failed: count(src, &f(Bucket::Failed)).await?,
    })
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Detail {
    pub summary: RowSummary,
    pub payload: Vec<u8>,
    pub content_type: Option<String>,
    pub headers: Option<serde_json::Value>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub archived_reason: Option<String>,
    pub lease_owner: Option<String>,
}

/// How long looking a dead letter's message id up in one outbox source may take: a mapped
/// table without an index on its event id column would otherwise be read whole on every
/// dead letter's page.
pub const LOOKUP_BUDGET_MS: u32 = 250;

/// The outbox row whose event id is `event_id`, if the source has one. `Ok(None)` too when
/// the id cannot be of the column's type (not a uuid, say) or the lookup ran past
/// [`LOOKUP_BUDGET_MS`] (logged: the column wants an index).
pub async fn by_event_id(src: &Source, event_id: &str) -> Result<Option<RowSummary>, sqlx::Error> {
    let c = &src.cols;
    let mut tx = src.pool.begin().await?;
    // The budget, LOOKUP_BUDGET_MS, as the literal SET LOCAL takes.
    sqlx::raw_sql("SET LOCAL statement_timeout = 250").execute(&mut *tx).await?;
    // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
    let mut q = QueryBuilder::<Postgres>::new(select_summary(c, ""));
    q.push(" WHERE ").push(&c.event_id_col).push(" = ").push_bind(event_id.to_string());
    q.push("::text::").push(&c.event_id_type).push(" LIMIT 1");
    let row = match q.build().persistent(false).fetch_optional(&mut *tx).await {
        Ok(row) => row,
        // 22P02: not a value of the column's type; 22003: out of its range.
        Err(sqlx::Error::Database(e)) if matches!(e.code().as_deref(), Some("22P02" | "22003")) => return Ok(None),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("57014") => {
            tracing::warn!(source = %src.name, "looking up an event id took over {LOOKUP_BUDGET_MS} ms: index its event id column");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    row.as_ref().map(summary).transpose()
}

pub async fn detail(src: &Source, id: &str) -> Result<Option<Detail>, sqlx::Error> {
    let c = &src.cols;
    let extra = if c.native {
        ", content_type, headers, next_attempt_at, archived_reason, lease_owner::text AS lease_owner".to_string()
    } else {
        format!(
            ", {ct} AS content_type, {h} AS headers, {na} AS next_attempt_at, {ar} AS archived_reason, \
             NULL::text AS lease_owner",
            ct = if c.relayed { c.content_type.as_str() } else { "NULL::text" },
            h = if c.relayed { c.headers.as_str() } else { "NULL::jsonb" },
            na = c.next_attempt_at,
            ar = c.archived_reason,
        )
    };
    // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
    let mut q = QueryBuilder::<Postgres>::new(select_summary(c, &format!(", {} AS payload{extra}", c.payload)));
    q.push(" WHERE ").push(&c.id).push(" = ").push_bind(id.to_string()).push("::text::").push(&c.id_type);
    let Some(row) = q.build().fetch_optional(&src.pool).await? else {
        return Ok(None);
    };
    Ok(Some(Detail {
        summary: summary(&row)?,
        payload: row.try_get("payload")?,
        content_type: row.try_get("content_type")?,
        headers: row.try_get("headers")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
        archived_reason: row.try_get("archived_reason")?,
        lease_owner: row.try_get("lease_owner")?,
    }))
}

/// Rows above which a sequential scan for pending rows is worth a warning.
pub const SCAN_WARN_ROWS: f64 = 100_000.0;

/// For a mapped table: a warning in words when finding its pending rows (what the relay and
/// the Pending list do) scans the whole table and the table is large, with the index to add.
pub async fn pending_scan_warning(src: &Source) -> Result<Option<String>, sqlx::Error> {
    let c = &src.cols;
    if c.native {
        return Ok(None);
    }
    let rows: Option<f32> = sqlx::query_scalar!("SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)", &c.table)
        .fetch_optional(&src.pool)
        .await?;
    let rows = rows.unwrap_or(0.0) as f64;
    if rows < SCAN_WARN_ROWS {
        return Ok(None);
    }
    // Without ORDER BY: walking the primary key in id order and filtering would hide a scan of
    // every published row in front of the pending ones. Asked for the pending rows alone, a
    // planner with no index on the pending test answers with a sequential scan.
    // Runtime-checked: the table and column expressions come from the source's mapping (configuration).
    let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (FORMAT JSON) SELECT {id} FROM {t} WHERE {p}",
        id = c.id,
        t = c.table,
        p = c.pending_cond
    )))
    .fetch_one(&src.pool)
    .await?;
    if !plan.to_string().contains("\"Seq Scan\"") {
        return Ok(None);
    }
    Ok(Some(format!(
        "Finding pending rows scans all ~{} rows of {}: the relay and this list slow down as it grows. \
         Add a partial index, e.g. CREATE INDEX CONCURRENTLY ON {} ({}) WHERE {}",
        rows as i64, c.table, c.table, c.id, c.pending_cond
    )))
}
