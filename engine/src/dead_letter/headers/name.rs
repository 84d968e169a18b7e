//! What a header name an operator types may be: the one check for every such field (a
//! replay's "order by header", the header names of an edit).
//!
//! Policy: an AMQP table key is a short string, at most 255 bytes of UTF-8; it must name
//! something (not empty or blank); and it holds no control character (C0, DEL, C1) nor an
//! invisible or direction-changing one (zero-width, bidi controls, BOM), so the name the
//! operator reads on the page is the name the broker gets. Names as received from the broker
//! are not checked here: a replay sends those as they came.

/// The most bytes an AMQP header name can have (a short string).
pub const MAX_NAME_BYTES: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("name the header")]
    Blank,
    #[error("a header name has at most {MAX_NAME_BYTES} bytes of UTF-8; this one has {0}")]
    TooLong(usize),
    #[error("a header name cannot hold control or invisible characters: U+{code:04X} at character {at}")]
    Control { code: u32, at: usize },
}

/// Whether `name` can be a header name an operator means (see the module policy).
pub fn check_name(name: &str) -> Result<(), NameError> {
    if name.trim().is_empty() {
        return Err(NameError::Blank);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong(name.len()));
    }
    match name.chars().enumerate().find(|(_, c)| hidden(*c)) {
        Some((i, c)) => Err(NameError::Control { code: u32::from(c), at: i + 1 }),
        None => Ok(()),
    }
}

/// Control characters, and the format characters that change what a reader sees without
/// showing: zero-width ones, bidirectional embeddings, overrides and isolates, the BOM.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_header_names_pass() {
        for n in ["aggregate-id", "x-death", "X-Tenant", "order.id", "caf\u{e9}", "a b", "\u{65e5}\u{672c}"] {
            assert_eq!(check_name(n), Ok(()), "{n:?}");
        }
        assert_eq!(check_name(&"x".repeat(MAX_NAME_BYTES)), Ok(()));
    }

    #[test]
    fn a_blank_name_is_refused() {
        assert_eq!(check_name(""), Err(NameError::Blank));
        assert_eq!(check_name("  "), Err(NameError::Blank));
    }

    #[test]
    fn a_name_over_255_bytes_of_utf8_is_refused_counting_bytes_not_characters() {
        assert_eq!(check_name(&"x".repeat(256)), Err(NameError::TooLong(256)));
        // 128 two-byte characters: 128 characters, 256 bytes.
        assert_eq!(check_name(&"\u{e9}".repeat(128)), Err(NameError::TooLong(256)));
    }

    #[test]
    fn control_and_invisible_characters_are_refused_with_where_they_are() {
        for (name, code, at) in [
            ("order\nid", 0x0a, 6),
            ("\tid", 0x09, 1),
            ("id\r", 0x0d, 3),
            ("a\u{0}b", 0x00, 2),
            ("a\u{1b}[31m", 0x1b, 2),
            ("a\u{7f}", 0x7f, 2),
            ("a\u{85}", 0x85, 2),
            ("a\u{200b}b", 0x200b, 2),
            ("\u{202e}di-redro", 0x202e, 1),
            ("\u{feff}id", 0xfeff, 1),
        ] {
            assert_eq!(check_name(name), Err(NameError::Control { code, at }), "{name:?}");
        }
        let shown = check_name("order\nid").unwrap_err().to_string();
        assert!(shown.contains("U+000A at character 6"), "{shown}");
    }
}
