//! Where to go after sign-in: the one check between a `next=` parameter and a `Location`.
//!
//! Policy (no open redirect): `next` must be a path on the console itself, else the answer is
//! the Overview (`/`). Browsers drop tabs and newlines from a URL and read `\` as `/`, so
//! `/\t/evil` and `/\evil` mean `//evil`, another host: a `next` holding a control character
//! or a backslash is refused outright. What is left is resolved against our own origin (dot
//! segments, `%2e`), and refused when its path, read as the most lenient client or proxy
//! would (percent-decoded, dot segments resolved again), starts with `//` or holds a control
//! character or a backslash (`/.//evil`, `/%2f%2fevil`, `/%5cevil`, `/x/%2e%2e%2f%2fevil`).
//! Server functions (`/api/`) are not pages. The answer is printable ASCII and is `/` or
//! starts with `/` followed by neither `/` nor `\`.

use percent_encoding::percent_decode_str;

const HOME: &str = "/";
/// How many layers of percent-encoding are looked through; a path encoded more deeply than
/// any link of ours (a `%` in a source name is two layers) is refused.
const DECODE_ROUNDS: usize = 4;

pub fn safe_next(next: &str) -> String {
    if !next.starts_with('/') || next.contains('\\') || next.chars().any(char::is_control) {
        return HOME.into();
    }
    let Ok(base) = url::Url::parse("http://revenant.invalid/") else { return HOME.into() };
    let Ok(resolved) = base.join(next) else { return HOME.into() };
    if resolved.origin() != base.origin() {
        return HOME.into();
    }
    let Some(path) = lenient_path(resolved.path()) else { return HOME.into() };
    if path.starts_with("//") || path.starts_with("/api/") || path == "/api" {
        return HOME.into();
    }
    let out = &resolved[url::Position::BeforePath..];
    let second = out.chars().nth(1);
    if !out.starts_with('/') || second == Some('/') || second == Some('\\') {
        return HOME.into();
    }
    out.to_string()
}

/// `path` as a lenient reader may take it: percent-decoded until it no longer changes, dot
/// segments resolved. None when it holds a control character or a backslash once decoded, or
/// is encoded more deeply than `DECODE_ROUNDS`.
fn lenient_path(path: &str) -> Option<String> {
    let mut p = path.to_string();
    let mut rounds = 0;
    loop {
        let decoded = percent_decode_str(&p).decode_utf8_lossy().into_owned();
        if decoded == p {
            break;
        }
        rounds += 1;
        if rounds > DECODE_ROUNDS {
            return None;
        }
        p = decoded;
    }
    if p.contains('\\') || p.chars().any(char::is_control) {
        return None;
    }
    Some(remove_dot_segments(&p))
}

