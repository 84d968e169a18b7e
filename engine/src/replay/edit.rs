//! Edit and replay: change the body or headers of one dead letter before replaying it.
//!
//! Policy: the dead letter itself is never changed. Each edit is a whole new version (body and
//! typed header table) in `dead_letter_edits`, written with its `dead_letter.edit` audit entry
//! in one transaction. A replay sends the latest edit (`items::next_pending` swaps it in) with
//! every property as received, message_id included, plus `x-revenant-edited: <edit id>`. A
//! message being replayed cannot be edited (its row is locked while the edit is checked), so a
//! plan sends the version that was latest when it was created.
//!
//! Headers are edited as plain JSON `{name: value}` and merged onto the current typed table: a
//! value left as it was keeps its AMQP type; a new or changed one is typed from its JSON
//! (string → longstr, whole number → i64, other number → f64, bool → bool, null → void,
//! array → array, object → table, merged key by key); a key left out is removed. A new
//! header name (at any depth) must be one an operator can mean (`headers::check_name`).

pub mod diff;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value, json};
use sqlx::{PgExecutor, PgPool};

use crate::audit;
use crate::auth::Principal;
use crate::dead_letter::{
    headers,
    model::{DeadLetter, Status},
};

pub use diff::{BodyDiff, Diff, HeaderChange, Line, LineKind};

/// Header naming the edit a replay sent (the id of its `dead_letter_edits` row), as text.
pub const EDITED_HEADER: &str = "x-revenant-edited";
/// The largest body an edit may hold.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
const MAX_NOTE_CHARS: usize = 1000;

#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("dead letter {0} not found")]
    NotFound(i64),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

fn invalid(m: impl Into<String>) -> EditError {
    EditError::Invalid(m.into())
}

/// One saved version of a dead letter.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Edit {
    pub id: i64,
    pub dead_letter_id: i64,
    pub body: Vec<u8>,
    /// Typed encoding, as `dead_letters.headers`; None when the message has no header table.
    pub headers: Option<Value>,
    pub edited_by: String,
    pub edited_at: DateTime<Utc>,
    pub note: Option<String>,
}

impl Edit {
    /// Makes `dl` this version for sending: its body and headers, plus [`EDITED_HEADER`].
    /// Every other property (message_id, correlation_id, …) stays as received.
    pub fn apply_to(self, dl: &mut DeadLetter) {
        let mut table = match self.headers {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        table.insert(EDITED_HEADER.into(), json!({"t": "longstr", "v": self.id.to_string()}));
        dl.headers = Some(Value::Object(table));
        dl.body_size = i32::try_from(self.body.len()).unwrap_or(i32::MAX);
        dl.body = self.body;
    }
}

/// What a replay of a dead letter would send now: its latest edit, or the original.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Version {
    pub status: Status,
    pub body: Vec<u8>,
    pub headers: Option<Value>,
    /// The edit, when the message was edited.
    pub edit_id: Option<i64>,
}

pub async fn current(db: impl PgExecutor<'_>, dead_letter_id: i64) -> Result<Version, EditError> {
    let row = sqlx::query_as!(
        Version,
        r#"SELECT d.status AS "status: Status", CASE WHEN e.id IS NULL THEN d.body ELSE e.body END AS "body!",
                CASE WHEN e.id IS NULL THEN d.headers ELSE e.headers END AS headers, e.id AS "edit_id?"
         FROM dead_letters d
         LEFT JOIN LATERAL (SELECT id, body, headers FROM dead_letter_edits
                            WHERE dead_letter_id = d.id ORDER BY id DESC LIMIT 1) e ON true
         WHERE d.id = $1"#,
        dead_letter_id
    )
    .fetch_optional(db)
    .await?;
    row.ok_or(EditError::NotFound(dead_letter_id))
}

/// The latest edit of a dead letter, if it was ever edited.
pub async fn latest_edit(db: impl PgExecutor<'_>, dead_letter_id: i64) -> sqlx::Result<Option<Edit>> {
    sqlx::query_as!(
        Edit,
        "SELECT id, dead_letter_id, body, headers, edited_by, edited_at, note
         FROM dead_letter_edits WHERE dead_letter_id = $1 ORDER BY id DESC LIMIT 1",
        dead_letter_id
    )
    .fetch_optional(db)
    .await
}

