//! The dead-letter store: insert (idempotent), read, list, group, change status.
//!
//! Policy: `insert` is idempotent on the natural key (`ON CONFLICT DO NOTHING`), and bumps
//! the failure group only when the row is new, in the caller's transaction, so a crash or a
//! competing ingester can neither duplicate a message nor over-count its group. Lists are
//! keyset-paginated on (ingested_at, id), newest first, and fetch one extra row to know
//! whether there is a next page. Status changes take the caller's executor so the caller can
//! write the audit entry in the same transaction.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgExecutor, PgPool, Postgres, QueryBuilder};

pub use super::model::{Cursor, DeadLetter, DeadLetterSummary, FailureGroup, Page, Status};
use super::{
    received::Received,
    store_batch::{self, NewDeadLetter},
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("dead letter {0} not found")]
    NotFound(i64),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertOutcome {
    Inserted(i64),
    /// Already stored (a redelivery, or a competing ingester got there first).
    Duplicate(i64),
}

impl InsertOutcome {
    pub fn id(self) -> i64 {
        match self {
            Self::Inserted(id) | Self::Duplicate(id) => id,
        }
    }
}

/// Stores one dead letter: a batch of one (see `store_batch`). Run it inside a transaction
/// (`&mut *tx`): the row, its group's count and its group link must commit together.
pub async fn insert(conn: &mut PgConnection, r: &Received) -> Result<InsertOutcome, StoreError> {
    let row = NewDeadLetter::new(r.clone());
    if let Some(Some(id)) = store_batch::insert(&mut *conn, std::slice::from_ref(&row)).await?.first() {
        return Ok(InsertOutcome::Inserted(*id));
    }
    let id = sqlx::query_scalar!("SELECT id FROM dead_letters WHERE natural_key = $1", row.natural_key())
        .fetch_one(&mut *conn)
        .await?;
    Ok(InsertOutcome::Duplicate(id))
}

/// `insert` in its own transaction, committed before it returns: what the ingester needs
/// before it may ack.
pub async fn insert_committed(pool: &PgPool, r: &Received) -> Result<InsertOutcome, StoreError> {
    let mut tx = pool.begin().await?;
    let outcome = insert(&mut tx, r).await?;
    tx.commit().await?;
    Ok(outcome)
}

pub async fn get(db: impl PgExecutor<'_>, id: i64) -> Result<DeadLetter, StoreError> {
    sqlx::query_as!(
        DeadLetter,
        r#"SELECT id, queue, message_id, correlation_id, content_type, content_encoding, amqp_timestamp,
            app_id, msg_type, user_id, cluster_id, delivery_mode, priority, expiration, reply_to, headers, body,
            body_size, exchange, routing_key, reason, original_queue, original_exchange, original_routing_keys,
            death_count, first_death_at, error_type, error_message, fingerprint, group_id,
            status AS "status: Status", archived_reason, replay_of, ingested_at, unreadable
         FROM dead_letters WHERE id = $1"#,
        id
    )
    .fetch_optional(db)
    .await?
    .ok_or(StoreError::NotFound(id))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ListFilter {
    /// The dead-letter queue a message was read from.
    pub queue: Option<String>,
    /// The queue it died in (its first x-death's queue): where a replay sends it back.
    #[serde(default)]
    pub origin: Option<String>,
    /// Its AMQP `type` property.
    #[serde(default)]
    pub msg_type: Option<String>,
    /// Its body's shape as `kind::body_shape` labels it (`{a, b}`, `text`, `binary` …).
    #[serde(default)]
    pub body_shape: Option<String>,
    pub reason: Option<String>,
    pub group_id: Option<i64>,
    pub status: Option<Status>,
    /// Case-insensitive substring of the error type or message.
    pub error_text: Option<String>,
    /// Raw bytes the body must contain. Written as `{"text": …}` (or `{"hex": …}` when not
    /// UTF-8 or holding a NUL), so the audit log and a plan's frozen selection show it as words.
    #[serde(with = "body_bytes", default)]
    pub body_contains: Option<Vec<u8>>,
    pub message_id: Option<String>,
    /// Ingested at or after this instant.
    pub newer_than: Option<DateTime<Utc>>,
    /// Ingested before this instant.
    pub older_than: Option<DateTime<Utc>>,
}

/// A body filter's bytes as text where they are text (and read back from any form, the
/// number array written before included).
mod body_bytes {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Form {
        Text { text: String },
        Hex { hex: String },
        Bytes(Vec<u8>),
    }

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref()
            .map(|b| match std::str::from_utf8(b) {
                // PostgreSQL's jsonb holds no NUL: a filter with one is written as hex, so the
                // audit entry that carries it is still stored.
                Ok(t) if !t.contains('\0') => Form::Text { text: t.to_owned() },
                _ => Form::Hex { hex: hex::encode(b) },
            })
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<Form>::deserialize(d)?
            .map(|f| match f {
                Form::Text { text } => Ok(text.into_bytes()),
                Form::Hex { hex } => hex::decode(hex).map_err(serde::de::Error::custom),
                Form::Bytes(b) => Ok(b),
            })
            .transpose()
    }
}

