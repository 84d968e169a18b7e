//! Storing many dead letters in one transaction: the ingester's group commit.
//!
//! Policy: a batch costs four statements and one commit whatever its size. The rows go in as
//! one `INSERT … SELECT FROM unnest(…)` (one bind per column, so no bind limit and one
//! prepared statement for every batch size) with `ON CONFLICT DO NOTHING` on the natural key,
//! which makes a redelivery, or the same message twice in one batch, one row. Each failure
//! group is upserted once per batch *before* the rows, so a row is written once with its
//! `group_id` and `replay_of` (no second version of every row, no second pass over its six
//! indexes), without locking an existing group; its count is then raised by the rows that
//! were really inserted (the insert returns them), so duplicates never over-count, and that
//! update, locking the groups in id order, is the only group lock a batch holds until its
//! commit. Rows are written in arrival order, so ids (and lists, and replays in
//! first-failure order) follow the queue's order. Two batches holding the same redelivered
//! message, or creating the same new group, can still deadlock: that is a refusal like any
//! other, and the one-at-a-time fall-back resolves it. A statement the server refuses fails
//! the whole batch: the caller
//! then stores its deliveries one at a time to isolate the one refused.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::{received::Received, store::StoreError};

/// One dead letter's column values, derived once from its delivery (parsing, fingerprint,
/// natural key), ready for [`insert`].
#[derive(Debug, Clone)]
pub struct NewDeadLetter {
    queue: String,
    natural_key: String,
    message_id: Option<String>,
    correlation_id: Option<String>,
    content_type: Option<String>,
    content_encoding: Option<String>,
    amqp_timestamp: Option<DateTime<Utc>>,
    app_id: Option<String>,
    msg_type: Option<String>,
    user_id: Option<String>,
    cluster_id: Option<String>,
    delivery_mode: Option<i16>,
    priority: Option<i16>,
    expiration: Option<String>,
    reply_to: Option<String>,
    headers: Option<serde_json::Value>,
    body: Vec<u8>,
    exchange: String,
    routing_key: String,
    reason: &'static str,
    original_queue: Option<String>,
    original_exchange: Option<String>,
    original_routing_keys: Vec<String>,
    death_count: i64,
    first_death_at: Option<DateTime<Utc>>,
    error_type: Option<String>,
    error_message: Option<String>,
    fingerprint: String,
    /// What the body is (`kind::body_shape`).
    body_shape: String,
    /// The kind its group is keyed by: the `type`, and the body shape when no error is known.
    group_type: Option<String>,
    group_shape: Option<String>,
    /// The failure-header convention recognised (`conventions::Convention::as_str`).
    convention: Option<&'static str>,
    /// The queue its failure group is named after (the original one when known).
    group_queue: String,
    /// `(plan, dead letter)` of the replay that sent it, when it is a replay that died again.
    replay_origin: Option<(i64, i64)>,
    /// What of the message could not be read (see `unreadable`), in one line.
    unreadable: Option<String>,
}

/// PostgreSQL `text` cannot hold NUL: a property or header carrying one would otherwise make
/// the message unstorable, and requeued forever. It is shown as U+FFFD instead; the header
/// table (hex-encoded where needed) and the body keep the exact bytes.
fn pg_text(v: &str) -> String {
    v.replace('\0', "\u{FFFD}")
}

/// 4714-11-24 BC, the earliest `timestamptz`: an `x-death` time before it (a signed header
/// can say anything) would make PostgreSQL refuse the message forever; it is stored as NULL,
/// the headers keep it whole.
const PG_MIN_TIMESTAMP: i64 = -210_866_803_200;