/// The latest edit of each of `ids` that was edited.
pub async fn latest_for(db: impl PgExecutor<'_>, ids: &[i64]) -> sqlx::Result<Vec<Edit>> {
    sqlx::query_as!(
        Edit,
        "SELECT DISTINCT ON (dead_letter_id) id, dead_letter_id, body, headers, edited_by, edited_at, note
         FROM dead_letter_edits
         WHERE dead_letter_id = ANY($1) ORDER BY dead_letter_id, id DESC",
        ids
    )
    .fetch_all(db)
    .await
}

/// Saves a new version of a dead letter: `body`, and `headers_plain` (`{name: value}`) merged
/// onto the current typed headers. Audited as `dead_letter.edit` in the same transaction.
pub async fn save_edit(
    pool: &PgPool,
    by: &Principal,
    ip: Option<&str>,
    dead_letter_id: i64,
    body: Vec<u8>,
    headers_plain: Value,
    note: Option<&str>,
) -> Result<Edit, EditError> {
    let note = note.map(str::trim).filter(|n| !n.is_empty());
    if note.is_some_and(|n| n.chars().count() > MAX_NOTE_CHARS) {
        return Err(invalid(format!("the note is longer than {MAX_NOTE_CHARS} characters")));
    }
    if body.len() > MAX_BODY_BYTES {
        return Err(invalid(format!("the body is {} bytes; an edit may hold at most 16 MiB", body.len())));
    }
    let mut tx = pool.begin().await?;
    // Locks the row: a plan created meanwhile waits, and then sends this edit.
    let status = sqlx::query_scalar!(
        r#"SELECT status AS "status: Status" FROM dead_letters WHERE id = $1 FOR UPDATE"#,
        dead_letter_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    if status == Some(Status::Replaying) {
        return Err(EditError::Conflict(format!(
            "dead letter {dead_letter_id} is being replayed; edit it once that replay has finished or been cancelled"
        )));
    }
    let cur = current(&mut *tx, dead_letter_id).await?;
    let typed = merge_headers(cur.headers.as_ref(), &headers_plain)?;
    headers::table_from_json(&typed).map_err(|e| invalid(format!("headers: {e}")))?;
    let empty = typed.as_object().is_some_and(Map::is_empty);
    let typed = if empty && cur.headers.is_none() { None } else { Some(typed) };
    if body == cur.body && typed == cur.headers {
        return Err(invalid("this edit changes nothing: a replay would already send this body and these headers"));
    }
    let edit = sqlx::query_as!(
        Edit,
        "INSERT INTO dead_letter_edits (dead_letter_id, body, headers, edited_by, note)
         VALUES ($1, $2, $3, $4, $5) RETURNING id, dead_letter_id, body, headers, edited_by, edited_at, note",
        dead_letter_id,
        body,
        typed,
        by.username,
        note
    )
    .fetch_one(&mut *tx)
    .await?;
    let changed: Vec<String> =
        diff::headers_diff(cur.headers.as_ref(), typed.as_ref()).into_iter().map(|c| c.name).collect();
    // Sizes and header names only: payloads stay out of the audit log.
    let detail = json!({
        "dead_letter_id": dead_letter_id,
        "edit_id": edit.id,
        "previous_edit_id": cur.edit_id,
        "body_bytes": { "before": cur.body.len(), "after": body.len() },
        "headers_changed": changed,
        "note": note,
    });
    audit::record(
        &mut *tx,
        audit::Entry {
            actor: by,
            source_ip: ip,
            action: "dead_letter.edit",
            target: Some(format!("dead letter #{dead_letter_id}")),
            filter: None,
            item_count: 1,
            outcome: "ok",
            detail: Some(detail),
        },
    )
    .await?;
    tx.commit().await?;
    tracing::info!(dead_letter_id, edit_id = edit.id, bytes = body.len(), by = %by.username, "dead letter edited");
    Ok(edit)
}

/// A typed header value as a person writes it: strings as they are (bytes as `0x…` hex),
/// numbers and booleans as JSON, tables as objects, arrays as arrays, void as null.
pub fn to_plain(typed: &Value) -> Value {
    let Some(o) = typed.as_object() else { return typed.clone() };
    if let Some(h) = o.get("hex").and_then(Value::as_str) {
        return Value::String(format!("0x{h}"));
    }
    match (o.get("t").and_then(Value::as_str), o.get("v")) {
        (Some("table"), Some(Value::Object(m))) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), to_plain(v))).collect())
        }
        (Some("array"), Some(Value::Array(a))) => Value::Array(a.iter().map(to_plain).collect()),
        (_, Some(v)) => v.clone(),
        _ => Value::Null,
    }
}

