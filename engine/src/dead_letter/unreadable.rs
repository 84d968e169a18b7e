//! What of a delivery could not be read, said in one line for the console.
//!
//! Policy: no message stops the ingester (design invariant 10). The AMQP parser lapin uses is
//! patched (vendor/amq-protocol-types) so that a header table nested deeper than
//! `MAX_NESTING`, holding too many entries or malformed inside its length arrives as a table
//! with one `UNREADABLE_KEY` entry that keeps its exact bytes, and a header name or property
//! that is not UTF-8 arrives with U+FFFD in it. Such a message is stored like any other (its
//! queue keeps flowing); this module finds those marks, so the dead letter carries a note
//! ("header `x-trace`: field table nested too deep, 14 012 bytes kept as hex") that the DLQ
//! card counts and the message page shows. The walk is bounded by the parser's own depth.

// lapin::types is this crate; named directly so the fuzz targets (fuzz/) build this file alone.
use amq_protocol_types::{AMQPValue, FieldTable, parsing::UNREADABLE_KEY};

/// The parser's mark for a table or array it could not read, when `t` is one.
fn mark(t: &FieldTable) -> Option<(String, usize)> {
    let inner = t.inner();
    if inner.len() != 1 {
        return None;
    }
    let Some(AMQPValue::FieldTable(detail)) = inner.get(UNREADABLE_KEY) else { return None };
    let reason = match detail.inner().get("reason") {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        _ => "unreadable".to_string(),
    };
    let bytes = match detail.inner().get("bytes") {
        Some(AMQPValue::ByteArray(b)) => b.as_slice().len(),
        _ => 0,
    };
    Some((reason, bytes))
}

fn walk_table(t: &FieldTable, path: &str, notes: &mut Vec<String>) {
    if let Some((reason, bytes)) = mark(t) {
        let at = if path.is_empty() { "the header table".to_string() } else { format!("header `{path}`") };
        notes.push(format!("{at}: {reason}; its {bytes} bytes are kept as hex"));
        return;
    }
    for (k, v) in t.inner() {
        let name = k.as_str();
        let here = if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
        if name.contains('\u{FFFD}') {
            notes.push(format!("header name `{here}` is not UTF-8 (shown with U+FFFD)"));
        }
        walk_value(v, &here, notes);
    }
}

fn walk_value(v: &AMQPValue, path: &str, notes: &mut Vec<String>) {
    match v {
        AMQPValue::FieldTable(t) => walk_table(t, path, notes),
        AMQPValue::FieldArray(a) => {
            for (i, item) in a.as_slice().iter().enumerate() {
                walk_value(item, &format!("{path}[{i}]"), notes);
            }
        }
        _ => {}
    }
}

/// How many notes a message keeps: a table of 10 000 unreadable entries says so in a line.
const MAX_NOTES: usize = 5;

