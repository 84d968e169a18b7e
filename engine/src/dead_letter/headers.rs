//! AMQP header tables ⇄ typed JSON, losslessly in both directions.
//!
//! Policy: every value keeps its AMQP type (`{"t":"i32","v":7}`), because a replay must
//! publish the very same headers, and consumers may switch on a header's type. Whatever JSON
//! or PostgreSQL's `jsonb` cannot hold exactly is encoded so it can: bytes and strings that
//! are not UTF-8 (or hold NUL, which `jsonb` refuses) as hex, non-finite floats and `-0` as
//! strings, and table keys holding NUL under a placeholder key with the real key in `"k"`.

// lapin::types is this crate; named directly so the fuzz targets (fuzz/) build this file alone.
use amq_protocol_types::{AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable, LongString, ShortString};
use serde_json::{Map, Value, json};

mod name;
pub use name::{MAX_NAME_BYTES, NameError, check_name};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HeaderError {
    #[error("header JSON is not a typed value: {0}")]
    Malformed(String),
    #[error("unknown header type `{0}`")]
    UnknownType(String),
    #[error("header value out of range for {0}")]
    OutOfRange(&'static str),
}

/// The typed JSON object for a whole header table.
pub fn table_to_json(table: &FieldTable) -> Value {
    let mut map = Map::new();
    for (k, v) in table.inner() {
        let mut typed = value_to_json(v);
        let key = k.as_str();
        // jsonb cannot store NUL in a key: keep the real key beside the value. A key that looks
        // like such a placeholder is kept so too, or the two would share one JSON key.
        if key.contains('\0') || key.starts_with("\\x") {
            if let Value::Object(o) = &mut typed {
                o.insert("k".into(), json!(hex::encode(key.as_bytes())));
            }
            map.insert(format!("\\x{}", hex::encode(key.as_bytes())), typed);
        } else {
            map.insert(key.to_string(), typed);
        }
    }
    Value::Object(map)
}

/// Bytes as `"v"` when they are UTF-8 that jsonb can hold, otherwise as `"hex"`.
fn bytes_field(t: &str, bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.contains('\0') => json!({"t": t, "v": s}),
        _ => json!({"t": t, "hex": hex::encode(bytes)}),
    }
}

fn float_field(t: &str, f: f64) -> Value {
    if f.is_finite() && !(f == 0.0 && f.is_sign_negative()) {
        json!({"t": t, "v": f})
    } else {
        json!({"t": t, "v": f.to_string()})
    }
}

pub fn value_to_json(v: &AMQPValue) -> Value {
    match v {
        AMQPValue::Boolean(b) => json!({"t": "bool", "v": b}),
        AMQPValue::ShortShortInt(i) => json!({"t": "i8", "v": i}),
        AMQPValue::ShortShortUInt(i) => json!({"t": "u8", "v": i}),
        AMQPValue::ShortInt(i) => json!({"t": "i16", "v": i}),
        AMQPValue::ShortUInt(i) => json!({"t": "u16", "v": i}),
        AMQPValue::LongInt(i) => json!({"t": "i32", "v": i}),
        AMQPValue::LongUInt(i) => json!({"t": "u32", "v": i}),
        AMQPValue::LongLongInt(i) => json!({"t": "i64", "v": i}),
        // f32 → f64 is exact, and back again too, so the shortest f64 text round-trips.
        AMQPValue::Float(f) => float_field("f32", f64::from(*f)),
        AMQPValue::Double(f) => float_field("f64", *f),
        AMQPValue::DecimalValue(d) => json!({"t": "decimal", "scale": d.scale, "v": d.value}),
        AMQPValue::ShortString(s) => bytes_field("shortstr", s.as_str().as_bytes()),
        AMQPValue::LongString(s) => bytes_field("longstr", s.as_bytes()),
        AMQPValue::FieldArray(a) => {
            json!({"t": "array", "v": a.as_slice().iter().map(value_to_json).collect::<Vec<_>>()})
        }
        AMQPValue::Timestamp(t) => json!({"t": "timestamp", "v": t}),
        AMQPValue::FieldTable(t) => json!({"t": "table", "v": table_to_json(t)}),
        AMQPValue::ByteArray(b) => json!({"t": "bytes", "hex": hex::encode(b.as_slice())}),
        AMQPValue::Void => json!({"t": "void"}),
    }
}

