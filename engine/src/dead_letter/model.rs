//! Rows of the dead-letter store as the console reads them.
//!
//! Policy: a stored dead letter can always be turned back into the AMQP properties it
//! arrived with (`DeadLetter::properties`), which is what a replay publishes.

use chrono::{DateTime, Utc};
use lapin::{BasicProperties, types::ShortString};
use serde::{Deserialize, Serialize};

use super::headers::{self, HeaderError};
pub use types::DeadLetterStatus as Status;

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct DeadLetter {
    pub id: i64,
    pub queue: String,
    pub message_id: Option<String>,
    pub correlation_id: Option<String>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub amqp_timestamp: Option<DateTime<Utc>>,
    pub app_id: Option<String>,
    pub msg_type: Option<String>,
    pub user_id: Option<String>,
    pub cluster_id: Option<String>,
    pub delivery_mode: Option<i16>,
    pub priority: Option<i16>,
    pub expiration: Option<String>,
    pub reply_to: Option<String>,
    /// Typed encoding (see `headers`); None when the message had no header table.
    pub headers: Option<serde_json::Value>,
    pub body: Vec<u8>,
    pub body_size: i32,
    pub exchange: String,
    pub routing_key: String,
    pub reason: String,
    pub original_queue: Option<String>,
    pub original_exchange: Option<String>,
    pub original_routing_keys: Vec<String>,
    pub death_count: i64,
    pub first_death_at: Option<DateTime<Utc>>,
    pub error_type: Option<String>,
    pub error_message: Option<String>,
    pub fingerprint: String,
    pub group_id: Option<i64>,
    pub status: Status,
    pub archived_reason: Option<String>,
    pub replay_of: Option<i64>,
    pub ingested_at: DateTime<Utc>,
    /// What of the message the ingester could not read (see `unreadable`), in one line.
    pub unreadable: Option<String>,
}

impl DeadLetter {
    /// A plausible stored dead letter, for unit tests.
    #[cfg(test)]
    pub(crate) fn sample() -> DeadLetter {
        DeadLetter {
            id: 7,
            queue: "q.dlq".into(),
            message_id: Some("m-1".into()),
            correlation_id: None,
            content_type: None,
            content_encoding: None,
            amqp_timestamp: None,
            app_id: None,
            msg_type: None,
            user_id: None,
            cluster_id: None,
            delivery_mode: Some(2),
            priority: None,
            expiration: None,
            reply_to: None,
            headers: None,
            body: b"old body".to_vec(),
            body_size: 8,
            exchange: "dlx".into(),
            routing_key: "k".into(),
            reason: "rejected".into(),
            original_queue: None,
            original_exchange: None,
            original_routing_keys: vec![],
            death_count: 1,
            first_death_at: None,
            error_type: None,
            error_message: None,
            fingerprint: "fp".into(),
            group_id: None,
            status: Status::Awaiting,
            archived_reason: None,
            replay_of: None,
            ingested_at: Utc::now(),
            unreadable: None,
        }
    }

    /// The AMQP properties and headers exactly as received, for a replay to publish.
    pub fn properties(&self) -> Result<BasicProperties, HeaderError> {
        let short = |v: &Option<String>| -> Result<Option<ShortString>, HeaderError> {
            v.as_ref()
                .map(|s| ShortString::try_new(s.clone()).map_err(|_| HeaderError::OutOfRange("shortstr property")))
                .transpose()
        };
        let mut p = BasicProperties::default();
        if let Some(v) = short(&self.content_type)? {
            p = p.with_content_type(v);
        }
        if let Some(v) = short(&self.content_encoding)? {
            p = p.with_content_encoding(v);
        }
        if let Some(h) = &self.headers {
            p = p.with_headers(headers::table_from_json(h)?);
        }
        if let Some(v) = self.delivery_mode {
            p = p.with_delivery_mode(u8::try_from(v).map_err(|_| HeaderError::OutOfRange("delivery_mode"))?);
        }
        if let Some(v) = self.priority {
            p = p.with_priority(u8::try_from(v).map_err(|_| HeaderError::OutOfRange("priority"))?);
        }
        if let Some(v) = short(&self.correlation_id)? {
            p = p.with_correlation_id(v);
        }
        if let Some(v) = short(&self.reply_to)? {
            p = p.with_reply_to(v);
        }
        if let Some(v) = short(&self.expiration)? {
            p = p.with_expiration(v);
        }
        if let Some(v) = short(&self.message_id)? {
            p = p.with_message_id(v);
        }
        if let Some(t) = self.amqp_timestamp {
            p = p.with_timestamp(u64::try_from(t.timestamp()).map_err(|_| HeaderError::OutOfRange("timestamp"))?);
        }
        if let Some(v) = short(&self.msg_type)? {
            p = p.with_type(v);
        }
        if let Some(v) = short(&self.user_id)? {
            p = p.with_user_id(v);
        }
        if let Some(v) = short(&self.app_id)? {
            p = p.with_app_id(v);
        }
        if let Some(v) = short(&self.cluster_id)? {
            p = p.with_cluster_id(v);
        }
        Ok(p)
    }
}

/// A list row: no whole body, only its first bytes (`body_head`) for a preview.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct DeadLetterSummary {
    pub id: i64,
    pub queue: String,
    pub message_id: Option<String>,
    pub content_type: Option<String>,
    pub reason: String,
    pub original_queue: Option<String>,
    pub error_type: Option<String>,
    pub error_message: Option<String>,
    pub death_count: i64,
    pub group_id: Option<i64>,
    pub status: Status,
    pub body_size: i32,
    pub msg_type: Option<String>,
    pub body_shape: Option<String>,
    pub body_head: Vec<u8>,
    pub ingested_at: DateTime<Utc>,
}

/// A row's place in the list's order: the next page starts after the last row of this one,
/// the previous page before its first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    pub ingested_at: DateTime<Utc>,
    pub id: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub items: Vec<DeadLetterSummary>,
    /// None on the last page.
    pub next: Option<Cursor>,
    /// Where the page before this one ends (its rows are newer than this cursor); None on the
    /// first page.
    pub prev: Option<Cursor>,
    /// A body search stopped after `store::BODY_SEARCH_ROWS` rows
    /// without filling the page: `next` continues the search after the last row it read.
    pub searched_partly: bool,
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct FailureGroup {
    pub id: i64,
    pub fingerprint: String,
    pub original_queue: Option<String>,
    pub reason: String,
    pub error_type: Option<String>,
    pub error_sample: Option<String>,
    /// The AMQP `type` its messages carry, when they do (part of the group key).
    pub msg_type: Option<String>,
    /// Their body shape, when it is part of the group key (no error known).
    pub body_shape: Option<String>,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    /// Messages ever grouped here.
    pub count: i64,
    /// Of those, how many still await triage.
    pub awaiting: i64,
}