impl NewDeadLetter {
    pub fn new(r: Received) -> Self {
        let d = r.derive();
        let natural_key = r.natural_key();
        let headers = r.headers_json();
        let replay_origin = crate::replay::lineage::replay_origin(r.properties.headers().as_ref());
        let p = &r.properties;
        let text = |v: &Option<lapin::types::ShortString>| v.as_ref().map(|x| x.as_str().to_string());
        let unreadable = super::unreadable::note(
            p.headers().as_ref(),
            &[
                ("message_id", text(p.message_id()).as_deref()),
                ("correlation_id", text(p.correlation_id()).as_deref()),
                ("content_type", text(p.content_type()).as_deref()),
                ("type", text(p.kind()).as_deref()),
                ("app_id", text(p.app_id()).as_deref()),
                ("reply_to", text(p.reply_to()).as_deref()),
            ],
        )
        .map(|n| pg_text(&n));
        let s = |v: &Option<lapin::types::ShortString>| v.as_ref().map(|x| pg_text(x.as_str()));
        let o = |v: &Option<String>| v.as_deref().map(pg_text);
        // A timestamp PostgreSQL cannot hold (past year 262143) is stored as NULL rather than
        // refusing the message forever; the headers and body are still kept whole.
        let amqp_timestamp =
            p.timestamp().and_then(|t| i64::try_from(t).ok()).and_then(|t| DateTime::<Utc>::from_timestamp(t, 0));
        Self {
            natural_key,
            message_id: s(p.message_id()),
            correlation_id: s(p.correlation_id()),
            content_type: s(p.content_type()),
            content_encoding: s(p.content_encoding()),
            amqp_timestamp,
            app_id: s(p.app_id()),
            msg_type: s(p.kind()),
            user_id: s(p.user_id()),
            cluster_id: s(p.cluster_id()),
            delivery_mode: p.delivery_mode().map(i16::from),
            priority: p.priority().map(i16::from),
            expiration: s(p.expiration()),
            reply_to: s(p.reply_to()),
            headers,
            exchange: pg_text(&r.exchange),
            routing_key: pg_text(&r.routing_key),
            reason: d.reason,
            group_queue: pg_text(d.original_queue.as_deref().unwrap_or(&r.queue)),
            original_queue: o(&d.original_queue),
            original_exchange: o(&d.original_exchange),
            original_routing_keys: d.original_routing_keys.iter().map(|k| pg_text(k)).collect(),
            death_count: d.death_count,
            first_death_at: d.first_death_at.filter(|t| t.timestamp() >= PG_MIN_TIMESTAMP),
            error_type: o(&d.error_type),
            error_message: o(&d.error_message),
            fingerprint: d.fingerprint,
            group_type: s(p.kind()),
            group_shape: super::kind::shape_counts(d.error_type.as_deref(), d.error_message.as_deref())
                .then(|| d.body_shape.clone()),
            body_shape: d.body_shape,
            convention: d.convention,
            queue: pg_text(&r.queue),
            unreadable,
            body: r.body,
            replay_origin,
        }
    }

    pub fn natural_key(&self) -> &str {
        &self.natural_key
    }

    pub fn message_id(&self) -> Option<&str> {
        self.message_id.as_deref()
    }

    pub fn body_len(&self) -> usize {
        self.body.len()
    }

    /// The same message reduced to what PostgreSQL cannot refuse, for one the store refused
    /// again and again (`ingest::QUARANTINE_AFTER` times): the body and the natural key as
    /// they are, every property and the typed header table kept as hex inside one
    /// `x-unreadable-amqp-field` header, the text columns empty, and `why` in the note. The
    /// queue then goes on, and the console shows the message as unreadable instead of a DLQ
    /// that retries one message forever.
    pub fn quarantined(&self, why: &str) -> Self {
        let props = serde_json::json!({
            "message_id": self.message_id, "correlation_id": self.correlation_id,
            "content_type": self.content_type, "content_encoding": self.content_encoding,
            "app_id": self.app_id, "type": self.msg_type, "user_id": self.user_id,
            "cluster_id": self.cluster_id, "expiration": self.expiration, "reply_to": self.reply_to,
            "headers": self.headers, "exchange": self.exchange, "routing_key": self.routing_key,
        });
        let raw = hex::encode(serde_json::to_vec(&props).unwrap_or_default());
        let headers = serde_json::json!({ lapin::types::parsing::UNREADABLE_KEY: {"t": "table", "v": {
            "reason": {"t": "longstr", "v": "the store refused this message; its properties and headers are kept as JSON in `json`"},
            "json": {"t": "bytes", "hex": raw},
        }}});
        let why: String = why.chars().filter(|c| !c.is_control()).take(500).collect();
        Self {
            queue: self.queue.clone(),
            natural_key: self.natural_key.clone(),
            message_id: None,
            correlation_id: None,
            content_type: None,
            content_encoding: None,
            amqp_timestamp: None,
            app_id: None,
            msg_type: None,
            user_id: None,
            cluster_id: None,
            delivery_mode: self.delivery_mode,
            priority: self.priority,
            expiration: None,
            reply_to: None,
            headers: Some(headers),
            body: self.body.clone(),
            exchange: String::new(),
            routing_key: String::new(),
            reason: self.reason,
            original_queue: None,
            original_exchange: None,
            original_routing_keys: Vec::new(),
            death_count: self.death_count,
            first_death_at: None,
            error_type: None,
            error_message: None,
            fingerprint: super::fingerprint::fingerprint(Some(&self.queue), "unreadable", None, None),
            body_shape: self.body_shape.clone(),
            group_type: None,
            group_shape: None,
            convention: None,
            group_queue: self.queue.clone(),
            replay_origin: None,
            unreadable: Some(format!("stored raw: the store refused it repeatedly ({why})")),
        }
    }
}