/// One line naming what the parser could not read in `headers` and the string properties
/// (`props`: name and value), or None when everything was read.
pub fn note(headers: Option<&FieldTable>, props: &[(&str, Option<&str>)]) -> Option<String> {
    let mut notes = Vec::new();
    for (name, value) in props {
        if value.is_some_and(|v| v.contains('\u{FFFD}')) {
            notes.push(format!("property `{name}` is not UTF-8 (shown with U+FFFD)"));
        }
    }
    if let Some(h) = headers {
        walk_table(h, "", &mut notes);
    }
    if notes.is_empty() {
        return None;
    }
    let more = notes.len().saturating_sub(MAX_NOTES);
    notes.truncate(MAX_NOTES);
    let mut line = notes.join("; ");
    if more > 0 {
        line.push_str(&format!("; and {more} more"));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use amq_protocol_types::parsing::{MAX_NESTING, parse_field_table};

    use super::*;

    /// A table nested `depth` levels deep, encoded as on the wire (`F` + length + content).
    fn nested(depth: usize) -> Vec<u8> {
        let mut inner: Vec<u8> = Vec::new();
        for _ in 0..depth {
            let mut t = vec![1, b'a', b'F'];
            t.extend((inner.len() as u32).to_be_bytes());
            t.extend(&inner);
            inner = t;
        }
        let mut table = (inner.len() as u32).to_be_bytes().to_vec();
        table.extend(inner);
        table
    }

    #[test]
    fn a_table_nested_ten_thousand_deep_parses_without_recursing_past_the_bound() {
        let wire = nested(10_000);
        let (rest, t) = parse_field_table(&wire[..]).expect("parses");
        assert!(rest.is_empty());
        let n = note(Some(&t), &[]).expect("a note");
        assert!(n.contains("nested too deep"), "{n}");
        assert!(n.starts_with(&format!("header `{}`", vec!["a"; MAX_NESTING].join("."))), "{n}");
    }

    #[test]
    fn a_table_within_the_bound_is_read_whole_and_has_no_note() {
        let wire = nested(MAX_NESTING - 1);
        let (_, t) = parse_field_table(&wire[..]).expect("parses");
        assert_eq!(note(Some(&t), &[]), None);
        assert_eq!(crate::dead_letter::headers::table_from_json(&super::super::headers::table_to_json(&t)), Ok(t));
    }

    #[test]
    fn a_header_name_that_is_not_utf8_is_read_lossily_and_named() {
        // { "\xff\xfe": "v", "ok": "\xc3" } with long string values; "ok"'s is not UTF-8 either.
        let mut content = vec![2, 0xff, 0xfe, b'S', 0, 0, 0, 1, b'v'];
        content.extend([2, b'o', b'k', b'S', 0, 0, 0, 1, 0xc3]);
        let mut wire = (content.len() as u32).to_be_bytes().to_vec();
        wire.extend(content);
        let (_, t) = parse_field_table(&wire[..]).expect("parses");
        let n = note(Some(&t), &[]).expect("a note");
        assert_eq!(n, "header name `\u{FFFD}\u{FFFD}` is not UTF-8 (shown with U+FFFD)");
        // A value keeps its exact bytes.
        assert_eq!(t.inner().get("ok"), Some(&AMQPValue::LongString(vec![0xc3].into())));
    }

    #[test]
    fn a_long_header_name_that_is_not_utf8_is_cut_to_what_a_short_string_holds() {
        // 255 invalid bytes: 765 bytes of U+FFFD, past a short string's 255 (this panicked).
        let mut content = vec![255];
        content.extend([0xff; 255]);
        content.push(b'V');
        let mut wire = (content.len() as u32).to_be_bytes().to_vec();
        wire.extend(content);
        let (_, t) = parse_field_table(&wire[..]).expect("parses");
        let name = t.inner().keys().next().expect("one entry").as_str();
        assert_eq!(name, "\u{FFFD}".repeat(85));
        let back = crate::dead_letter::headers::table_from_json(&crate::dead_letter::headers::table_to_json(&t));
        assert_eq!(back, Ok(t));
    }

    #[test]
    fn an_unknown_type_tag_makes_only_its_table_unreadable() {
        // { "bad": { "x": <type '!'> }, "good": 1i8 }
        let inner = [1, b'x', b'!', 0, 0];
        let mut content = vec![3, b'b', b'a', b'd', b'F'];
        content.extend((inner.len() as u32).to_be_bytes());
        content.extend(inner);
        content.extend([4, b'g', b'o', b'o', b'd', b'b', 1]);
        let mut wire = (content.len() as u32).to_be_bytes().to_vec();
        wire.extend(content);
        let (_, t) = parse_field_table(&wire[..]).expect("parses");
        assert_eq!(t.inner().get("good"), Some(&AMQPValue::ShortShortInt(1)));
        let n = note(Some(&t), &[]).expect("a note");
        assert!(n.starts_with("header `bad`: field table malformed; its 5 bytes"), "{n}");
    }

    #[test]
    fn too_many_entries_are_kept_as_bytes_not_parsed() {
        // An array of 20 000 voids inside a table.
        let mut arr = (20_000u32).to_be_bytes().to_vec();
        arr.extend(std::iter::repeat_n(b'V', 20_000));
        let mut content = vec![1, b'a', b'A'];
        content.extend(arr);
        let mut wire = (content.len() as u32).to_be_bytes().to_vec();
        wire.extend(content);
        let (_, t) = parse_field_table(&wire[..]).expect("parses");
        let n = note(Some(&t), &[]).expect("a note");
        assert!(n.contains("too many entries"), "{n}");
    }

    /// The inputs the fuzz targets once failed on (fuzz/regressions/, docs/FUZZING.md).
    fn regressions(target: &str) -> Vec<(String, Vec<u8>)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions").join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
        entries.map(|e| e.unwrap().path()).map(|p| (p.display().to_string(), std::fs::read(&p).unwrap())).collect()
    }

    #[test]
    fn the_fuzzers_regression_tables_parse_note_and_round_trip_through_json_text() {
        use crate::dead_letter::headers::{table_from_json, table_to_json};
        for (path, bytes) in regressions("field_table") {
            let Ok((_, t)) = parse_field_table(&bytes[..]) else { continue };
            let _ = note(Some(&t), &[]);
            let json = table_to_json(&t);
            let stored = serde_json::from_str(&serde_json::to_string(&json).unwrap()).unwrap();
            let back = table_from_json(&stored).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(table_to_json(&back), json, "{path}");
            // Debug text: a NaN equals a NaN there, and -0 differs from 0, as in the typed JSON.
            assert_eq!(format!("{back:?}"), format!("{t:?}"), "{path}");
        }
        for (_, bytes) in regressions("typed_json") {
            if let Ok(json) = serde_json::from_slice(&bytes) {
                let _ = table_from_json(&json);
            }
        }
    }

    #[test]
    fn a_property_with_a_replacement_character_is_named() {
        let n = note(None, &[("message_id", Some("a\u{FFFD}b")), ("app_id", None)]).expect("a note");
        assert_eq!(n, "property `message_id` is not UTF-8 (shown with U+FFFD)");
    }
}