/// Bytes of the body that a list row carries; the detail page reads the whole body.
pub const SUMMARY_BODY_BYTES: i32 = 512;

fn escape_like(s: &str) -> String {
    s.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")
}

/// Rows a body search reads per page (and per count): matching raw bytes is a scan of the
/// bodies, 12 s over 10 M rows on two cores. 50 000 took a rare-bytes page (list + count) to
/// 85 ms p50 / 115 ms p99 at 10 M; this many keep it near half that, and the page's `next`
/// continues the search where it stopped.
pub const BODY_SEARCH_ROWS: i64 = 25_000;

/// Where a page of the list starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// The newest rows: the first page.
    Newest,
    /// The rows just older than the cursor: the next page.
    After(Cursor),
    /// The rows just newer than the cursor: the previous page.
    Before(Cursor),
}

impl At {
    fn backward(self) -> bool {
        matches!(self, At::Before(_))
    }

    /// ` AND (ingested_at, id) < / > cursor`, then the order that walks away from the cursor:
    /// a previous page reads the same index the other way (ascending), and is reversed after.
    fn push_cursor_and_order(self, q: &mut QueryBuilder<Postgres>) {
        if let At::After(c) | At::Before(c) = self {
            let cmp = if self.backward() { " > (" } else { " < (" };
            q.push(" AND (ingested_at, id)").push(cmp).push_bind(c.ingested_at).push(", ").push_bind(c.id).push(")");
        }
        push_order(q, self.backward());
    }
}

fn push_order(q: &mut QueryBuilder<Postgres>, backward: bool) {
    let dir = if backward { "ASC" } else { "DESC" };
    q.push(format!(" ORDER BY ingested_at {dir}, id {dir}"));
}

fn cursor_of(r: &DeadLetterSummary) -> Cursor {
    Cursor { ingested_at: r.ingested_at, id: r.id }
}

/// A page, newest first, continuing after `cursor` when given. With a body search, only the
/// next [`BODY_SEARCH_ROWS`] rows that match the other filters are searched (see `Page`).
pub async fn list(db: &PgPool, f: &ListFilter, cursor: Option<Cursor>, limit: i64) -> Result<Page, StoreError> {
    page(db, f, cursor.map_or(At::Newest, At::After), limit).await
}