/// The header table back from its typed JSON object.
pub fn table_from_json(v: &Value) -> Result<FieldTable, HeaderError> {
    let obj = v.as_object().ok_or_else(|| HeaderError::Malformed("a table must be an object".into()))?;
    let mut table = FieldTable::default();
    for (k, typed) in obj {
        let key = match typed.get("k").and_then(Value::as_str) {
            Some(h) => utf8(hex_bytes(h)?, "key")?,
            None => k.clone(),
        };
        let key = ShortString::try_new(key).map_err(|_| HeaderError::OutOfRange("table key"))?;
        table.insert(key, value_from_json(typed)?);
    }
    Ok(table)
}

fn hex_bytes(h: &str) -> Result<Vec<u8>, HeaderError> {
    hex::decode(h).map_err(|e| HeaderError::Malformed(format!("bad hex: {e}")))
}

fn utf8(b: Vec<u8>, what: &'static str) -> Result<String, HeaderError> {
    String::from_utf8(b).map_err(|_| HeaderError::OutOfRange(what))
}

fn raw_bytes(v: &Value) -> Result<Vec<u8>, HeaderError> {
    if let Some(h) = v.get("hex").and_then(Value::as_str) {
        return hex_bytes(h);
    }
    v.get("v")
        .and_then(Value::as_str)
        .map(|s| s.as_bytes().to_vec())
        .ok_or_else(|| HeaderError::Malformed("a string needs \"v\" or \"hex\"".into()))
}

fn int<T: TryFrom<i64> + TryFrom<u64>>(v: &Value, what: &'static str) -> Result<T, HeaderError> {
    let n = v.get("v").ok_or_else(|| HeaderError::Malformed(format!("{what} without \"v\"")))?;
    if let Some(i) = n.as_i64() {
        return T::try_from(i).map_err(|_| HeaderError::OutOfRange(what));
    }
    if let Some(u) = n.as_u64() {
        return T::try_from(u).map_err(|_| HeaderError::OutOfRange(what));
    }
    Err(HeaderError::Malformed(format!("{what} is not a whole number")))
}

fn float(v: &Value) -> Result<f64, HeaderError> {
    match v.get("v") {
        Some(Value::Number(n)) => n.as_f64().ok_or_else(|| HeaderError::Malformed("bad float".into())),
        Some(Value::String(s)) => s.parse::<f64>().map_err(|_| HeaderError::Malformed("bad float".into())),
        _ => Err(HeaderError::Malformed("float without \"v\"".into())),
    }
}

pub fn value_from_json(v: &Value) -> Result<AMQPValue, HeaderError> {
    let t = v.get("t").and_then(Value::as_str).ok_or_else(|| HeaderError::Malformed("missing \"t\"".into()))?;
    Ok(match t {
        "bool" => AMQPValue::Boolean(
            v.get("v").and_then(Value::as_bool).ok_or_else(|| HeaderError::Malformed("bool".into()))?,
        ),
        "i8" => AMQPValue::ShortShortInt(int(v, "i8")?),
        "u8" => AMQPValue::ShortShortUInt(int(v, "u8")?),
        "i16" => AMQPValue::ShortInt(int(v, "i16")?),
        "u16" => AMQPValue::ShortUInt(int(v, "u16")?),
        "i32" => AMQPValue::LongInt(int(v, "i32")?),
        "u32" => AMQPValue::LongUInt(int(v, "u32")?),
        "i64" => AMQPValue::LongLongInt(int(v, "i64")?),
        "timestamp" => AMQPValue::Timestamp(int(v, "timestamp")?),
        "f32" => AMQPValue::Float(float(v)? as f32),
        "f64" => AMQPValue::Double(float(v)?),
        "decimal" => {
            let scale = v.get("scale").and_then(Value::as_u64).and_then(|s| u8::try_from(s).ok());
            let scale = scale.ok_or(HeaderError::OutOfRange("decimal scale"))?;
            AMQPValue::DecimalValue(DecimalValue { scale, value: int(v, "decimal")? })
        }
        // RabbitMQ's field tables have no short-string type (its `s` is a 16-bit integer):
        // lapin would write one with a tag no broker reads, and RabbitMQ would close the
        // connection. Typed JSON written by hand (an edit) may say `shortstr`: it is sent as the
        // long string it can only be on the wire.
        "shortstr" => {
            let s = utf8(raw_bytes(v)?, "shortstr")?;
            ShortString::try_new(s.clone()).map_err(|_| HeaderError::OutOfRange("shortstr"))?;
            AMQPValue::LongString(LongString::from(s))
        }
        "longstr" => AMQPValue::LongString(LongString::from(raw_bytes(v)?)),
        "bytes" => AMQPValue::ByteArray(ByteArray::from(raw_bytes(v)?)),
        "array" => {
            let items = v.get("v").and_then(Value::as_array).ok_or_else(|| HeaderError::Malformed("array".into()))?;
            let values = items.iter().map(value_from_json).collect::<Result<Vec<_>, _>>()?;
            AMQPValue::FieldArray(FieldArray::from(values))
        }
        "table" => AMQPValue::FieldTable(table_from_json(
            v.get("v").ok_or_else(|| HeaderError::Malformed("table without \"v\"".into()))?,
        )?),
        "void" => AMQPValue::Void,
        other => return Err(HeaderError::UnknownType(other.to_string())),
    })
}