/// A whole typed header table as plain `{name: value}`.
pub fn table_to_plain(typed: Option<&Value>) -> Value {
    match typed.and_then(Value::as_object) {
        Some(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), to_plain(v))).collect()),
        None => Value::Object(Map::new()),
    }
}

/// Plain `{name: value}` merged onto the typed table `original` (see the module policy).
pub fn merge_headers(original: Option<&Value>, plain: &Value) -> Result<Value, EditError> {
    let obj = plain.as_object().ok_or_else(|| invalid("headers must be a JSON object of name: value"))?;
    let before = original.and_then(Value::as_object);
    let mut out = Map::new();
    for (k, v) in obj {
        // A name the message came with is sent back as it came; a new one was typed here.
        if before.is_none_or(|b| !b.contains_key(k)) {
            headers::check_name(k).map_err(|e| invalid(format!("header name \"{}\": {e}", k.escape_debug())))?;
        }
        let merged = merge_value(before.and_then(|b| b.get(k)), v)
            .map_err(|e| invalid(format!("header `{}`: {e}", k.escape_debug())))?;
        out.insert(k.clone(), merged);
    }
    Ok(Value::Object(out))
}

fn merge_value(before: Option<&Value>, plain: &Value) -> Result<Value, EditError> {
    let Some(b) = before else { return typed_from_plain(plain) };
    if to_plain(b) == *plain {
        return Ok(b.clone());
    }
    let mut typed = if b.get("t").and_then(Value::as_str) == Some("table") && plain.is_object() {
        // A table edited key by key keeps the types of the keys left alone.
        json!({"t": "table", "v": merge_headers(b.get("v"), plain)?})
    } else {
        typed_from_plain(plain)?
    };
    // A key PostgreSQL cannot hold is stored under a placeholder, with the real key beside it.
    if let (Some(k), Value::Object(o)) = (b.get("k"), &mut typed) {
        o.insert("k".into(), k.clone());
    }
    Ok(typed)
}