/// The page at `at`, newest first, with the cursors of the pages on either side. A body
/// search reads at most [`BODY_SEARCH_ROWS`] rows from the cursor, in either direction.
pub async fn page(db: &PgPool, f: &ListFilter, at: At, limit: i64) -> Result<Page, StoreError> {
    let limit = limit.clamp(1, 1000);
    // Runtime-checked: the WHERE clause depends on which filters and cursor are given.
    let mut q = QueryBuilder::<Postgres>::new(
        "SELECT id, queue, message_id, content_type, reason, original_queue, error_type, error_message, death_count,
            group_id, status, body_size, msg_type, body_shape, substring(body from 1 for ",
    );
    q.push_bind(SUMMARY_BODY_BYTES).push(") AS body_head, ingested_at FROM ");
    let window = match &f.body_contains {
        // The rows to search, nearest the cursor first, then the body match over those alone.
        Some(bytes) => {
            let others = ListFilter { body_contains: None, ..f.clone() };
            q.push("(SELECT * FROM dead_letters WHERE true");
            push_window(&mut q, &others, at, BODY_SEARCH_ROWS);
            q.push(") w WHERE position(").push_bind(bytes.clone()).push("::bytea in body) > 0");
            Some(others)
        }
        None => {
            q.push("dead_letters WHERE true");
            push_conditions(&mut q, f);
            None
        }
    };
    match window {
        // The window is already cut at the cursor; only its order is wanted again.
        Some(_) => push_order(&mut q, at.backward()),
        None => at.push_cursor_and_order(&mut q),
    }
    q.push(" LIMIT ").push_bind(limit + 1);
    // Unprepared: planned with this call's values. A generic plan (PostgreSQL's choice after
    // five calls of one statement) cannot tell a rare error text from a common one, and took
    // the trigram index for both: 956 ms instead of a few at 10 M rows.
    let mut items: Vec<DeadLetterSummary> = q.build_query_as().persistent(false).fetch_all(db).await?;
    let more = items.len() as i64 > limit;
    items.truncate(limit as usize);
    let backward = at.backward();
    if backward {
        items.reverse();
    }
    let (first, last) = (items.first().map(cursor_of), items.last().map(cursor_of));
    // Another page beyond this one, in the direction this one was read.
    let mut beyond = if more { if backward { first } else { last } } else { None };
    let mut searched_partly = false;
    if let (false, Some(others)) = (more, window) {
        // The page is not full: if the search stopped at its row limit, go on from the last
        // row it read; otherwise it read everything there is.
        if let Some(edge) = window_edge(db, &others, at).await? {
            (beyond, searched_partly) = (Some(edge), true);
        }
    }
    let (next, prev) = match at {
        At::Newest => (beyond, None),
        At::After(_) => (beyond, first),
        At::Before(_) => (last, beyond),
    };
    Ok(Page { items, next, prev, searched_partly })
}

/// ` AND …` for `f` and the cursor, nearest the cursor first, at most `rows` rows.
fn push_window(q: &mut QueryBuilder<Postgres>, f: &ListFilter, at: At, rows: i64) {
    push_conditions(q, f);
    at.push_cursor_and_order(q);
    q.push(" LIMIT ").push_bind(rows);
}

/// The last row a body search read, when it read its full [`BODY_SEARCH_ROWS`] (an
/// index walk, no bodies read).
async fn window_edge(db: &PgPool, others: &ListFilter, at: At) -> Result<Option<Cursor>, StoreError> {
    // Runtime-checked: the WHERE clause depends on which filters and cursor are given.
    let mut q = QueryBuilder::<Postgres>::new("SELECT ingested_at, id FROM dead_letters WHERE true");
    push_conditions(&mut q, others);
    at.push_cursor_and_order(&mut q);
    q.push(" OFFSET ").push_bind(BODY_SEARCH_ROWS - 1).push(" LIMIT 1");
    let edge: Option<(DateTime<Utc>, i64)> = q.build_query_as().persistent(false).fetch_optional(db).await?;
    Ok(edge.map(|(ingested_at, id)| Cursor { ingested_at, id }))
}

/// Appends ` AND …` for each filter field; shared by lists, counts and frozen selections.
pub fn push_conditions(q: &mut QueryBuilder<Postgres>, f: &ListFilter) {
    if let Some(v) = &f.queue {
        q.push(" AND queue = ").push_bind(v.clone());
    }
    if let Some(v) = &f.origin {
        q.push(" AND original_queue = ").push_bind(v.clone());
    }
    if let Some(v) = &f.msg_type {
        q.push(" AND msg_type = ").push_bind(v.clone());
    }
    if let Some(v) = &f.body_shape {
        q.push(" AND body_shape = ").push_bind(v.clone());
    }
    if let Some(v) = &f.reason {
        q.push(" AND reason = ").push_bind(v.clone());
    }
    if let Some(v) = f.group_id {
        q.push(" AND group_id = ").push_bind(v);
    }
    if let Some(v) = f.status {
        q.push(" AND status = ").push_bind(v.as_str());
    }
    if let Some(v) = &f.error_text {
        let pattern = format!("%{}%", escape_like(v));
        q.push(" AND (error_message ILIKE ").push_bind(pattern.clone());
        q.push(" OR error_type ILIKE ").push_bind(pattern).push(")");
    }
    if let Some(v) = &f.body_contains {
        q.push(" AND position(").push_bind(v.clone()).push("::bytea in body) > 0");
    }
    if let Some(v) = &f.message_id {
        q.push(" AND message_id = ").push_bind(v.clone());
    }
    if let Some(v) = f.newer_than {
        q.push(" AND ingested_at >= ").push_bind(v);
    }
    if let Some(v) = f.older_than {
        q.push(" AND ingested_at < ").push_bind(v);
    }
}

/// How many dead letters match, stopping at `cap` (the caller shows "more than"). A body
/// search counts within the newest [`BODY_SEARCH_ROWS`] rows, as `list` searches them: when
/// there are more rows than that, the count is a lower bound and reported as capped.
pub async fn count(db: impl PgExecutor<'_>, f: &ListFilter, cap: i64) -> Result<(i64, bool), StoreError> {
    if let Some(bytes) = &f.body_contains {
        let others = ListFilter { body_contains: None, ..f.clone() };
        // Runtime-checked: the WHERE clause depends on which filters are given.
        let mut q = QueryBuilder::<Postgres>::new("SELECT count(*) FILTER (WHERE position(");
        q.push_bind(bytes.clone())
            .push("::bytea in body) > 0), count(*) FROM (SELECT body FROM dead_letters WHERE true");
        push_window(&mut q, &others, At::Newest, BODY_SEARCH_ROWS);
        q.push(") w");
        let (n, read): (i64, i64) = q.build_query_as().persistent(false).fetch_one(db).await?;
        return Ok((n.min(cap), n > cap || read >= BODY_SEARCH_ROWS));
    }
    // Runtime-checked: the WHERE clause depends on which filters are given.
    let mut q = QueryBuilder::<Postgres>::new("SELECT count(*) FROM (SELECT 1 FROM dead_letters WHERE true");
    push_conditions(&mut q, f);
    q.push(" LIMIT ").push_bind(cap + 1).push(") capped");
    // Unprepared, as `list`.
    let n: i64 = q.build_query_scalar().persistent(false).fetch_one(db).await?;
    Ok((n.min(cap), n > cap))
}

pub use types::dead_letter::FACET_ROWS;

/// How many of the newest [`FACET_ROWS`] dead letters matching `f` carry each AMQP `type`
/// (None: no type), most first, at most `limit` types. None when `f` searches bodies: that
/// search reads bodies, and a page makes only its own bounded body scan.
pub async fn type_counts(
    db: impl PgExecutor<'_>,
    f: &ListFilter,
    limit: i64,
) -> Result<Option<Vec<(Option<String>, i64)>>, StoreError> {
    if f.body_contains.is_some() {
        return Ok(None);
    }
    // Runtime-checked: the WHERE clause depends on which filters are given.
    let mut q =
        QueryBuilder::<Postgres>::new("SELECT msg_type, count(*) FROM (SELECT msg_type FROM dead_letters WHERE true");
    push_conditions(&mut q, f);
    At::Newest.push_cursor_and_order(&mut q);
    q.push(" LIMIT ").push_bind(FACET_ROWS).push(") newest GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT ").push_bind(limit);
    let rows: Vec<(Option<String>, i64)> = q.build_query_as().persistent(false).fetch_all(db).await?;
    Ok(Some(rows))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GroupFilter {
    pub original_queue: Option<String>,
    /// Groups with messages read from this DLQ (what a DLQ alert names); ordered by what
    /// awaits triage, largest first.
    pub dlq: Option<String>,
    pub reason: Option<String>,
    /// Only groups with at least one message awaiting triage.
    pub only_awaiting: bool,
    /// Only groups of this AMQP `type` (part of the group key).
    #[serde(default)]
    pub msg_type: Option<String>,
}

/// Failure groups, most recently seen first, each with its count of awaiting messages (kept
/// by triggers: migrations/0015_awaiting_counts.sql).
pub async fn groups(db: impl PgExecutor<'_>, f: &GroupFilter, limit: i64) -> Result<Vec<FailureGroup>, StoreError> {
    // Runtime-checked: the WHERE clause depends on which filters are given.
    let mut q = QueryBuilder::<Postgres>::new(
        "SELECT g.id, g.fingerprint, g.original_queue, g.reason, g.error_type, g.error_sample, g.msg_type,
            g.body_shape, g.first_seen, g.last_seen, g.count, g.awaiting
         FROM failure_groups g
         WHERE true",
    );
    push_group_conditions(&mut q, f);
    if let Some(v) = &f.msg_type {
        q.push(" AND g.msg_type = ").push_bind(v.clone());
    }
    q.push(if f.dlq.is_some() { " ORDER BY g.awaiting DESC, " } else { " ORDER BY " });
    q.push("g.last_seen DESC, g.id DESC LIMIT ").push_bind(limit.clamp(1, 1000));
    Ok(q.build_query_as().fetch_all(db).await?)
}

/// The message types among the groups `f` selects (its own type aside, so every type stays
/// offered): per type, how many groups and how many of their messages await triage, most
/// awaiting first. `None` is the groups of messages without a type.
pub async fn group_type_counts(db: impl PgExecutor<'_>, f: &GroupFilter) -> Result<Vec<GroupTypeCount>, StoreError> {
    let mut q = QueryBuilder::<Postgres>::new(
        "SELECT g.msg_type, count(*) AS groups, coalesce(sum(g.awaiting), 0)::bigint AS awaiting
         FROM failure_groups g WHERE true",
    );
    push_group_conditions(&mut q, f);
    q.push(" GROUP BY 1 ORDER BY 3 DESC, 2 DESC, 1 LIMIT 50");
    Ok(q.build_query_as().persistent(false).fetch_all(db).await?)
}

/// One line of [`group_type_counts`].
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct GroupTypeCount {
    pub msg_type: Option<String>,
    pub groups: i64,
    pub awaiting: i64,
}

/// `f`'s conditions on `failure_groups g`, all but its message type.
fn push_group_conditions(q: &mut QueryBuilder<Postgres>, f: &GroupFilter) {
    if let Some(v) = &f.original_queue {
        q.push(" AND g.original_queue = ").push_bind(v.clone());
    }
    if let Some(v) = &f.reason {
        q.push(" AND g.reason = ").push_bind(v.clone());
    }
    if let Some(v) = &f.dlq {
        q.push(" AND EXISTS (SELECT 1 FROM dead_letters d WHERE d.group_id = g.id AND d.queue = ")
            .push_bind(v.clone())
            .push(")");
    }
    if f.only_awaiting {
        q.push(" AND g.awaiting > 0");
    }
}

/// One failure group, for its page: the group, the DLQs its messages were read from, and the
/// newest awaiting messages' ids and bodies (a sample).
pub async fn group(db: &PgPool, id: i64, samples: i64) -> Result<Option<GroupDetail>, StoreError> {
    let Some(group) = sqlx::query_as!(
        FailureGroup,
        r#"SELECT g.id, g.fingerprint, g.original_queue, g.reason, g.error_type, g.error_sample, g.msg_type,
              g.body_shape, g.first_seen, g.last_seen, g.count, g.awaiting
           FROM failure_groups g WHERE g.id = $1"#,
        id
    )
    .fetch_optional(db)
    .await?
    else {
        return Ok(None);
    };
    let dlqs = sqlx::query_scalar!("SELECT DISTINCT queue FROM dead_letters WHERE group_id = $1 ORDER BY queue", id)
        .fetch_all(db)
        .await?;
    let samples = sqlx::query_as!(
        GroupSample,
        "SELECT id, body, content_type FROM dead_letters WHERE group_id = $1 AND status = 'awaiting'
         ORDER BY id DESC LIMIT $2",
        id,
        samples
    )
    .fetch_all(db)
    .await?;
    Ok(Some(GroupDetail { group, dlqs, samples }))
}

#[derive(Debug, Clone)]
pub struct GroupDetail {
    pub group: FailureGroup,
    pub dlqs: Vec<String>,
    pub samples: Vec<GroupSample>,
}

#[derive(Debug, Clone)]
pub struct GroupSample {
    pub id: i64,
    pub body: Vec<u8>,
    pub content_type: Option<String>,
}

/// Moves `ids` to `to`, only those currently in `from` when given (e.g. awaiting → replaying,
/// so two operators cannot both replay one message). Returns the ids actually changed.
pub async fn set_status(
    db: impl PgExecutor<'_>,
    ids: &[i64],
    from: Option<Status>,
    to: Status,
) -> Result<Vec<i64>, StoreError> {
    let changed = sqlx::query_scalar!(
        "UPDATE dead_letters SET status = $2
         WHERE id = ANY($1) AND ($3::text IS NULL OR status = $3) RETURNING id",
        ids,
        to.as_str(),
        from.map(Status::as_str)
    )
    .fetch_all(db)
    .await?;
    Ok(changed)
}

/// Archives `ids` with a reason; a message being replayed right now is left alone. Returns
/// the ids actually archived.
pub async fn archive(db: impl PgExecutor<'_>, ids: &[i64], reason: &str) -> Result<Vec<i64>, StoreError> {
    let changed = sqlx::query_scalar!(
        "UPDATE dead_letters SET status = 'archived', archived_reason = $2
         WHERE id = ANY($1) AND status IN ('awaiting', 'replayed') RETURNING id",
        ids,
        reason
    )
    .fetch_all(db)
    .await?;
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::ListFilter;

    #[test]
    fn a_body_filter_is_written_as_text_and_read_back_in_every_form() {
        let f = ListFilter { body_contains: Some(b"pedido".to_vec()), ..Default::default() };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["body_contains"], serde_json::json!({"text": "pedido"}));
        let binary = ListFilter { body_contains: Some(vec![0xff, 0x00]), ..Default::default() };
        assert_eq!(serde_json::to_value(&binary).unwrap()["body_contains"], serde_json::json!({"hex": "ff00"}));
        let nul = ListFilter { body_contains: Some(b"a\0".to_vec()), ..Default::default() };
        assert_eq!(
            serde_json::to_value(&nul).unwrap()["body_contains"],
            serde_json::json!({"hex": "6100"}),
            "jsonb holds no NUL"
        );
        let back = |j: serde_json::Value| serde_json::from_value::<ListFilter>(j).unwrap().body_contains;
        assert_eq!(back(v), Some(b"pedido".to_vec()));
        assert_eq!(back(serde_json::json!({"body_contains": {"hex": "ff00"}})), Some(vec![0xff, 0x00]));
        assert_eq!(back(serde_json::json!({"body_contains": [112, 101]})), Some(b"pe".to_vec()), "as written before");
        assert_eq!(back(serde_json::json!({"body_contains": null})), None);
        assert_eq!(back(serde_json::json!({})), None);
    }
}
