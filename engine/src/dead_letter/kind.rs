//! What kind of message a dead letter is, so that one failure group never holds two kinds:
//! its AMQP `type` property and the shape of its body.
//!
//! Policy:
//! - the **body shape** is one label: `empty`, `compressed` (a `content_encoding` or magic bytes
//!   that say so), `binary` (not UTF-8, or control characters), a JSON object's sorted
//!   top-level keys `{a, b, c}` (at most [`MAX_KEYS`], then `…`), `[…]` for a JSON array, `json`
//!   for JSON too large to read keys from ([`MAX_PARSE`]), else `text`. Every dead letter keeps
//!   it (`dead_letters.body_shape`), for the list's filter;
//! - the **group key** extends the failure fingerprint (queue, reason, error) with the `type`
//!   when present and, when no error is known (no error type or message), the body shape:
//!   340 `processar_pagamento` and 25 `notificar_cliente` rejections without an error header
//!   are two groups, so no "Replay N" button re-sends the other kind. A message with neither
//!   keeps its fingerprint as it was;
//! - migration 0024 computes the same labels and keys in SQL for the rows stored before
//!   (`revenant_body_shape`, `revenant_kind_fingerprint`); `engine/tests/it/group_kinds.rs`
//!   checks both agree.

use sha2::{Digest, Sha256};

use super::breakdown;

/// Keys named in a JSON object's label, at most.
pub const MAX_KEYS: usize = 24;
/// Bodies larger than this are not parsed for their keys.
pub const MAX_PARSE: usize = 1024 * 1024;

/// The body's shape label (see the module policy).
pub fn body_shape(body: &[u8], content_encoding: Option<&str>) -> String {
    if body.is_empty() {
        return "empty".into();
    }
    if breakdown::compressed(body, content_encoding) {
        return "compressed".into();
    }
    let Ok(text) = std::str::from_utf8(body) else {
        return "binary".into();
    };
    if text.chars().any(|c| c.is_control() && !c.is_whitespace()) {
        return "binary".into();
    }
    let opens = text.trim_start().as_bytes().first().copied();
    if !matches!(opens, Some(b'{' | b'[')) {
        return "text".into();
    }
    if body.len() > MAX_PARSE {
        return "json".into();
    }
    use serde::de::IgnoredAny;
    if opens == Some(b'{') {
        match serde_json::from_str::<std::collections::BTreeMap<String, IgnoredAny>>(text) {
            Ok(map) => {
                let mut keys: Vec<&str> = map.keys().map(String::as_str).take(MAX_KEYS).collect();
                if map.len() > MAX_KEYS {
                    keys.push("…");
                }
                format!("{{{}}}", keys.join(", "))
            }
            Err(_) => "text".into(),
        }
    } else if serde_json::from_str::<IgnoredAny>(text).is_ok() {
        "[…]".into()
    } else {
        "text".into()
    }
}

/// The group key: `base` (the failure fingerprint) extended with the message type and, when
/// given, the body shape; `base` itself when both are absent.
pub fn fingerprint(base: String, msg_type: Option<&str>, shape: Option<&str>) -> String {
    if msg_type.is_none() && shape.is_none() {
        return base;
    }
    let mut h = Sha256::new();
    h.update(b"kind\x01");
    h.update(base.as_bytes());
    super::fingerprint::hash_parts(&mut h, &[msg_type, shape]);
    hex::encode(h.finalize())
}

/// Whether the body shape is part of the group key: only when no error is known.
pub fn shape_counts(error_type: Option<&str>, error_message: Option<&str>) -> bool {
    error_type.is_none() && error_message.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_name_what_the_body_is() {
        assert_eq!(
            body_shape(br#"{"valor":1,"metodo":"pix","moeda":"BRL","pedido_id":7}"#, None),
            "{metodo, moeda, pedido_id, valor}"
        );
        assert_eq!(body_shape(br#" {"b":{"x":1},"a":[1]} "#, None), "{a, b}");
        assert_eq!(body_shape(b"{}", None), "{}");
        assert_eq!(body_shape(b"[1,2]", None), "[…]");
        assert_eq!(body_shape(b"{not json", None), "text");
        assert_eq!(body_shape(b"hello", None), "text");
        assert_eq!(body_shape(b"", None), "empty");
        assert_eq!(body_shape(&[0xff, 0xfe, 0x00], None), "binary");
        assert_eq!(body_shape(b"a\x01b", None), "binary");
        assert_eq!(body_shape(&[0x1f, 0x8b, 8, 0], None), "compressed");
        assert_eq!(body_shape(b"{}", Some("gzip")), "compressed");
        let many: String = format!("{{{}}}", (0..30).map(|i| format!("\"k{i:02}\":0")).collect::<Vec<_>>().join(","));
        let label = body_shape(many.as_bytes(), None);
        assert!(label.starts_with("{k00, k01,") && label.ends_with("k23, …}"), "{label}");
    }

    #[test]
    fn the_kind_separates_groups_and_leaves_plain_ones_as_they_were() {
        let base = "f".repeat(64);
        assert_eq!(fingerprint(base.clone(), None, None), base);
        let a = fingerprint(base.clone(), Some("processar_pagamento"), Some("{metodo, valor}"));
        let b = fingerprint(base.clone(), Some("notificar_cliente"), Some("{canal, template}"));
        assert_ne!(a, b);
        assert_ne!(fingerprint(base.clone(), Some("x"), None), fingerprint(base.clone(), None, Some("x")));
        assert_eq!(a, fingerprint(base, Some("processar_pagamento"), Some("{metodo, valor}")));
        assert!(shape_counts(None, None) && !shape_counts(Some("E"), None) && !shape_counts(None, Some("m")));
    }
}
