//! A list filter in words, as the replay preview and a plan's page restate the set they froze.
//!
//! Policy: every field the filter holds is said, in the list's own terms (DLQ, origin, error
//! contains …), in a fixed order; a body search is shown as text when it is text and as hex
//! otherwise, never as a byte array. Nothing is left out, so two sets that differ read apart.

use super::store::ListFilter;

impl ListFilter {
    /// `DLQ orders.dlq · origin orders · error contains “timeout”`, or `every dead letter`.
    pub fn words(&self) -> String {
        let mut parts = Vec::new();
        if let Some(v) = &self.queue {
            parts.push(format!("DLQ {v}"));
        }
        if let Some(v) = &self.origin {
            parts.push(format!("origin {v}"));
        }
        if let Some(v) = &self.msg_type {
            parts.push(format!("type {v}"));
        }
        if let Some(v) = &self.body_shape {
            parts.push(format!("shape {v}"));
        }
        if let Some(v) = &self.reason {
            parts.push(format!("reason {v}"));
        }
        if let Some(v) = self.group_id {
            parts.push(format!("failure group #{v}"));
        }
        if let Some(v) = self.status {
            parts.push(format!("status {}", v.as_str()));
        }
        if let Some(v) = &self.error_text {
            parts.push(format!("error contains “{v}”"));
        }
        if let Some(v) = &self.body_contains {
            match std::str::from_utf8(v) {
                Ok(text) if !text.contains('\0') => parts.push(format!("body contains “{text}”")),
                _ => parts.push(format!("body contains the bytes {}", hex(v))),
            }
        }
        if let Some(v) = &self.message_id {
            parts.push(format!("message id {v}"));
        }
        if let Some(v) = self.newer_than {
            parts.push(format!("stored since {}", v.format("%Y-%m-%d %H:%M UTC")));
        }
        if let Some(v) = self.older_than {
            parts.push(format!("stored before {}", v.format("%Y-%m-%d %H:%M UTC")));
        }
        if parts.is_empty() { "every dead letter".into() } else { parts.join(" · ") }
    }
}

impl ListFilter {
    /// A filter as the audit log stored it, when it is a list filter: a JSON object naming no
    /// field a `ListFilter` lacks (so a by-id selection or another kind of filter is not read
    /// as one, and shown as stored instead).
    pub fn from_stored(v: &serde_json::Value) -> Option<ListFilter> {
        let known = serde_json::to_value(ListFilter::default()).ok()?;
        let (known, stored) = (known.as_object()?, v.as_object()?);
        if stored.keys().any(|k| !known.contains_key(k)) {
            return None;
        }
        serde_json::from_value(v.clone()).ok()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dead_letter::store::Status;

    #[test]
    fn every_field_is_said_in_the_lists_terms_and_a_body_as_text_or_hex() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-07T09:30:00Z").unwrap().to_utc();
        let f = ListFilter {
            queue: Some("pagamentos.dlq".into()),
            origin: Some("pagamentos.processar".into()),
            msg_type: Some("processar_pagamento".into()),
            body_shape: Some("{pedido_id, valor}".into()),
            reason: Some("rejected".into()),
            group_id: Some(12),
            status: Some(Status::Awaiting),
            error_text: Some("IntegrityError".into()),
            body_contains: Some(b"pedido".to_vec()),
            message_id: Some("m-1".into()),
            newer_than: Some(at),
            older_than: None,
        };
        assert_eq!(
            f.words(),
            "DLQ pagamentos.dlq · origin pagamentos.processar · type processar_pagamento · shape {pedido_id, valor} \
             · reason rejected · failure group #12 · status awaiting \
             · error contains “IntegrityError” · body contains “pedido” · message id m-1 · stored since 2026-12-07 09:30 UTC"
        );
        let bytes = ListFilter { body_contains: Some(vec![0x00, 0xff]), ..Default::default() };
        assert_eq!(bytes.words(), "body contains the bytes 00ff");
        assert_eq!(ListFilter::default().words(), "every dead letter");
    }

    #[test]
    fn a_stored_filter_is_read_back_only_when_it_is_a_list_filter() {
        let stored =
            serde_json::json!({"queue": "orders.dlq", "body_contains": {"text": "pedido"}, "status": "awaiting"});
        let f = ListFilter::from_stored(&stored).unwrap();
        assert_eq!(f.words(), "DLQ orders.dlq · status awaiting · body contains “pedido”");
        assert!(ListFilter::from_stored(&serde_json::json!({"ids": [1, 2]})).is_none());
        assert!(ListFilter::from_stored(&serde_json::json!({"source": "orders", "status": null})).is_none());
        assert!(ListFilter::from_stored(&serde_json::json!("text")).is_none());
    }
}
