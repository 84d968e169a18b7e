//! Why a failure group's messages died when no error header says: the newest awaiting ones
//! broken down by what their bodies are (JSON, text, binary, compressed), by a declared JSON
//! content type the body does not match, by a schema-version header, and by the body shape
//! the list filters on (a JSON object's keys), each with an example.
//!
//! Policy: at most [`SAMPLE`] messages, the group's newest awaiting ones, and at most
//! [`HEAD`] bytes of each are read, so the group page costs the same for a group of fifty
//! or of five million. A body longer than that is JSON when its head opens like JSON (it is
//! not parsed whole). Classification is pure and unit-tested.

use std::collections::HashMap;

use serde_json::Value;
use sqlx::PgExecutor;
pub use types::{BodyShape, Breakdown};

/// Messages read per group page.
pub const SAMPLE: i64 = 500;
/// Bytes read of each body.
pub const HEAD: i32 = 64 * 1024;

/// Header names (compared case-insensitively) that carry a message's schema version.
const VERSION_HEADERS: [&str; 8] = [
    "schema-version",
    "schema_version",
    "schemaversion",
    "x-schema-version",
    "message-version",
    "x-message-version",
    "version",
    "x-version",
];

/// What the body is. `whole` is false when `head` is only the first [`HEAD`] bytes.
pub fn shape(head: &[u8], whole: bool, content_encoding: Option<&str>) -> BodyShape {
    if compressed(head, content_encoding) {
        return BodyShape::Compressed;
    }
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        // A head cut in the middle of a character is still text.
        Err(e) if !whole && e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or(""),
        Err(_) => return BodyShape::Binary,
    };
    if text.chars().any(|c| c.is_control() && !c.is_whitespace()) {
        return BodyShape::Binary;
    }
    let t = text.trim_start();
    let opens_like_json = t.starts_with('{') || t.starts_with('[');
    let json = if whole { opens_like_json && serde_json::from_str::<Value>(text).is_ok() } else { opens_like_json };
    if json { BodyShape::Json } else { BodyShape::Text }
}

/// Whether a `content_encoding` says the body is compressed, or its first bytes do.
pub fn compressed(head: &[u8], content_encoding: Option<&str>) -> bool {
    let encoded = content_encoding
        .map(|e| e.trim().to_ascii_lowercase())
        .is_some_and(|e| ["gzip", "x-gzip", "deflate", "br", "zstd", "compress", "bzip2", "xz"].contains(&e.as_str()));
    encoded || compressed_magic(head)
}

fn compressed_magic(b: &[u8]) -> bool {
    b.starts_with(&[0x1f, 0x8b]) // gzip
        || b.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) // zstd
        || b.starts_with(b"BZh") && b.get(3).is_some_and(u8::is_ascii_digit) // bzip2
        || b.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) // xz
        || (b.len() >= 2 && b[0] == 0x78 && [0x01, 0x9c, 0xda].contains(&b[1])) // zlib
}

/// The schema version a message's typed headers (see `headers`) carry, if any.
pub fn schema_version(headers: Option<&Value>) -> Option<String> {
    let table = headers?.as_object()?;
    let (_, typed) = table.iter().find(|(k, _)| VERSION_HEADERS.contains(&k.to_ascii_lowercase().as_str()))?;
    match typed.get("v")? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// One message as the breakdown reads it.
#[derive(Debug, Clone)]
pub struct Sampled {
    pub id: i64,
    /// The shape label stored at ingest (`kind::body_shape`).
    pub body_shape: Option<String>,
    pub head: Vec<u8>,
    pub body_size: i32,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub headers: Option<Value>,
}

/// Counts the sample; shapes and versions largest first (then by name, for a stable page).
pub fn tally(sample: &[Sampled]) -> Breakdown {
    let mut shapes: HashMap<BodyShape, i64> = HashMap::new();
    let mut versions: HashMap<Option<String>, i64> = HashMap::new();
    // The sample is newest first: the first id seen of a shape is its newest example.
    let mut key_sets: HashMap<&str, (i64, i64)> = HashMap::new();
    let mut b = Breakdown { sampled: sample.len() as i64, ..Breakdown::default() };
    for m in sample {
        if let Some(label) = m.body_shape.as_deref() {
            key_sets.entry(label).or_insert((0, m.id)).0 += 1;
        }
        let whole = i64::from(m.body_size) <= m.head.len() as i64;
        let s = shape(&m.head, whole, m.content_encoding.as_deref());
        *shapes.entry(s).or_default() += 1;
        match m.content_type.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
            None => b.no_content_type += 1,
            Some(ct) if ct.to_ascii_lowercase().contains("json") && s != BodyShape::Json => {
                b.declared_json_not_json += 1
            }
            Some(_) => {}
        }
        *versions.entry(schema_version(m.headers.as_ref())).or_default() += 1;
    }
    b.shapes = shapes.into_iter().collect();
    b.shapes.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.as_str().cmp(y.0.as_str())));
    b.key_sets = key_sets.into_iter().map(|(label, (n, example))| (label.to_string(), n, example)).collect();
    b.key_sets.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    b.schema_versions = versions.into_iter().collect();
    // Largest first; on a tie a named version before "none", then by name.
    b.schema_versions.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.is_none().cmp(&y.0.is_none())).then(x.0.cmp(&y.0)));
    // A sample where no message has a version header says nothing about versions.
    if b.schema_versions.iter().all(|(v, _)| v.is_none()) {
        b.schema_versions.clear();
    }
    b
}