/// A header's text, whatever string type carries it; `None` for other types.
pub fn as_text(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        AMQPValue::ByteArray(b) => Some(String::from_utf8_lossy(b.as_slice()).into_owned()),
        _ => None,
    }
}

/// A header's whole number, whatever integer type carries it.
pub fn as_i64(v: &AMQPValue) -> Option<i64> {
    match *v {
        AMQPValue::ShortShortInt(i) => Some(i.into()),
        AMQPValue::ShortShortUInt(i) => Some(i.into()),
        AMQPValue::ShortInt(i) => Some(i.into()),
        AMQPValue::ShortUInt(i) => Some(i.into()),
        AMQPValue::LongInt(i) => Some(i.into()),
        AMQPValue::LongUInt(i) => Some(i.into()),
        AMQPValue::LongLongInt(i) => Some(i),
        AMQPValue::Timestamp(t) => i64::try_from(t).ok(),
        _ => None,
    }
}

/// A header table of string values, for the tests of the modules that read headers.
/// The header named `name`, exactly or else ignoring ASCII case.
pub fn header<'a>(h: &'a FieldTable, name: &str) -> Option<&'a AMQPValue> {
    let inner = h.inner();
    inner.get(name).or_else(|| inner.iter().find(|(k, _)| k.as_str().eq_ignore_ascii_case(name)).map(|(_, v)| v))
}

/// The text of the header named `name` (any case), whatever string type carries it.
pub fn text_ci(h: &FieldTable, name: &str) -> Option<String> {
    header(h, name).and_then(as_text)
}

