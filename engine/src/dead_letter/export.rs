//! Dead letters as NDJSON, for downloads: one JSON document per line, one line per message.
//!
//! Policy: a line holds everything the store keeps about a message, losslessly: the headers
//! in their typed form exactly as stored (`headers`: a line can be turned back into the AMQP
//! message), the body as UTF-8 text when it is valid UTF-8 and as base64 otherwise
//! (`body_encoding` says which; never re-rendered, never truncated). A download of many
//! messages selects them with the list's own filter (`store::push_conditions`) in the list's
//! order, newest first, at most [`MAX_ROWS`], and reads them as PostgreSQL sends them: a task
//! forwards the rows through a channel of [`BUFFER`] rows, so memory holds a few messages
//! whatever the selection, a slow reader slows the query, and dropping the stream stops it.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use serde::Serialize;
use sqlx::{PgPool, Postgres, QueryBuilder};

use super::model::{DeadLetter, Status};
use super::store::{ListFilter, push_conditions};

/// The most messages one download holds (the newest that match). A body can be large, so
/// this keeps a download to a file a laptop opens and one database connection busy for
/// seconds, not hours; older messages are one `older_than_mins` filter away.
pub const MAX_ROWS: i64 = types::dead_letter::EXPORT_MAX_ROWS;

/// Rows read ahead of the HTTP body: enough to keep PostgreSQL streaming while the client
/// reads, few enough that large bodies stay a few megabytes in memory.
const BUFFER: usize = 32;

/// What `body` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyEncoding {
    /// The body's bytes are valid UTF-8: `body` is that text.
    Utf8,
    /// Anything else: `body` is the bytes in standard base64 (with padding).
    Base64,
}

/// The AMQP basic properties, as the broker names them.
#[derive(Debug, Serialize)]
struct Properties<'a> {
    message_id: Option<&'a str>,
    correlation_id: Option<&'a str>,
    content_type: Option<&'a str>,
    content_encoding: Option<&'a str>,
    timestamp: Option<DateTime<Utc>>,
    app_id: Option<&'a str>,
    #[serde(rename = "type")]
    msg_type: Option<&'a str>,
    user_id: Option<&'a str>,
    cluster_id: Option<&'a str>,
    delivery_mode: Option<i16>,
    priority: Option<i16>,
    expiration: Option<&'a str>,
    reply_to: Option<&'a str>,
}

/// One line: the store's columns under their own names, properties grouped.
#[derive(Debug, Serialize)]
struct Line<'a> {
    id: i64,
    queue: &'a str,
    status: Status,
    archived_reason: Option<&'a str>,
    reason: &'a str,
    /// How it reached the DLQ.
    exchange: &'a str,
    routing_key: &'a str,
    /// The x-death summary (or, without x-death, what a framework's failure headers say).
    original_queue: Option<&'a str>,
    original_exchange: Option<&'a str>,
    original_routing_keys: &'a [String],
    death_count: i64,
    first_death_at: Option<DateTime<Utc>>,
    error_type: Option<&'a str>,
    error_message: Option<&'a str>,
    properties: Properties<'a>,
    /// Typed header values as stored (`{"t": "longstr", "v": …}`); null without a header table.
    headers: Option<&'a serde_json::Value>,
    body_encoding: BodyEncoding,
    body: String,
    body_size: i32,
    group_id: Option<i64>,
    fingerprint: &'a str,
    replay_of: Option<i64>,
    ingested_at: DateTime<Utc>,
    /// What of the message the ingester could not read; absent when it read everything.
    #[serde(skip_serializing_if = "Option::is_none")]
    unreadable: Option<&'a str>,
}

/// The body as `body` and `body_encoding` carry it.
pub fn body_text(bytes: &[u8]) -> (BodyEncoding, String) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (BodyEncoding::Utf8, text.to_string()),
        Err(_) => (BodyEncoding::Base64, base64::engine::general_purpose::STANDARD.encode(bytes)),
    }
}

/// One message as one NDJSON line, newline included.
pub fn line(d: &DeadLetter) -> Vec<u8> {
    let (body_encoding, body) = body_text(&d.body);
    let line = Line {
        id: d.id,
        queue: &d.queue,
        status: d.status,
        archived_reason: d.archived_reason.as_deref(),
        reason: &d.reason,
        exchange: &d.exchange,
        routing_key: &d.routing_key,
        original_queue: d.original_queue.as_deref(),
        original_exchange: d.original_exchange.as_deref(),
        original_routing_keys: &d.original_routing_keys,
        death_count: d.death_count,
        first_death_at: d.first_death_at,
        error_type: d.error_type.as_deref(),
        error_message: d.error_message.as_deref(),
        properties: Properties {
            message_id: d.message_id.as_deref(),
            correlation_id: d.correlation_id.as_deref(),
            content_type: d.content_type.as_deref(),
            content_encoding: d.content_encoding.as_deref(),
            timestamp: d.amqp_timestamp,
            app_id: d.app_id.as_deref(),
            msg_type: d.msg_type.as_deref(),
            user_id: d.user_id.as_deref(),
            cluster_id: d.cluster_id.as_deref(),
            delivery_mode: d.delivery_mode,
            priority: d.priority,
            expiration: d.expiration.as_deref(),
            reply_to: d.reply_to.as_deref(),
        },
        headers: d.headers.as_ref(),
        body_encoding,
        body,
        body_size: d.body_size,
        group_id: d.group_id,
        fingerprint: &d.fingerprint,
        replay_of: d.replay_of,
        ingested_at: d.ingested_at,
        unreadable: d.unreadable.as_deref(),
    };
    // Serialising borrowed strings, numbers and a JSON value cannot fail; an empty object
    // stands in should that ever change, rather than a broken line.
    let mut out = serde_json::to_vec(&line).unwrap_or_else(|_| b"{}".to_vec());
    out.push(b'\n');
    out
}

