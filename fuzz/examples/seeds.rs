//! Writes the hand-made seed inputs into fuzz/seeds/<target>/ (committed; rerun after a change):
//! `cargo run --manifest-path fuzz/Cargo.toml --example seeds`.

use std::{fs, path::Path};

use amq_protocol::frame::{AMQPFrame, parse_frame};
use amq_protocol_types::{AMQPValue, DecimalValue, FieldTable};
use revenant_fuzz::{headers, wire};

/// A field table's wire bytes: its length, then `content`.
fn table(content: &[u8]) -> Vec<u8> {
    let mut t = (content.len() as u32).to_be_bytes().to_vec();
    t.extend(content);
    t
}

/// One entry: short-string name, type tag, then the value's bytes.
fn entry(name: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
    let mut e = vec![name.len() as u8];
    e.extend(name);
    e.push(tag);
    e.extend(value);
    e
}

/// `{a: {a: … }}` (tag `F`) or `{a: [[[…]]]}` (tag `A`), `depth` levels below the outer table.
fn nested(depth: usize, tag: u8) -> Vec<u8> {
    let mut inner: Vec<u8> = Vec::new();
    for _ in 0..depth {
        let mut level = if tag == b'F' { vec![1, b'a', b'F'] } else { vec![b'A'] };
        level.extend((inner.len() as u32).to_be_bytes());
        level.extend(&inner);
        inner = level;
    }
    if tag == b'A' {
        inner = entry(b"a", b'A', &table(&inner[5..]));
    }
    table(&inner)
}

/// Every type the wire carries (a `ShortString` value is written with tag `_`, which no parser
/// reads: docs/FUZZING.md).
fn every_type() -> FieldTable {
    let mut inner = FieldTable::default();
    inner.insert("inner".into(), AMQPValue::LongString("deep".into()));
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
    t.insert("f32nan".into(), AMQPValue::Float(f32::NAN));
    t.insert("f64".into(), AMQPValue::Double(0.1 + 0.2));
    t.insert("f64neg0".into(), AMQPValue::Double(-0.0));
    t.insert("f64inf".into(), AMQPValue::Double(f64::NEG_INFINITY));
    t.insert("decimal".into(), AMQPValue::DecimalValue(DecimalValue { scale: 2, value: 12345 }));
    t.insert("long".into(), AMQPValue::LongString("plain text".into()));
    t.insert("long_bin".into(), AMQPValue::LongString(vec![0xff, 0xfe, 0x00, 0x41].into()));
    t.insert("ts".into(), AMQPValue::Timestamp(u64::MAX));
    t.insert("bytes".into(), AMQPValue::ByteArray(vec![0u8, 1, 2, 0xff].into()));
    t.insert("void".into(), AMQPValue::Void);
    t.insert("table".into(), AMQPValue::FieldTable(inner.clone()));
    let items = vec![AMQPValue::LongInt(1), AMQPValue::FieldTable(inner), AMQPValue::Void];
    t.insert("array".into(), AMQPValue::FieldArray(items.into()));
    t.insert("key\0nul".into(), AMQPValue::LongString("v".into()));
    t
}

/// A content-header frame (basic class) carrying `headers` (table bytes) and `message_id`.
fn header_frame(headers: &[u8], message_id: &[u8]) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend(60u16.to_be_bytes()); // class: basic
    payload.extend(0u16.to_be_bytes()); // weight
    payload.extend(5u64.to_be_bytes()); // body size
    payload.extend(0x2080u16.to_be_bytes()); // property flags: headers, message-id
    payload.extend(headers);
    payload.push(message_id.len() as u8);
    payload.extend(message_id);
    let mut frame = vec![2];
    frame.extend(1u16.to_be_bytes()); // channel
    frame.extend((payload.len() as u32).to_be_bytes());
    frame.extend(payload);
    frame.push(0xCE);
    frame
}

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let mut tables: Vec<(&str, Vec<u8>)> = vec![
        ("empty", table(&[])),
        ("every_type", wire(&every_type())),
        ("deep_table", nested(40, b'F')),
        ("deep_array", nested(40, b'A')),
        ("at_the_bound", nested(31, b'F')),
        (
            "invalid_utf8_name",
            table(&[entry(&[0xff, 0xfe], b'S', &[0, 0, 0, 1, b'v']), entry(b"ok", b's', &[0, 7])].concat()),
        ),
        ("inner_length_past_end", table(&entry(b"t", b'F', &table(&entry(b"x", b'S', &[0, 0, 0, 9, b'a']))))),
        ("unknown_tag_inside", table(&entry(b"bad", b'F', &table(&[1, b'x', b'!', 0, 0])))),
    ];
    let mut many = (12_000u32).to_be_bytes().to_vec();
    many.extend(std::iter::repeat_n(b'V', 12_000));
    tables.push(("too_many_entries", table(&entry(b"a", b'A', &many))));

    let write = |target: &str, name: &str, bytes: &[u8]| {
        fs::create_dir_all(dir.join(target)).expect("seed dir");
        fs::write(dir.join(target).join(name), bytes).expect("seed written");
    };
    for (name, bytes) in &tables {
        let (_, t) = amq_protocol_types::parsing::parse_field_table(&bytes[..]).expect("seed table parses");
        write("field_table", name, bytes);
        let json = serde_json::to_string(&headers::table_to_json(&t)).expect("json");
        write("typed_json", name, json.as_bytes());
        let frame = header_frame(bytes, b"id-\xff");
        assert!(matches!(parse_frame(&frame[..]), Ok((_, AMQPFrame::Header(..)))), "seed frame {name} parses");
        write("frame", name, &frame);
    }
    write("frame", "heartbeat", &[8, 0, 0, 0, 0, 0, 0, 0xCE]);
    write("typed_json", "hand_written", br#"{"s":{"t":"shortstr","v":"h\u00e9llo"},"a":{"t":"array","v":[{"t":"f64","v":"-inf"},{"t":"decimal","scale":2,"v":1}]},"\\x6100":{"t":"void","k":"6100"}}"#);
    println!("seeds written to {}", dir.display());
}
