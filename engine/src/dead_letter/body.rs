//! Message bodies for display: bytes in, something an engineer can read out.
//!
//! Policy: bodies are bytes (design invariant 5). Valid JSON is pretty-printed, valid UTF-8
//! is shown as text, anything else as a hex dump; `max` caps the output for lists and the
//! `truncated` flag says so, the detail page asks for the whole body. Escaping is the UI's
//! job (it renders text nodes); this function's job is never to panic, whatever the input.

use serde::{Deserialize, Serialize};
pub use types::BodyKind;

/// Above this size, pretty-printing JSON costs more than it helps: shown as text instead.
pub const JSON_PRETTY_LIMIT: usize = 4 * 1024 * 1024;
const HEX_BYTES_PER_LINE: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderedBody {
    pub kind: BodyKind,
    /// At most `max` bytes of display text (cut on a character boundary).
    pub text: String,
    /// True when `text` does not show the whole body.
    pub truncated: bool,
    /// The body's size in bytes.
    pub total_bytes: usize,
}

/// Renders `body` for display in at most `max` bytes of text (`usize::MAX` for all of it).
pub fn render(body: &[u8], max: usize) -> RenderedBody {
    let total_bytes = body.len();
    if let Ok(text) = std::str::from_utf8(body) {
        if body.len() <= JSON_PRETTY_LIMIT
            && looks_like_json(text)
            && let Ok(value) = serde_json::from_str::<serde_json::Value>(text)
            && let Ok(pretty) = serde_json::to_string_pretty(&value)
        {
            let (text, truncated) = cut(pretty, max);
            return RenderedBody { kind: BodyKind::Json, text, truncated, total_bytes };
        }
        let (text, truncated) = cut(text.to_string(), max);
        return RenderedBody { kind: BodyKind::Text, text, truncated, total_bytes };
    }
    let (text, truncated) = hex_dump(body, max);
    RenderedBody { kind: BodyKind::Hex, text, truncated, total_bytes }
}

/// Only objects and arrays count: a body of `42` or `"x"` reads better as the text it is.
fn looks_like_json(text: &str) -> bool {
    matches!(text.trim_start().as_bytes().first(), Some(b'{') | Some(b'['))
}

fn cut(mut s: String, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    (s, true)
}

/// `00000000  48 65 6c 6c 6f 00 ff …  |Hello..|`, only as many lines as fit in `max`.
fn hex_dump(body: &[u8], max: usize) -> (String, bool) {
    let mut out = String::new();
    for (n, chunk) in body.chunks(HEX_BYTES_PER_LINE).enumerate() {
        let mut line = format!("{:08x} ", n * HEX_BYTES_PER_LINE);
        for i in 0..HEX_BYTES_PER_LINE {
            match chunk.get(i) {
                Some(b) => line.push_str(&format!(" {b:02x}")),
                None => line.push_str("   "),
            }
        }
        line.push_str("  |");
        line.extend(chunk.iter().map(|&b| if b.is_ascii_graphic() || b == b' ' { b as char } else { '.' }));
        line.push_str("|\n");
        if out.len() + line.len() > max {
            return (out, true);
        }
        out.push_str(&line);
    }
    (out, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_pretty_printed() {
        let r = render(br#"{"order":5,"items":[1,2]}"#, usize::MAX);
        assert_eq!(r.kind, BodyKind::Json);
        assert!(r.text.contains("\n  \"order\": 5"), "{}", r.text);
        assert!(!r.truncated);
        assert_eq!(r.total_bytes, 25);
    }

    #[test]
    fn utf8_that_is_not_json_is_text() {
        let r = render("{ not json — ünïcode".as_bytes(), 1000);
        assert_eq!(r.kind, BodyKind::Text);
        assert_eq!(r.text, "{ not json — ünïcode");
    }

    #[test]
    fn html_is_returned_verbatim_as_text_for_the_ui_to_escape() {
        let html = "<script>alert('x')</script>";
        let r = render(html.as_bytes(), 1000);
        assert_eq!((r.kind, r.text.as_str()), (BodyKind::Text, html));
    }

    #[test]
    fn non_utf8_is_a_hex_dump() {
        let r = render(&[0x48, 0x69, 0x00, 0xff, 0xfe], 1000);
        assert_eq!(r.kind, BodyKind::Hex);
        assert!(r.text.starts_with("00000000  48 69 00 ff fe"), "{}", r.text);
        assert!(r.text.trim_end().ends_with("|Hi...|"), "{}", r.text);
        assert_eq!(r.total_bytes, 5);
    }

    #[test]
    fn huge_bodies_are_truncated_and_flagged() {
        let big = vec![b'a'; 10 * 1024 * 1024];
        let r = render(&big, 512);
        assert_eq!((r.kind, r.text.len(), r.truncated, r.total_bytes), (BodyKind::Text, 512, true, big.len()));
        let mut bin = big.clone();
        bin[0] = 0xff;
        let r = render(&bin, 512);
        assert_eq!(r.kind, BodyKind::Hex);
        assert!(r.truncated && r.text.len() <= 512 && !r.text.is_empty());
        let json = format!("[{}1]", "1,".repeat(100_000));
        let r = render(json.as_bytes(), 100);
        assert_eq!((r.kind, r.truncated), (BodyKind::Json, true));
    }

    #[test]
    fn truncation_never_splits_a_character() {
        let r = render("ééééé".as_bytes(), 3);
        assert_eq!((r.text.as_str(), r.truncated), ("é", true));
    }

    #[test]
    fn no_input_makes_it_panic() {
        let deep = "[".repeat(100_000);
        assert_eq!(render(deep.as_bytes(), 10).kind, BodyKind::Text);
        for body in [&b""[..], b"\xf0\x28\x8c\x28", b"{\"a\":\"\\ud800\"}", b"\x00", b"[1e999999]"] {
            for max in [0, 1, 7, 80, usize::MAX] {
                let r = render(body, max);
                assert!(r.text.len() <= max);
            }
        }
    }
}