/// Upserts each failure group of `rows` once, in fingerprint order; returns fingerprint → id.
/// A new group starts at count 0: [`insert`] adds the rows it really inserted.
async fn upsert_groups(conn: &mut PgConnection, rows: &[NewDeadLetter]) -> Result<HashMap<String, i64>, StoreError> {
    let mut first: Vec<&NewDeadLetter> = Vec::new();
    {
        let mut seen = std::collections::HashSet::new();
        for r in rows {
            if seen.insert(r.fingerprint.as_str()) {
                first.push(r);
            }
        }
    }
    first.sort_by(|a, b| a.fingerprint.cmp(&b.fingerprint));
    let col = |f: fn(&NewDeadLetter) -> Option<String>| first.iter().map(|r| f(r)).collect::<Vec<_>>();
    let fingerprints: Vec<String> = first.iter().map(|r| r.fingerprint.clone()).collect();
    // `DO NOTHING` takes no lock on a group that exists already: the only lock a batch takes
    // on its groups is the count update at the end of [`insert`], held for the commit, so two
    // batches of one group (`ingest.commits` > 1) insert their rows at the same time and
    // queue up only for that update.
    sqlx::query!(
        "INSERT INTO failure_groups (fingerprint, original_queue, reason, error_type, error_sample, msg_type,
                                     body_shape, count)
         SELECT fingerprint, original_queue, reason, error_type, error_sample, msg_type, body_shape, 0
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
              AS g (fingerprint, original_queue, reason, error_type, error_sample, msg_type, body_shape)
         ORDER BY fingerprint
         ON CONFLICT ON CONSTRAINT failure_groups_fingerprint_key DO NOTHING",
        &fingerprints,
        &first.iter().map(|r| r.group_queue.clone()).collect::<Vec<_>>(),
        &first.iter().map(|r| r.reason).collect::<Vec<_>>() as &[&str],
        &col(|r| r.error_type.clone()) as &[Option<String>],
        &col(|r| r.error_message.clone()) as &[Option<String>],
        &col(|r| r.group_type.clone()) as &[Option<String>],
        &col(|r| r.group_shape.clone()) as &[Option<String>]
    )
    .execute(&mut *conn)
    .await?;
    // A second statement, so its snapshot sees a group another batch committed while this
    // one's insert waited for it (one statement's snapshot would not, leaving those rows
    // without their group).
    let ids = sqlx::query!("SELECT id, fingerprint FROM failure_groups WHERE fingerprint = ANY($1)", &fingerprints)
        .fetch_all(&mut *conn)
        .await?;
    Ok(ids.into_iter().map(|g| (g.fingerprint, g.id)).collect())
}

