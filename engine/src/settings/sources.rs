//! The start-up check of `[[outbox.sources]]` that needs no database: names, required keys,
//! keys that exclude each other. The columns themselves are checked against the live table
//! when the sources open (`sources::mapping`).

use super::{MappedOutbox, SettingsError};

fn invalid(source: &str, reason: impl std::fmt::Display) -> SettingsError {
    SettingsError::Invalid { key: "outbox.sources", env: "-", reason: format!("source `{source}`: {reason}") }
}

pub(super) fn validate(sources: &[MappedOutbox]) -> Result<(), SettingsError> {
    let mut names = std::collections::HashSet::new();
    for m in sources {
        if m.name.trim().is_empty() {
            return Err(SettingsError::Invalid {
                key: "outbox.sources.name",
                env: "-",
                reason: "every source needs a name".into(),
            });
        }
        if m.name == crate::sources::NATIVE || !names.insert(m.name.clone()) {
            return Err(SettingsError::Invalid {
                key: "outbox.sources.name",
                env: "-",
                reason: format!("source name `{}` is reserved or used twice", m.name),
            });
        }
        if let Some(url) = &m.database_url
            && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            return Err(invalid(&m.name, "`database_url` must start with postgres:// or postgresql://"));
        }
        if m.native {
            validate_native(m)?;
        } else {
            validate_mapped(m)?;
        }
        if m.exchange.is_some() && m.exchange_column.is_some() {
            return Err(invalid(&m.name, "set `exchange` or `exchange_column`, not both"));
        }
        if let Some(e) = &m.exchange
            && e.len() > crate::outbox::store::MAX_SHORT_STRING
        {
            return Err(invalid(&m.name, "`exchange` is longer than AMQP's 255 bytes"));
        }
        if let Some(ct) = &m.content_type
            && (ct.trim().is_empty() || ct.len() > crate::outbox::store::MAX_SHORT_STRING)
        {
            return Err(invalid(&m.name, "`content_type` must be 1 to 255 bytes"));
        }
        if !(10..=60_000).contains(&m.poll_ms) {
            return Err(invalid(&m.name, format!("`poll_ms` = {} is outside 10..=60000", m.poll_ms)));
        }
        match super::capture::parse(m.capture.as_deref(), m.order_key.as_deref(), m.after_publish.as_deref()) {
            Err(reason) => return Err(invalid(&m.name, reason)),
            Ok(super::Capture::Logical { delete: true, .. }) if !m.native => {
                return Err(invalid(
                    &m.name,
                    "`after_publish = \"delete\"` needs `native = true`: a mapped table is the service's, and Revenant only marks its rows",
                ));
            }
            Ok(super::Capture::Logical { .. }) if !m.relay => {
                return Err(invalid(&m.name, "`capture` applies to a relayed source (`relay = true`)"));
            }
            Ok(_) => {}
        }
        if m.stuck_after_secs < 1 {
            return Err(invalid(&m.name, "`stuck_after_secs` must be at least 1"));
        }
    }
    Ok(())
}

fn validate_native(m: &MappedOutbox) -> Result<(), SettingsError> {
    if m.database_url.is_none() {
        return Err(invalid(
            &m.name,
            "`native = true` needs `database_url` (Revenant's own outbox is already the source `revenant`)",
        ));
    }
    let mapped_keys = [
        ("table", !m.table.is_empty()),
        ("id_column", !m.id_column.is_empty()),
        ("event_id_column", !m.event_id_column.is_empty()),
        ("type_column", !m.type_column.is_empty()),
        ("routing_key_column", !m.routing_key_column.is_empty()),
        ("payload_column", !m.payload_column.is_empty()),
        ("created_at_column", !m.created_at_column.is_empty()),
        ("exchange", m.exchange.is_some()),
        ("exchange_column", m.exchange_column.is_some()),
        ("headers_column", m.headers_column.is_some()),
        ("content_type", m.content_type.is_some()),
        ("published_flag_column", m.published_flag_column.is_some()),
        ("published_at_column", m.published_at_column.is_some()),
        ("attempts_column", m.attempts_column.is_some()),
        ("last_error_column", m.last_error_column.is_some()),
    ];
    if let Some((key, _)) = mapped_keys.iter().find(|(_, set)| *set) {
        return Err(invalid(&m.name, format!("`{key}` does not apply to `native = true` (it uses revenant.outbox)")));
    }
    Ok(())
}

fn validate_mapped(m: &MappedOutbox) -> Result<(), SettingsError> {
    let required = [
        ("table", &m.table),
        ("id_column", &m.id_column),
        ("event_id_column", &m.event_id_column),
        ("type_column", &m.type_column),
        ("routing_key_column", &m.routing_key_column),
        ("payload_column", &m.payload_column),
        ("created_at_column", &m.created_at_column),
    ];
    if let Some((key, _)) = required.iter().find(|(_, v)| v.trim().is_empty()) {
        return Err(invalid(&m.name, format!("`{key}` is required (or set `native = true`)")));
    }
    if m.published_flag_column.is_none() && m.published_at_column.is_none() {
        return Err(invalid(&m.name, "needs published_flag_column or published_at_column"));
    }
    Ok(())
}
