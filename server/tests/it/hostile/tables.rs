//! Field tables as wire bytes (`u32` length + entries), hostile ones included.

/// A table of `entries`, each `(name bytes, type tag + value bytes)`.
pub fn table(entries: &[(&[u8], Vec<u8>)]) -> Vec<u8> {
    let mut content = Vec::new();
    for (name, value) in entries {
        content.push(name.len() as u8);
        content.extend_from_slice(name);
        content.extend_from_slice(value);
    }
    let mut t = (content.len() as u32).to_be_bytes().to_vec();
    t.extend(content);
    t
}

/// A long string value (`S`).
pub fn long_str(bytes: &[u8]) -> Vec<u8> {
    let mut v = vec![b'S'];
    v.extend((bytes.len() as u32).to_be_bytes());
    v.extend_from_slice(bytes);
    v
}

/// A nested table value (`F` + table).
pub fn nested_value(t: Vec<u8>) -> Vec<u8> {
    let mut v = vec![b'F'];
    v.extend(t);
    v
}

/// `{ "x-deep": { "a": { "a": … } } }`, `depth` tables under the top one, built without
/// recursion.
pub fn nested(depth: usize) -> Vec<u8> {
    let mut inner = table(&[(b"leaf", long_str(b"bottom"))]);
    for _ in 0..depth {
        inner = table(&[(b"a", nested_value(inner))]);
    }
    table(&[(b"x-deep", nested_value(inner))])
}

/// An array value (`A`) of `items` (each a type tag + value bytes).
pub fn array(items: &[Vec<u8>]) -> Vec<u8> {
    let content: Vec<u8> = items.concat();
    let mut v = vec![b'A'];
    v.extend((content.len() as u32).to_be_bytes());
    v.extend(content);
    v
}

/// One value of every AMQP field type RabbitMQ knows (it refuses NaN and infinite floats).
pub fn every_type() -> Vec<u8> {
    let be = |tag: u8, bytes: &[u8]| [&[tag][..], bytes].concat();
    table(&[
        (b"t", be(b't', &[1])),
        (b"b", be(b'b', &[0x80])),
        (b"B", be(b'B', &[0xff])),
        (b"s", be(b's', &(-2i16).to_be_bytes())),
        (b"u", be(b'u', &u16::MAX.to_be_bytes())),
        (b"I", be(b'I', &i32::MIN.to_be_bytes())),
        (b"i", be(b'i', &u32::MAX.to_be_bytes())),
        (b"l", be(b'l', &i64::MIN.to_be_bytes())),
        (b"f", be(b'f', &1.5f32.to_be_bytes())),
        (b"d", be(b'd', &(-0.0f64).to_be_bytes())),
        (b"D", be(b'D', &[2, 0, 0, 0x30, 0x39])),
        (b"S", long_str("héllo".as_bytes())),
        (b"T", be(b'T', &u64::MAX.to_be_bytes())),
        (b"x", be(b'x', &[0, 0, 0, 3, 0, 0xff, 0x0a])),
        (b"V", vec![b'V']),
        (b"A", array(&[vec![b'V'], long_str(b"in an array"), nested_value(table(&[]))])),
        (b"F", nested_value(table(&[(b"inner", long_str(b"v"))]))),
    ])
}