/// The breakdown of a group's newest awaiting messages.
pub async fn of_group(db: impl PgExecutor<'_>, group_id: i64) -> Result<Breakdown, sqlx::Error> {
    let sample = sqlx::query_as!(
        Sampled,
        r#"SELECT id, body_shape, substring(body FROM 1 FOR $2) AS "head!", body_size, content_type, content_encoding,
                  headers
           FROM dead_letters WHERE group_id = $1 AND status = 'awaiting'
           ORDER BY ingested_at DESC, id DESC LIMIT $3"#,
        group_id,
        HEAD,
        SAMPLE
    )
    .fetch_all(db)
    .await?;
    Ok(tally(&sample))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn msg(body: &[u8], content_type: Option<&str>, headers: Option<Value>) -> Sampled {
        Sampled {
            id: 0,
            body_shape: None,
            head: body.to_vec(),
            body_size: body.len() as i32,
            content_type: content_type.map(String::from),
            content_encoding: None,
            headers,
        }
    }

    #[test]
    fn bodies_are_told_apart_by_what_they_are() {
        assert_eq!(shape(br#" {"order": 1}"#, true, None), BodyShape::Json);
        assert_eq!(shape(br#"{"order": 1"#, true, None), BodyShape::Text, "broken JSON is text");
        assert_eq!(shape(b"order 1 failed", true, None), BodyShape::Text);
        assert_eq!(shape(&[0x1f, 0x8b, 8, 0, 0], true, None), BodyShape::Compressed);
        assert_eq!(shape(b"{\"a\":1}", true, Some("gzip")), BodyShape::Compressed);
        assert_eq!(shape(&[0x00, 0xff, 0x10], true, None), BodyShape::Binary);
        assert_eq!(shape(b"text with a \x07 bell", true, None), BodyShape::Binary);
        assert_eq!(shape(b"x^ looks like zlib but is text", true, None), BodyShape::Text);
    }

    #[test]
    fn a_head_cut_mid_character_or_mid_json_keeps_its_shape() {
        let e_acute = "é".as_bytes();
        let mut head = b"caf".to_vec();
        head.push(e_acute[0]);
        assert_eq!(shape(&head, false, None), BodyShape::Text);
        assert_eq!(shape(&head, true, None), BodyShape::Binary, "a whole body that is not UTF-8");
        assert_eq!(shape(br#"{"items": [1, 2, "#, false, None), BodyShape::Json);
    }

    #[test]
    fn a_group_of_mixed_bodies_is_counted_by_shape_mismatch_and_version() {
        let v = |s: &str| Some(json!({"schema-version": {"t": "longstr", "v": s}}));
        let sample = vec![
            msg(br#"{"id": 1}"#, Some("application/json"), v("2")),
            msg(br#"{"id": 2}"#, Some("application/json"), v("2")),
            msg(b"plain words", Some("application/json; charset=utf-8"), v("1")),
            msg(&[0x1f, 0x8b, 1], None, None),
        ];
        let b = tally(&sample);
        assert_eq!(b.sampled, 4);
        assert_eq!(b.shapes, vec![(BodyShape::Json, 2), (BodyShape::Compressed, 1), (BodyShape::Text, 1)]);
        assert_eq!((b.declared_json_not_json, b.no_content_type), (1, 1));
        assert_eq!(b.schema_versions, vec![(Some("2".into()), 2), (Some("1".into()), 1), (None, 1)]);
        assert!(b.mixed());
    }

    #[test]
    fn a_uniform_group_is_not_mixed_and_says_nothing_of_versions_it_lacks() {
        let sample = vec![msg(b"{}", Some("application/json"), None), msg(b"[]", Some("application/json"), None)];
        let b = tally(&sample);
        assert_eq!(b.shapes, vec![(BodyShape::Json, 2)]);
        assert!(b.schema_versions.is_empty());
        assert!(!b.mixed());
        let numeric = json!({"Version": {"t": "i32", "v": 3}});
        assert_eq!(schema_version(Some(&numeric)).as_deref(), Some("3"));
    }

    #[test]
    fn key_sets_are_counted_with_their_newest_example_largest_first() {
        let keyed = |id: i64, label: Option<&str>| Sampled {
            id,
            body_shape: label.map(String::from),
            ..msg(b"{}", None, None)
        };
        // Newest first, as the query reads them.
        let sample = vec![keyed(9, Some("{a, b}")), keyed(8, Some("{c}")), keyed(7, Some("{a, b}")), keyed(6, None)];
        let b = tally(&sample);
        assert_eq!(b.key_sets, vec![("{a, b}".to_string(), 2, 9), ("{c}".to_string(), 1, 8)]);
    }
}
