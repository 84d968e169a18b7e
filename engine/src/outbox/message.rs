//! Turns a claimed outbox row into an AMQP publish: names, properties and headers.
//!
//! Policy: everything the broker could refuse for the row's own sake is checked here, before
//! publishing, and reported as a reason in words; such a row is "bad" and fails at once
//! instead of poisoning the channel or retrying forever. The event id becomes `message_id`
//! (consumers deduplicate on it), the event type becomes `type`, messages are persistent.

use lapin::{
    BasicProperties,
    types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString},
};
use serde_json::Value;

use super::store::{ClaimedRow, MAX_SHORT_STRING};

/// RabbitMQ's default `max_message_size` (128 MiB); a larger body closes the channel.
pub const MAX_PAYLOAD: usize = 128 * 1024 * 1024;
/// Nesting deeper than this in headers is refused rather than recursed into.
const MAX_DEPTH: usize = 16;

/// A row ready to hand to `basic_publish`.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub exchange: ShortString,
    pub routing_key: ShortString,
    pub properties: BasicProperties,
}

fn short(field: &str, v: &str) -> Result<ShortString, String> {
    ShortString::try_new(v).map_err(|_| format!("{field} is {} bytes; AMQP allows {MAX_SHORT_STRING}", v.len()))
}

/// Builds the publish for `row`, or says why the row can never be published as it stands.
pub fn prepare(row: &ClaimedRow) -> Result<Prepared, String> {
    let exchange = short("exchange", &row.exchange)?;
    let routing_key = short("routing key", &row.routing_key)?;
    let content_type = short("content type", &row.content_type)?;
    let kind = short("event type", &row.event_type)?;
    if row.event_id.trim().is_empty() {
        return Err("the event id is empty: consumers deduplicate on it".into());
    }
    let message_id = short("event id", &row.event_id)?;
    if row.payload.len() > MAX_PAYLOAD {
        return Err(format!("payload is {} bytes; the broker accepts at most {MAX_PAYLOAD}", row.payload.len()));
    }
    let headers = headers_table(&row.headers)?;
    // Seconds since the epoch, as AMQP timestamps are; a pre-1970 clock would be a bug elsewhere.
    let timestamp = row.created_at.timestamp().max(0) as u64;
    let properties = BasicProperties::default()
        .with_message_id(message_id)
        .with_type(kind)
        .with_content_type(content_type)
        .with_delivery_mode(2)
        .with_timestamp(timestamp)
        .with_headers(headers);
    Ok(Prepared { exchange, routing_key, properties })
}

/// The row's `headers` JSON object as an AMQP field table.
pub fn headers_table(headers: &Value) -> Result<FieldTable, String> {
    match headers {
        Value::Object(_) => match to_amqp(headers, "headers", 0)? {
            AMQPValue::FieldTable(t) => Ok(t),
            _ => Err("headers must be a JSON object".into()),
        },
        other => Err(format!("headers must be a JSON object, not {}", json_kind(other))),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn to_amqp(v: &Value, path: &str, depth: usize) -> Result<AMQPValue, String> {
    if depth > MAX_DEPTH {
        return Err(format!("header {path} nests deeper than {MAX_DEPTH} levels"));
    }
    Ok(match v {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_bytes())),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                AMQPValue::LongLongInt(i)
            } else if n.is_f64() {
                AMQPValue::Double(n.as_f64().unwrap_or_default())
            } else {
                // A u64 above i64::MAX: AMQP 0-9-1 as RabbitMQ speaks it has no unsigned 64-bit
                // field, and a double would silently change the value.
                return Err(format!("header {path} is {n}, which does not fit a signed 64-bit integer"));
            }
        }
        Value::Array(items) => {
            let mut arr = FieldArray::default();
            for (i, item) in items.iter().enumerate() {
                arr.push(to_amqp(item, &format!("{path}[{i}]"), depth + 1)?);
            }
            AMQPValue::FieldArray(arr)
        }
        Value::Object(map) => {
            let mut table = FieldTable::default();
            for (k, item) in map {
                let key = ShortString::try_new(k.as_str()).map_err(|_| {
                    format!("header name in {path} is {} bytes; AMQP allows {MAX_SHORT_STRING}", k.len())
                })?;
                table.insert(key, to_amqp(item, &format!("{path}.{k}"), depth + 1)?);
            }
            AMQPValue::FieldTable(table)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn get<'a>(t: &'a FieldTable, k: &str) -> &'a AMQPValue {
        t.inner().get(k).unwrap()
    }

    #[test]
    fn each_json_type_maps_to_its_amqp_field_type() {
        let t = headers_table(&json!({
            "s": "acme", "i": -42, "f": 0.5, "b": true, "n": null,
            "o": {"inner": "x"}, "a": [1, "two"]
        }))
        .unwrap();
        assert_eq!(get(&t, "s"), &AMQPValue::LongString("acme".into()));
        assert_eq!(get(&t, "i"), &AMQPValue::LongLongInt(-42));
        assert_eq!(get(&t, "f"), &AMQPValue::Double(0.5));
        assert_eq!(get(&t, "b"), &AMQPValue::Boolean(true));
        assert_eq!(get(&t, "n"), &AMQPValue::Void);
        let AMQPValue::FieldTable(o) = get(&t, "o") else { panic!("nested object is not a table") };
        assert_eq!(get(o, "inner"), &AMQPValue::LongString("x".into()));
        let AMQPValue::FieldArray(a) = get(&t, "a") else { panic!("array is not a field array") };
        assert_eq!(a.as_slice(), &[AMQPValue::LongLongInt(1), AMQPValue::LongString("two".into())]);
    }

    #[test]
    fn headers_that_are_not_an_object_are_refused_with_a_reason() {
        let e = headers_table(&json!(["a"])).unwrap_err();
        assert_eq!(e, "headers must be a JSON object, not an array");
    }

    #[test]
    fn an_integer_beyond_i64_is_refused_rather_than_rounded() {
        let e = headers_table(&json!({"big": u64::MAX})).unwrap_err();
        assert!(e.contains("headers.big"), "{e}");
    }

    #[test]
    fn a_header_name_longer_than_255_bytes_is_refused() {
        let mut m = serde_json::Map::new();
        m.insert("k".repeat(256), json!(1));
        let e = headers_table(&Value::Object(m)).unwrap_err();
        assert!(e.contains("256 bytes"), "{e}");
    }
}