/// Stores `rows` in the caller's transaction: one group upsert, then one statement that
/// inserts every row and counts the new ones in their groups. Returns, for each row in
/// order, its id when this call inserted it, `None` when it was already stored (or is the
/// same message as an earlier row of `rows`).
pub async fn insert(conn: &mut PgConnection, rows: &[NewDeadLetter]) -> Result<Vec<Option<i64>>, StoreError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let groups = upsert_groups(conn, rows).await?;
    let text = |f: fn(&NewDeadLetter) -> String| rows.iter().map(&f).collect::<Vec<_>>();
    let opt = |f: fn(&NewDeadLetter) -> Option<String>| rows.iter().map(&f).collect::<Vec<_>>();
    let group_ids: Vec<Option<i64>> = rows.iter().map(|r| groups.get(&r.fingerprint).copied()).collect();
    let inserted = sqlx::query!(
        "WITH r AS (
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                $7::timestamptz[], $8::text[], $9::text[], $10::text[], $11::text[], $12::smallint[],
                $13::smallint[], $14::text[], $15::text[], $16::jsonb[], $17::bytea[], $18::text[], $19::text[],
                $20::text[], $21::text[], $22::text[], $23::jsonb[], $24::bigint[], $25::timestamptz[],
                $26::text[], $27::text[], $28::text[], $29::bigint[], $30::bigint[], $31::bigint[], $32::text[], $33::text[], $34::text[])
                WITH ORDINALITY AS r (queue, natural_key, message_id, correlation_id, content_type,
                content_encoding, amqp_timestamp, app_id, msg_type, user_id, cluster_id, delivery_mode, priority,
                expiration, reply_to, headers, body, exchange, routing_key, reason, original_queue,
                original_exchange, original_routing_keys, death_count, first_death_at, error_type, error_message,
                fingerprint, group_id, replay_plan, replay_of, convention, unreadable, body_shape, n)
         ), ins AS (
            INSERT INTO dead_letters (queue, natural_key, message_id, correlation_id, content_type,
                content_encoding, amqp_timestamp, app_id, msg_type, user_id, cluster_id, delivery_mode, priority,
                expiration, reply_to, headers, body, body_size, exchange, routing_key, reason, original_queue,
                original_exchange, original_routing_keys, death_count, first_death_at, error_type, error_message,
                fingerprint, group_id, replay_of, convention, unreadable, body_shape)
            SELECT r.queue, r.natural_key, r.message_id, r.correlation_id, r.content_type, r.content_encoding,
                r.amqp_timestamp, r.app_id, r.msg_type, r.user_id, r.cluster_id, r.delivery_mode, r.priority,
                r.expiration, r.reply_to, r.headers, r.body, octet_length(r.body), r.exchange, r.routing_key,
                r.reason, r.original_queue, r.original_exchange,
                ARRAY(SELECT jsonb_array_elements_text(r.original_routing_keys)), r.death_count, r.first_death_at,
                r.error_type, r.error_message, r.fingerprint, r.group_id, i.dead_letter_id, r.convention, r.unreadable,
                r.body_shape
            FROM r
            -- A replay that died again names the replay item that sent it: link the new dead
            -- letter to the one replayed (lineage), only when that item exists here.
            LEFT JOIN replay_items i ON i.plan_id = r.replay_plan AND i.dead_letter_id = r.replay_of
            ORDER BY r.n
            ON CONFLICT ON CONSTRAINT dead_letters_natural_key_key DO NOTHING
            RETURNING id, natural_key, group_id
         )
         SELECT id, natural_key, group_id FROM ins",
        &text(|r| r.queue.clone()),
        &text(|r| r.natural_key.clone()),
        &opt(|r| r.message_id.clone()) as &[Option<String>],
        &opt(|r| r.correlation_id.clone()) as &[Option<String>],
        &opt(|r| r.content_type.clone()) as &[Option<String>],
        &opt(|r| r.content_encoding.clone()) as &[Option<String>],
        &rows.iter().map(|r| r.amqp_timestamp).collect::<Vec<_>>() as &[Option<DateTime<Utc>>],
        &opt(|r| r.app_id.clone()) as &[Option<String>],
        &opt(|r| r.msg_type.clone()) as &[Option<String>],
        &opt(|r| r.user_id.clone()) as &[Option<String>],
        &opt(|r| r.cluster_id.clone()) as &[Option<String>],
        &rows.iter().map(|r| r.delivery_mode).collect::<Vec<_>>() as &[Option<i16>],
        &rows.iter().map(|r| r.priority).collect::<Vec<_>>() as &[Option<i16>],
        &opt(|r| r.expiration.clone()) as &[Option<String>],
        &opt(|r| r.reply_to.clone()) as &[Option<String>],
        &rows.iter().map(|r| r.headers.clone()).collect::<Vec<_>>() as &[Option<serde_json::Value>],
        &rows.iter().map(|r| r.body.as_slice()).collect::<Vec<_>>() as &[&[u8]],
        &text(|r| r.exchange.clone()),
        &text(|r| r.routing_key.clone()),
        &rows.iter().map(|r| r.reason).collect::<Vec<_>>() as &[&str],
        &opt(|r| r.original_queue.clone()) as &[Option<String>],
        &opt(|r| r.original_exchange.clone()) as &[Option<String>],
        // A text[] per row would make a two-dimensional array, which unnest flattens.
        &rows.iter().map(|r| serde_json::json!(r.original_routing_keys)).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.death_count).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.first_death_at).collect::<Vec<_>>() as &[Option<DateTime<Utc>>],
        &opt(|r| r.error_type.clone()) as &[Option<String>],
        &opt(|r| r.error_message.clone()) as &[Option<String>],
        &text(|r| r.fingerprint.clone()),
        &group_ids as &[Option<i64>],
        &rows.iter().map(|r| r.replay_origin.map(|(plan, _)| plan)).collect::<Vec<_>>() as &[Option<i64>],
        &rows.iter().map(|r| r.replay_origin.map(|(_, of)| of)).collect::<Vec<_>>() as &[Option<i64>],
        &rows.iter().map(|r| r.convention).collect::<Vec<_>>() as &[Option<&str>],
        &opt(|r| r.unreadable.clone()) as &[Option<String>],
        &text(|r| r.body_shape.clone())
    )
    .fetch_all(&mut *conn)
    .await?;
    count_in_groups(conn, &inserted.iter().filter_map(|r| r.group_id).collect::<Vec<_>>()).await?;
    // Of two rows with one natural key, the first in `rows` is the one reported inserted.
    let mut ids: HashMap<String, i64> = inserted.into_iter().map(|r| (r.natural_key, r.id)).collect();
    Ok(rows.iter().map(|r| ids.remove(&r.natural_key)).collect())
}