/// RFC 3986 §5.2.4 on an absolute path: `.` dropped, `..` removes the segment before it.
/// Empty segments are kept, so `/x/..//evil` becomes `//evil`.
fn remove_dot_segments(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    for (i, s) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *s {
            "." | ".." => {
                if *s == ".." {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known open-redirect payloads (OWASP, PayloadsAllTheThings and this console's probes):
    /// none may lead off the console.
    const PAYLOADS: &[&str] = &[
        "//evil.example",
        "//evil.example/",
        "///evil.example",
        "////evil.example",
        "/.//evil.example/",
        "/./..//evil.example",
        "/../..//evil.example",
        "/x/..//evil.example",
        "/x/../..//evil.example",
        "/%2e/%2fevil.example",
        "/%2e%2e//evil.example",
        "/%2f%2fevil.example",
        "/%2F%2Fevil.example",
        "/%2fevil.example",
        "/%252f%252fevil.example",
        "/%25252f%25252fevil.example",
        "/x/%2e%2e%2f%2fevil.example",
        "/%5cevil.example",
        "/%5Cevil.example",
        "/%255cevil.example",
        "/\\evil.example",
        "/\\/evil.example",
        "\\\\evil.example",
        "/%09/evil.example",
        "/%0a/evil.example",
        "/\t/evil.example/",
        "/\n/evil.example",
        "/\r\n/evil.example",
        "/\u{0}/evil.example",
        "/\u{85}/evil.example",
        "/\r\nSet-Cookie: x=1",
        "/a\u{0}b",
        "/a\u{7f}b",
        "https://evil.example",
        "http:evil.example",
        "http:/evil.example",
        "javascript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        " //evil.example",
        "evil.example",
        "@evil.example",
        "/api/users/change",
        "/./api/users/change",
        "/%61pi/users/change",
        "/x/..%2fapi/users/change",
    ];

    #[test]
    fn no_known_open_redirect_payload_leads_off_the_console() {
        for p in PAYLOADS {
            assert_eq!(safe_next(p), HOME, "{p:?}");
        }
    }

    #[test]
    fn paths_on_the_console_are_followed_as_they_are() {
        for p in [
            "/",
            "/dead-letters?q=1",
            "/outbox#stuck",
            "/outbox?source=a%2Fb",
            "/outbox/orders%2Fv2/42",
            "/dead-letters?queue=a%0Ab",
            "/a/./b/../c",
            "/evil.example",
        ] {
            let want = if p == "/a/./b/../c" { "/a/c" } else { p };
            assert_eq!(safe_next(p), want, "{p:?}");
        }
    }

    #[test]
    fn non_ascii_is_percent_encoded_so_the_location_is_printable() {
        assert_eq!(safe_next("/caf\u{e9}"), "/caf%C3%A9");
        assert!(safe_next("/caf\u{e9}?q=\u{e9} x").bytes().all(|b| (0x21..0x7f).contains(&b)));
    }

    #[test]
    fn dot_segments_are_resolved_keeping_empty_segments() {
        assert_eq!(remove_dot_segments("/x/..//evil"), "//evil");
        assert_eq!(remove_dot_segments("/a/b/.."), "/a/");
        assert_eq!(remove_dot_segments("/.."), "/");
        assert_eq!(remove_dot_segments("/a/./b"), "/a/b");
    }

    /// A small deterministic generator (xorshift), so a failure is reproducible.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[(self.next() % from.len() as u64) as usize]
        }
    }

    #[test]
    fn whatever_next_is_the_answer_is_one_slash_then_neither_slash_nor_backslash() {
        const PIECES: &[&str] = &[
            "/",
            "/",
            "/",
            "\\",
            ".",
            "..",
            "%2f",
            "%2F",
            "%5c",
            "%5C",
            "%2e",
            "%2E",
            "%25",
            "%252f",
            "%09",
            "%0a",
            "%00",
            "\t",
            "\n",
            "\r",
            "\0",
            "\u{7f}",
            "\u{85}",
            " ",
            "evil.example",
            "@",
            ":",
            "?",
            "#",
            "&",
            "=",
            "http:",
            "https://",
            "a",
            "api",
            "%",
            "\u{3002}",
            "\u{ff0f}",
            "\u{2215}",
            "\u{e9}",
        ];
        let mut g = Gen(0x9e37_79b9_7f4a_7c15);
        let base = url::Url::parse("http://revenant.invalid/").unwrap();
        for _ in 0..20_000 {
            let len = 1 + g.next() % 8;
            let mut s: String = (0..len).map(|_| g.pick(PIECES)).collect();
            if !g.next().is_multiple_of(4) && !s.starts_with('/') {
                s.insert(0, '/');
            }
            let out = safe_next(&s);
            let mut chars = out.chars();
            assert_eq!(chars.next(), Some('/'), "{s:?} → {out:?}");
            assert!(!matches!(chars.next(), Some('/' | '\\')), "{s:?} → {out:?}");
            assert!(out.bytes().all(|b| (0x21..0x7f).contains(&b)), "{s:?} → {out:?}");
            assert_eq!(base.join(&out).unwrap().origin(), base.origin(), "{s:?} → {out:?}");
            assert_eq!(safe_next(&out), out, "{s:?} → {out:?} is not a fixed point");
        }
    }
}
