//! An inserted `revenant.outbox` row, as the commit stream carries it, turned into the event
//! the relay publishes.
//!
//! Policy: the columns are found by name in the stream's own description of the table (its
//! relation message), so a column added or reordered later does not shift them. The values
//! come in PostgreSQL's text format: bytea as hex (`\x…`, the default `bytea_output`), jsonb as
//! JSON text, timestamptz as ISO. A row the relay cannot read is an error naming the column,
//! for the relay to fail that one event by id (it is in the table too), never a guess.

use chrono::{DateTime, Utc};

use super::pgoutput::{Relation, Value};
use crate::outbox::store::ClaimedRow;

/// Where each column the relay needs sits in the relation's tuples.
#[derive(Debug, Clone)]
pub struct Layout {
    pub relation: u32,
    id: usize,
    event_id: usize,
    event_type: usize,
    exchange: usize,
    routing_key: usize,
    payload: usize,
    content_type: usize,
    headers: usize,
    created_at: usize,
    /// The column that orders events (the aggregate id; by default the routing key).
    key: usize,
    /// False for a table whose rows the relay reads from the table (a mapped table: its
    /// mapping's expressions are SQL): only the id is read from the stream.
    full: bool,
}

impl Layout {
    /// The layout of `rel`, or the first column the relay needs that it lacks.
    pub fn of(rel: &Relation, key_column: &str) -> Result<Layout, String> {
        let at = |name: &str| {
            rel.columns
                .iter()
                .position(|c| c.name == name)
                .ok_or_else(|| format!("{}.{} has no column `{name}`", rel.namespace, rel.name))
        };
        Ok(Layout {
            relation: rel.id,
            id: at("id")?,
            event_id: at("event_id")?,
            event_type: at("event_type")?,
            exchange: at("exchange")?,
            routing_key: at("routing_key")?,
            payload: at("payload")?,
            content_type: at("content_type")?,
            headers: at("headers")?,
            created_at: at("created_at")?,
            key: at(key_column)?,
            full: true,
        })
    }

    /// The layout of a table of which only the id is read from the stream: `id` is the id
    /// column's name as SQL writes it (quoted).
    pub fn ids_only(rel: &Relation, id: &str) -> Result<Layout, String> {
        let at = rel
            .columns
            .iter()
            .position(|c| crate::sources::mapping::quote_ident(&c.name) == id)
            .ok_or_else(|| format!("{}.{} has no column {id}", rel.namespace, rel.name))?;
        Ok(Layout {
            relation: rel.id,
            id: at,
            event_id: at,
            event_type: at,
            exchange: at,
            routing_key: at,
            payload: at,
            content_type: at,
            headers: at,
            created_at: at,
            key: at,
            full: false,
        })
    }

    /// The row's id, whatever else is wrong with it (so a bad row can be failed by id).
    pub fn id(&self, tuple: &[Value<'_>]) -> Result<i64, String> {
        let v = text(tuple, self.id, "id")?;
        v.parse().map_err(|_| format!("column `id` is not an integer: {v:?}"))
    }

    /// The ordering key's value (`""` when null).
    pub fn key(&self, tuple: &[Value<'_>]) -> Result<String, String> {
        Ok(optional(tuple, self.key, "key")?.unwrap_or_default().to_string())
    }

    /// The event to publish.
    pub fn row(&self, tuple: &[Value<'_>]) -> Result<ClaimedRow, String> {
        if !self.full {
            return Err("its row is read from the table".into());
        }
        let created = text(tuple, self.created_at, "created_at")?;
        let created_at =
            timestamptz(created).ok_or_else(|| format!("column `created_at` is not a timestamp: {created:?}"))?;
        let headers = text(tuple, self.headers, "headers")?;
        Ok(ClaimedRow {
            id: self.id(tuple)?,
            event_id: text(tuple, self.event_id, "event_id")?.to_string(),
            event_type: text(tuple, self.event_type, "event_type")?.to_string(),
            exchange: text(tuple, self.exchange, "exchange")?.to_string(),
            routing_key: text(tuple, self.routing_key, "routing_key")?.to_string(),
            payload: bytea(text(tuple, self.payload, "payload")?)?,
            content_type: text(tuple, self.content_type, "content_type")?.to_string(),
            headers: serde_json::from_str(headers).map_err(|e| format!("column `headers` is not JSON: {e}"))?,
            created_at,
            attempts: 0,
            next_attempt_at: created_at,
        })
    }
}

fn optional<'a>(tuple: &[Value<'a>], at: usize, name: &str) -> Result<Option<&'a str>, String> {
    match tuple.get(at) {
        Some(Value::Text(b)) => std::str::from_utf8(b).map(Some).map_err(|_| format!("column `{name}` is not UTF-8")),
        Some(Value::Null) => Ok(None),
        Some(Value::Unchanged) => Err(format!("column `{name}` was not carried by the change")),
        None => Err(format!("the row has {} columns, `{name}` is column {}", tuple.len(), at + 1)),
    }
}

fn text<'a>(tuple: &[Value<'a>], at: usize, name: &str) -> Result<&'a str, String> {
    optional(tuple, at, name)?.ok_or_else(|| format!("column `{name}` is null"))
}

/// bytea in its hex text form.
fn bytea(s: &str) -> Result<Vec<u8>, String> {
    let hex = s.strip_prefix("\\x").ok_or("column `payload` is not in hex form (set bytea_output = hex)")?;
    hex::decode(hex).map_err(|e| format!("column `payload` is not valid hex: {e}"))
}

/// timestamptz as PostgreSQL writes it with DateStyle ISO: `2026-12-06 19:33:47.123456+00`
/// (the offset may carry minutes: `+05:30`).
fn timestamptz(s: &str) -> Option<DateTime<Utc>> {
    ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%d %H:%M:%S%.f%:z"]
        .iter()
        .find_map(|f| DateTime::parse_from_str(s, f).ok())
        .map(|d| d.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_bytea_and_nulls_read_as_postgresql_writes_them() {
        let t = timestamptz("2026-12-06 19:33:47.123456+00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-12-06T19:33:47.123456+00:00");
        assert_eq!(timestamptz("2026-12-06 19:33:47+05:30").unwrap().to_rfc3339(), "2026-12-06T14:03:47+00:00");
        assert!(timestamptz("yesterday").is_none());
        assert_eq!(bytea("\\x7b7d").unwrap(), b"{}");
        assert!(bytea("{}").unwrap_err().contains("hex form"));
        assert!(bytea("\\x7").unwrap_err().contains("not valid hex"));
        let tuple = [Value::Null, Value::Unchanged];
        assert!(text(&tuple, 0, "id").unwrap_err().contains("null"));
        assert!(text(&tuple, 1, "id").unwrap_err().contains("not carried"));
        assert!(text(&tuple, 5, "id").unwrap_err().contains("has 2 columns"));
    }
}