#[cfg(test)]
pub(crate) fn string_table(pairs: &[(&str, &str)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), AMQPValue::LongString((*v).into()));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_type() -> FieldTable {
        let mut nested = FieldTable::default();
        nested.insert("inner".into(), AMQPValue::LongString("deep".into()));
        nested.insert("n".into(), AMQPValue::LongLongInt(-5));
        let mut t = FieldTable::default();
        t.insert("bool".into(), AMQPValue::Boolean(true));
        t.insert("i8".into(), AMQPValue::ShortShortInt(-128));
        t.insert("u8".into(), AMQPValue::ShortShortUInt(255));
        t.insert("i16".into(), AMQPValue::ShortInt(-32768));
        t.insert("u16".into(), AMQPValue::ShortUInt(65535));
        t.insert("i32".into(), AMQPValue::LongInt(i32::MIN));
        t.insert("u32".into(), AMQPValue::LongUInt(u32::MAX));
        t.insert("i64".into(), AMQPValue::LongLongInt(i64::MIN));
        t.insert("f32".into(), AMQPValue::Float(0.1));
        t.insert("f64".into(), AMQPValue::Double(1e300));
        t.insert("f64neg0".into(), AMQPValue::Double(-0.0));
        t.insert("f64inf".into(), AMQPValue::Double(f64::NEG_INFINITY));
        t.insert("decimal".into(), AMQPValue::DecimalValue(DecimalValue { scale: 2, value: 12345 }));
        t.insert("long".into(), AMQPValue::LongString("plain text".into()));
        t.insert("long_bin".into(), AMQPValue::LongString(vec![0xff, 0xfe, 0x00, 0x41].into()));
        t.insert("long_nul".into(), AMQPValue::LongString("a\0b".into()));
        t.insert("ts".into(), AMQPValue::Timestamp(u64::MAX));
        t.insert("bytes".into(), AMQPValue::ByteArray(vec![0u8, 1, 2, 0xff].into()));
        t.insert("void".into(), AMQPValue::Void);
        t.insert("table".into(), AMQPValue::FieldTable(nested.clone()));
        t.insert(
            "array".into(),
            AMQPValue::FieldArray(
                vec![AMQPValue::LongInt(1), AMQPValue::FieldTable(nested), AMQPValue::Void, AMQPValue::Boolean(false)]
                    .into(),
            ),
        );
        t.insert("key\0with nul".into(), AMQPValue::LongString("v".into()));
        t
    }

    #[test]
    fn every_amqp_type_round_trips_exactly() {
        let t = every_type();
        let json = table_to_json(&t);
        // Through text, as it goes through jsonb.
        let text = serde_json::to_string(&json).unwrap();
        let back = table_from_json(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back, t);
        match back.inner().get("f64neg0") {
            Some(AMQPValue::Double(f)) => assert!(f.is_sign_negative()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_double_reads_back_from_json_text_as_the_very_same_double() {
        // -943718.1000000001 read back as -943718.1 without serde_json's float_roundtrip.
        for f in [f64::from_bits(0xc12c_cccc_3333_3334), 0.1 + 0.2, 5e-324, f64::MAX, 1.0000000000000002] {
            let json = value_to_json(&AMQPValue::Double(f));
            let text = serde_json::to_string(&json).unwrap();
            assert_eq!(value_from_json(&serde_json::from_str(&text).unwrap()), Ok(AMQPValue::Double(f)), "{text}");
        }
    }

    #[test]
    fn a_key_spelled_like_a_nul_keys_placeholder_does_not_take_its_place() {
        // `\x6100` is the placeholder of "a\0": both used to land on one JSON key.
        let mut t = FieldTable::default();
        t.insert("a\0".into(), AMQPValue::LongInt(1));
        t.insert("\\x6100".into(), AMQPValue::LongInt(2));
        let json = table_to_json(&t);
        assert_eq!(json.as_object().map(Map::len), Some(2));
        assert_eq!(table_from_json(&json), Ok(t));
    }

    #[test]
    fn each_value_keeps_its_amqp_type_in_json() {
        let json = table_to_json(&every_type());
        assert_eq!(json["i16"], json!({"t": "i16", "v": -32768}));
        assert_eq!(json["long"], json!({"t": "longstr", "v": "plain text"}));
        assert_eq!(json["u32"]["t"], "u32");
    }

    #[test]
    fn non_utf8_and_nul_bearing_strings_are_stored_as_hex() {
        let json = table_to_json(&every_type());
        assert_eq!(json["long_bin"], json!({"t": "longstr", "hex": "fffe0041"}));
        assert_eq!(json["long_nul"], json!({"t": "longstr", "hex": "610062"}));
        assert!(!serde_json::to_string(&json).unwrap().contains("\\u0000"));
    }

    #[test]
    fn a_short_string_written_by_hand_is_sent_as_a_long_string() {
        let back = table_from_json(&json!({"x-tenant": {"t": "shortstr", "v": "acme"}})).unwrap();
        assert_eq!(back.inner().get("x-tenant"), Some(&AMQPValue::LongString("acme".into())));
        assert!(table_from_json(&json!({"x": {"t": "shortstr", "v": "é".repeat(128)}})).is_err(), "over 255 bytes");
    }

    #[test]
    fn malformed_json_is_an_error_not_a_panic() {
        assert!(table_from_json(&json!([1])).is_err());
        assert!(table_from_json(&json!({"a": {"t": "i8", "v": 300}})).is_err());
        assert!(table_from_json(&json!({"a": {"t": "nope"}})).is_err());
        assert!(table_from_json(&json!({"a": {"v": 1}})).is_err());
        assert!(table_from_json(&json!({"a": {"t": "longstr", "hex": "zz"}})).is_err());
    }
}
