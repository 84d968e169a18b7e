//! What an edit changed: the body line by line (or only its size when it is not text), and
//! the header table key by key.
//!
//! Policy: pure functions with bounded work, since bodies may be megabytes. Common leading
//! and trailing lines are matched first; what is left is diffed by longest common subsequence
//! only while its table stays small (`LCS_CELLS`), otherwise shown as removed then added.
//! Unchanged runs are folded to `CONTEXT` lines around each change, and the output stops at
//! `MAX_LINES`.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::{Map, Value};

const CONTEXT: usize = 3;
const LCS_CELLS: usize = 1_000_000;
/// Lines a diff shows at most.
pub const MAX_LINES: usize = 2000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LineKind {
    Same,
    Removed,
    Added,
    /// Unchanged lines left out (`text` says how many), or the point where the diff was cut.
    Folded,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Line {
    pub kind: LineKind,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum BodyDiff {
    Unchanged,
    /// Both bodies are UTF-8: their lines.
    Text(Vec<Line>),
    /// One of them is not UTF-8: only the sizes.
    Binary {
        before: usize,
        after: usize,
    },
}

impl BodyDiff {
    /// One sentence for the page: `binary changed: 12 → 40 bytes`, `2 lines added, 1 removed`.
    pub fn summary(&self) -> String {
        match self {
            Self::Unchanged => "body unchanged".into(),
            Self::Text(lines) => {
                let n = |k: LineKind| lines.iter().filter(|l| l.kind == k).count();
                let (added, removed) = (n(LineKind::Added), n(LineKind::Removed));
                if added + removed == 0 {
                    "body changed (whitespace at line ends only)".into()
                } else {
                    format!("body: {added} lines added, {removed} removed")
                }
            }
            Self::Binary { before, after } => format!("binary changed: {before} → {after} bytes"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    Added,
    Removed,
    Changed,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeaderChange {
    pub name: String,
    pub change: Change,
    /// Typed values (see `dead_letter::headers`).
    pub before: Option<Value>,
    pub after: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    pub body: BodyDiff,
    pub headers: Vec<HeaderChange>,
}

/// The original message against an edit of it.
pub fn diff(
    before_body: &[u8],
    before_headers: Option<&Value>,
    after_body: &[u8],
    after_headers: Option<&Value>,
) -> Diff {
    Diff { body: body_diff(before_body, after_body), headers: headers_diff(before_headers, after_headers) }
}

pub fn body_diff(before: &[u8], after: &[u8]) -> BodyDiff {
    if before == after {
        return BodyDiff::Unchanged;
    }
    match (std::str::from_utf8(before), std::str::from_utf8(after)) {
        (Ok(a), Ok(b)) => BodyDiff::Text(line_diff(a, b)),
        _ => BodyDiff::Binary { before: before.len(), after: after.len() },
    }
}

/// Lines of `a` against lines of `b`, unchanged runs folded.
pub fn line_diff(a: &str, b: &str) -> Vec<Line> {
    let a: Vec<&str> = a.split('\n').collect();
    let b: Vec<&str> = b.split('\n').collect();
    let pre = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let room = a.len().min(b.len()) - pre;
    let suf = a.iter().rev().zip(b.iter().rev()).take(room).take_while(|(x, y)| x == y).count();
    let mut ops: Vec<(LineKind, &str)> = Vec::with_capacity(a.len().max(b.len()));
    ops.extend(a[..pre].iter().map(|l| (LineKind::Same, *l)));
    middle(&a[pre..a.len() - suf], &b[pre..b.len() - suf], &mut ops);
    ops.extend(a[a.len() - suf..].iter().map(|l| (LineKind::Same, *l)));
    fold(&ops)
}

fn middle<'a>(a: &[&'a str], b: &[&'a str], out: &mut Vec<(LineKind, &'a str)>) {
    let (n, m) = (a.len(), b.len());
    if n.saturating_mul(m) > LCS_CELLS {
        out.extend(a.iter().map(|l| (LineKind::Removed, *l)));
        out.extend(b.iter().map(|l| (LineKind::Added, *l)));
        return;
    }
    // lcs[i * w + j]: length of the longest common subsequence of a[i..] and b[j..].
    let w = m + 1;
    let mut lcs = vec![0u32; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i * w + j] =
                if a[i] == b[j] { lcs[(i + 1) * w + j + 1] + 1 } else { lcs[(i + 1) * w + j].max(lcs[i * w + j + 1]) };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if a[i] == b[j] {
            out.push((LineKind::Same, a[i]));
            (i, j) = (i + 1, j + 1);
        } else if lcs[(i + 1) * w + j] >= lcs[i * w + j + 1] {
            out.push((LineKind::Removed, a[i]));
            i += 1;
        } else {
            out.push((LineKind::Added, b[j]));
            j += 1;
        }
    }
    out.extend(a[i..].iter().map(|l| (LineKind::Removed, *l)));
    out.extend(b[j..].iter().map(|l| (LineKind::Added, *l)));
}

fn folded(n: usize) -> Line {
    let text = if n == 1 { "⋯ 1 unchanged line".to_string() } else { format!("⋯ {n} unchanged lines") };
    Line { kind: LineKind::Folded, text }
}

fn fold(ops: &[(LineKind, &str)]) -> Vec<Line> {
    let mut keep = vec![false; ops.len()];
    for (i, (k, _)) in ops.iter().enumerate() {
        if *k != LineKind::Same {
            let hi = (i + CONTEXT + 1).min(ops.len());
            keep[i.saturating_sub(CONTEXT)..hi].fill(true);
        }
    }
    let mut out = Vec::new();
    let mut skipped = 0;
    for ((kind, text), kept) in ops.iter().zip(keep) {
        if !kept {
            skipped += 1;
            continue;
        }
        if skipped > 0 {
            out.push(folded(skipped));
            skipped = 0;
        }
        if out.len() >= MAX_LINES {
            out.push(Line { kind: LineKind::Folded, text: format!("⋯ the diff is cut at {MAX_LINES} lines") });
            return out;
        }
        out.push(Line { kind: *kind, text: (*text).to_string() });
    }
    if skipped > 0 {
        out.push(folded(skipped));
    }
    out
}

/// Keys added, removed, or whose typed value (or type) changed, by name.
pub fn headers_diff(before: Option<&Value>, after: Option<&Value>) -> Vec<HeaderChange> {
    let empty = Map::new();
    let b = before.and_then(Value::as_object).unwrap_or(&empty);
    let a = after.and_then(Value::as_object).unwrap_or(&empty);
    let names: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    names
        .into_iter()
        .filter_map(|k| {
            let change = match (b.get(k), a.get(k)) {
                (None, Some(_)) => Change::Added,
                (Some(_), None) => Change::Removed,
                (Some(x), Some(y)) if x != y => Change::Changed,
                _ => return None,
            };
            Some(HeaderChange { name: k.clone(), change, before: b.get(k).cloned(), after: a.get(k).cloned() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kinds(lines: &[Line]) -> String {
        lines
            .iter()
            .map(|l| match l.kind {
                LineKind::Same => ' ',
                LineKind::Removed => '-',
                LineKind::Added => '+',
                LineKind::Folded => '~',
            })
            .collect()
    }

    #[test]
    fn a_changed_line_is_removed_then_added_between_its_neighbours() {
        let lines = line_diff("{\n  \"sku\": \"A-1\",\n  \"qty\": 2\n}", "{\n  \"sku\": \"A-2\",\n  \"qty\": 2\n}");
        assert_eq!(kinds(&lines), " -+  ");
        assert_eq!(lines[1].text, "  \"sku\": \"A-1\",");
        assert_eq!(lines[2].text, "  \"sku\": \"A-2\",");
    }

    #[test]
    fn insertions_and_deletions_in_the_middle_are_found() {
        let lines = line_diff("a\nb\nc\nd\ne", "a\nc\nx\nd\ne");
        assert_eq!(kinds(&lines), " - +  ");
        assert_eq!(lines[1].text, "b");
        assert_eq!(lines[3].text, "x");
    }

    #[test]
    fn long_unchanged_runs_are_folded_around_the_change() {
        let a: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
        let mut b = a.clone();
        b[50] = "changed".into();
        let lines = line_diff(&a.join("\n"), &b.join("\n"));
        assert_eq!(kinds(&lines), "~   -+   ~");
        assert_eq!(lines[0].text, "⋯ 47 unchanged lines");
        assert_eq!(lines[9].text, "⋯ 46 unchanged lines");
    }

    #[test]
    fn a_huge_rewrite_is_bounded_and_cut() {
        let a: String = (0..5000).map(|i| format!("a{i}\n")).collect();
        let b: String = (0..5000).map(|i| format!("b{i}\n")).collect();
        let lines = line_diff(&a, &b);
        assert_eq!(lines.len(), MAX_LINES + 1);
        assert_eq!(lines.last().map(|l| l.kind), Some(LineKind::Folded));
    }

    #[test]
    fn a_trailing_newline_counts_as_a_change() {
        assert_eq!(kinds(&line_diff("a", "a\n")), " +");
    }

    #[test]
    fn binary_bodies_are_compared_by_size_only() {
        let d = body_diff(&[0xff, 0x00], b"text now");
        assert_eq!(d, BodyDiff::Binary { before: 2, after: 8 });
        assert_eq!(d.summary(), "binary changed: 2 → 8 bytes");
        assert_eq!(body_diff(b"same", b"same"), BodyDiff::Unchanged);
        assert_eq!(body_diff(b"a\nb", b"a\nc").summary(), "body: 1 lines added, 1 removed");
    }

    #[test]
    fn headers_are_compared_key_by_key_with_their_types() {
        let before = json!({"keep": {"t": "i32", "v": 1}, "gone": {"t": "longstr", "v": "x"},
                            "val": {"t": "longstr", "v": "a"}, "typ": {"t": "i32", "v": 5}});
        let after = json!({"keep": {"t": "i32", "v": 1}, "new": {"t": "bool", "v": true},
                           "val": {"t": "longstr", "v": "b"}, "typ": {"t": "i64", "v": 5}});
        let d = headers_diff(Some(&before), Some(&after));
        let got: Vec<(&str, Change)> = d.iter().map(|c| (c.name.as_str(), c.change)).collect();
        assert_eq!(
            got,
            [("gone", Change::Removed), ("new", Change::Added), ("typ", Change::Changed), ("val", Change::Changed)]
        );
        assert_eq!(d[3].before, Some(json!({"t": "longstr", "v": "a"})));
        assert!(headers_diff(None, Some(&json!({}))).is_empty());
    }
}