/// The query: every column `store::get` reads, the list's filter, the list's order.
fn select(f: &ListFilter, limit: i64) -> QueryBuilder<Postgres> {
    // Runtime-checked: the WHERE clause depends on which of the list's filters are given.
    let mut q = QueryBuilder::<Postgres>::new(
        "SELECT id, queue, message_id, correlation_id, content_type, content_encoding, amqp_timestamp,
            app_id, msg_type, user_id, cluster_id, delivery_mode, priority, expiration, reply_to, headers, body,
            body_size, exchange, routing_key, reason, original_queue, original_exchange, original_routing_keys,
            death_count, first_death_at, error_type, error_message, fingerprint, group_id,
            status, archived_reason, replay_of, ingested_at, unreadable
         FROM dead_letters WHERE true",
    );
    push_conditions(&mut q, f);
    q.push(" ORDER BY ingested_at DESC, id DESC LIMIT ").push_bind(limit.clamp(0, MAX_ROWS));
    q
}

/// The dead letters `f` selects, newest first, at most `limit` (and [`MAX_ROWS`]), as
/// PostgreSQL sends them. An error ends the stream after it is yielded.
pub fn stream(db: PgPool, f: ListFilter, limit: i64) -> impl Stream<Item = Result<DeadLetter, sqlx::Error>> + Send {
    let (tx, mut rx) = tokio::sync::mpsc::channel(BUFFER);
    tokio::spawn(async move {
        let mut q = select(&f, limit);
        // Unprepared, as the list: planned with this call's values.
        let mut rows = q.build_query_as::<DeadLetter>().persistent(false).fetch(&db);
        loop {
            // The reader gone (the client left) stops the task even while a body search is
            // still looking for its next match.
            let row = tokio::select! {
                row = rows.next() => row,
                () = tx.closed() => break,
            };
            let Some(row) = row else { break };
            let failed = row.is_err();
            if tx.send(row).await.is_err() || failed {
                break;
            }
        }
    });
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(body: &[u8]) -> DeadLetter {
        DeadLetter {
            queue: "orders.dlq".into(),
            content_type: Some("application/json".into()),
            msg_type: Some("order.created".into()),
            headers: Some(serde_json::json!({ "x-attempt": { "t": "i32", "v": 3 } })),
            body: body.to_vec(),
            body_size: body.len() as i32,
            routing_key: "orders".into(),
            original_queue: Some("orders".into()),
            original_exchange: Some("shop".into()),
            original_routing_keys: vec!["orders".into()],
            death_count: 2,
            error_type: Some("KeyError".into()),
            error_message: Some("sku\nmissing".into()),
            group_id: Some(5),
            ..DeadLetter::sample()
        }
    }

    fn parsed(d: &DeadLetter) -> serde_json::Value {
        let bytes = line(d);
        assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 1, "one line, newline last");
        assert_eq!(bytes.last(), Some(&b'\n'));
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn a_utf8_body_is_text_and_the_headers_keep_their_types() {
        let v = parsed(&stored("{\"sku\":\"ä\"}\n".as_bytes()));
        assert_eq!(v["body_encoding"], "utf8");
        assert_eq!(v["body"], "{\"sku\":\"ä\"}\n");
        assert_eq!(v["headers"]["x-attempt"], serde_json::json!({ "t": "i32", "v": 3 }));
        assert_eq!(v["status"], "awaiting");
        assert_eq!(v["properties"]["message_id"], "m-1");
        assert_eq!(v["properties"]["type"], "order.created");
        assert_eq!(v["death_count"], 2);
        assert_eq!(v["original_routing_keys"], serde_json::json!(["orders"]));
        assert_eq!(v["error_message"], "sku\nmissing");
        assert_eq!(v["group_id"], 5);
    }

    #[test]
    fn a_body_that_is_not_utf8_is_base64() {
        let v = parsed(&stored(&[0xff, 0x00, 0xfe, b'a']));
        assert_eq!(v["body_encoding"], "base64");
        assert_eq!(v["body"], "/wD+YQ==");
        assert_eq!(v["body_size"], 4);
    }

    #[test]
    fn a_message_without_headers_says_null() {
        let mut d = stored(b"");
        d.headers = None;
        let v = parsed(&d);
        assert!(v["headers"].is_null());
        assert_eq!((v["body_encoding"].as_str(), v["body"].as_str()), (Some("utf8"), Some("")));
    }

    #[test]
    fn the_download_uses_the_list_filter_and_order() {
        let f = ListFilter { queue: Some("q".into()), status: Some(Status::Archived), ..Default::default() };
        let sql = select(&f, 10).into_string();
        assert!(sql.contains(" AND queue = $1 AND status = $2"), "{sql}");
        assert!(sql.ends_with("ORDER BY ingested_at DESC, id DESC LIMIT $3"), "{sql}");
    }
}