fn typed_from_plain(v: &Value) -> Result<Value, EditError> {
    Ok(match v {
        Value::Null => json!({"t": "void"}),
        Value::Bool(b) => json!({"t": "bool", "v": b}),
        Value::Number(n) if n.is_i64() => json!({"t": "i64", "v": n}),
        Value::Number(n) if n.is_u64() => return Err(invalid(format!("{n} does not fit a signed 64-bit integer"))),
        Value::Number(n) => json!({"t": "f64", "v": n}),
        // jsonb cannot hold NUL: such a string is kept as hex, as the ingester does.
        Value::String(s) if s.contains('\0') => json!({"t": "longstr", "hex": hex::encode(s.as_bytes())}),
        Value::String(s) => json!({"t": "longstr", "v": s}),
        Value::Array(a) => json!({"t": "array", "v": a.iter().map(typed_from_plain).collect::<Result<Vec<_>, _>>()?}),
        Value::Object(_) => json!({"t": "table", "v": merge_headers(None, v)?}),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn original() -> Value {
        json!({
            "x-attempt": {"t": "i32", "v": 3},
            "x-tenant": {"t": "shortstr", "v": "acme"},
            "x-raw": {"t": "longstr", "hex": "ff00"},
            "x-ctx": {"t": "table", "v": {"shard": {"t": "u16", "v": 7}, "zone": {"t": "longstr", "v": "eu"}}},
        })
    }

    #[test]
    fn unchanged_values_keep_their_amqp_types() {
        let plain = table_to_plain(Some(&original()));
        assert_eq!(plain["x-raw"], json!("0xff00"));
        assert_eq!(merge_headers(Some(&original()), &plain).unwrap(), original());
    }

    #[test]
    fn changed_and_new_values_are_typed_from_their_json() {
        let plain = json!({
            "x-attempt": 4, "x-tenant": "acme", "x-new": "yes", "x-ratio": 0.5, "x-flag": true, "x-none": null,
            "x-ctx": {"shard": 7, "zone": "us"}, "x-list": [1, "a"],
        });
        let typed = merge_headers(Some(&original()), &plain).unwrap();
        assert_eq!(typed["x-attempt"], json!({"t": "i64", "v": 4}));
        assert_eq!(typed["x-tenant"], json!({"t": "shortstr", "v": "acme"}));
        assert_eq!(typed["x-new"], json!({"t": "longstr", "v": "yes"}));
        assert_eq!(typed["x-ratio"], json!({"t": "f64", "v": 0.5}));
        assert_eq!(typed["x-flag"], json!({"t": "bool", "v": true}));
        assert_eq!(typed["x-none"], json!({"t": "void"}));
        assert_eq!(typed["x-ctx"]["v"]["shard"], json!({"t": "u16", "v": 7}), "an untouched nested key keeps u16");
        assert_eq!(typed["x-ctx"]["v"]["zone"], json!({"t": "longstr", "v": "us"}));
        assert_eq!(typed["x-list"], json!({"t": "array", "v": [{"t": "i64", "v": 1}, {"t": "longstr", "v": "a"}]}));
        assert!(typed.get("x-raw").is_none(), "a key left out is removed");
        assert!(headers::table_from_json(&typed).is_ok());
    }

    #[test]
    fn headers_that_are_not_an_object_or_do_not_fit_are_refused() {
        assert!(matches!(merge_headers(None, &json!([1])), Err(EditError::Invalid(_))));
        assert!(matches!(merge_headers(None, &json!("x")), Err(EditError::Invalid(_))));
        assert!(matches!(merge_headers(None, &json!({"n": u64::MAX})), Err(EditError::Invalid(_))));
        assert!(matches!(merge_headers(None, &json!({"a\u{0}b": 1})), Err(EditError::Invalid(_))));
        assert!(matches!(merge_headers(None, &json!({"": 1})), Err(EditError::Invalid(_))));
        let nul = merge_headers(None, &json!({"s": "a\u{0}b"})).unwrap();
        assert_eq!(nul["s"], json!({"t": "longstr", "hex": "610062"}));
    }

    #[test]
    fn a_new_header_name_with_a_control_character_is_refused_saying_which_and_where() {
        for (plain, why) in [
            (
                json!({"x-new\nline": 1}),
                "header name \"x-new\\nline\": a header name cannot hold control or invisible characters: U+000A at character 6",
            ),
            (json!({"x-ctx": {"zo\tne": "eu"}}), "U+0009 at character 3"),
            (json!({"x-new": {"\u{202e}evil": 1}}), "U+202E at character 1"),
            (json!({"x".repeat(256): 1}), "at most 255 bytes"),
        ] {
            match merge_headers(Some(&original()), &plain) {
                Err(EditError::Invalid(m)) => assert!(m.contains(why), "{m}"),
                other => panic!("{plain}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_header_name_the_message_came_with_is_kept_even_if_it_could_not_be_typed() {
        let received = json!({"x-odd\u{1}name": {"t": "longstr", "v": "kept"}});
        let plain = table_to_plain(Some(&received));
        assert_eq!(merge_headers(Some(&received), &plain).unwrap(), received);
    }

    #[test]
    fn applying_an_edit_swaps_body_and_headers_and_names_the_edit() {
        let mut dl = test_dead_letter();
        let edit = Edit {
            id: 42,
            dead_letter_id: dl.id,
            body: b"new".to_vec(),
            headers: Some(json!({"a": {"t": "i8", "v": 1}})),
            edited_by: "omar".into(),
            edited_at: Utc::now(),
            note: None,
        };
        edit.apply_to(&mut dl);
        assert_eq!((dl.body.as_slice(), dl.body_size), (&b"new"[..], 3));
        assert_eq!(dl.headers, Some(json!({"a": {"t": "i8", "v": 1}, EDITED_HEADER: {"t": "longstr", "v": "42"}})));
        assert_eq!(dl.message_id.as_deref(), Some("m-1"));
    }

    fn test_dead_letter() -> DeadLetter {
        DeadLetter::sample()
    }
}