/// Raises each group's count by the rows just inserted in it (one id per row). The groups are
/// locked in id order, so two batches of the same groups committing at once queue up behind
/// each other instead of deadlocking; the lock is held until the caller commits. `NO KEY`:
/// the rows' foreign-key checks hold `KEY SHARE` locks on these groups, which a plain
/// `FOR UPDATE` would wait for (two batches, each waiting for the other's key share).
async fn count_in_groups(conn: &mut PgConnection, group_ids: &[i64]) -> Result<(), StoreError> {
    if group_ids.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "WITH c AS (SELECT g AS id, count(*) AS n FROM unnest($1::bigint[]) AS g GROUP BY g),
         l AS (SELECT f.id, c.n FROM failure_groups f JOIN c ON c.id = f.id ORDER BY f.id FOR NO KEY UPDATE OF f)
         UPDATE failure_groups f SET count = f.count + l.n, last_seen = now() FROM l WHERE f.id = l.id",
        group_ids
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// [`insert`] in its own transaction, committed before it returns: what the ingester needs
/// before it may ack.
pub async fn insert_committed(pool: &PgPool, rows: &[NewDeadLetter]) -> Result<Vec<Option<i64>>, StoreError> {
    insert_committed_after(pool, rows, std::future::ready(()), || {}).await
}

/// [`insert_committed`] for batches committing at once: the transaction begins once `after`
/// resolves (the previous batch's rows are written) and `written` is called as soon as this
/// batch's rows are (before its commit, or when it fails). So the batches' rows get their
/// ids and `ingested_at` in the order the batches were gathered, while one batch's commit
/// (its fsync) overlaps the next one's statements.
pub async fn insert_committed_after(
    pool: &PgPool,
    rows: &[NewDeadLetter],
    after: impl std::future::Future<Output = ()>,
    written: impl FnOnce(),
) -> Result<Vec<Option<i64>>, StoreError> {
    after.await;
    let res = async {
        let mut tx = pool.begin().await?;
        let outcome = insert(&mut tx, rows).await?;
        Ok::<_, StoreError>((tx, outcome))
    }
    .await;
    written();
    let (tx, outcome) = res?;
    tx.commit().await?;
    Ok(outcome)
}

/// True when PostgreSQL itself answered the statement with an error (a value it refuses, a
/// constraint, a deadlock): storing the rows one by one may then succeed for all but one.
/// Anything else (connection lost, pool exhausted) would fail one by one just the same.
pub fn is_refusal(e: &StoreError) -> bool {
    matches!(e, StoreError::Db(sqlx::Error::Database(_)))
}

#[cfg(test)]
mod tests {
    use lapin::{
        BasicProperties,
        types::{AMQPValue, FieldArray, FieldTable},
    };

    use super::*;

    fn died_at(secs: i64) -> NewDeadLetter {
        let mut death = FieldTable::default();
        death.insert("reason".into(), AMQPValue::LongString("rejected".into()));
        death.insert("queue".into(), AMQPValue::LongString("work".into()));
        death.insert("time".into(), AMQPValue::LongLongInt(secs));
        let mut h = FieldTable::default();
        h.insert("x-death".into(), AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])));
        NewDeadLetter::new(Received {
            queue: "dlq".into(),
            exchange: String::new(),
            routing_key: "dlq".into(),
            properties: BasicProperties::default().with_headers(h),
            body: b"x".to_vec(),
        })
    }

    #[test]
    fn a_death_time_before_the_earliest_timestamptz_is_stored_as_null() {
        assert_eq!(died_at(PG_MIN_TIMESTAMP).first_death_at.map(|t| t.timestamp()), Some(PG_MIN_TIMESTAMP));
        assert_eq!(died_at(PG_MIN_TIMESTAMP - 1).first_death_at, None);
        assert_eq!(died_at(-1_000_000_000_000).first_death_at, None);
        assert!(died_at(-1_000_000_000_000).headers.is_some(), "the header itself is kept");
    }
}
