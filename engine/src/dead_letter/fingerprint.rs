//! Failure fingerprints: which dead letters failed "the same way".
//!
//! Policy: original queue + reason + error type + the error message with its variable parts
//! (quoted values, UUIDs, hex ids, numbers) replaced by placeholders, hashed with SHA-256.
//! 340 orders that failed with "order 81 not found" and "order 82 not found" are one
//! problem to an on-call engineer, so they are one group. The fields are length-prefixed so
//! no two different inputs can concatenate to the same bytes.

use sha2::{Digest, Sha256};

pub fn fingerprint(
    original_queue: Option<&str>,
    reason: &str,
    error_type: Option<&str>,
    message: Option<&str>,
) -> String {
    let mut h = Sha256::new();
    let normalised = message.map(normalise_message);
    hash_parts(&mut h, &[original_queue, Some(reason), error_type, normalised.as_deref()]);
    hex::encode(h.finalize())
}

/// Feeds optional parts to a hash so that no two lists of parts collide: each present part as
/// `1`, its length, its bytes; each absent one as `0`. Group keys are made this way, in Rust
/// and in SQL (migration 0024 for the kind), so changing it changes every key.
pub(crate) fn hash_parts(h: &mut Sha256, parts: &[Option<&str>]) {
    for part in parts {
        match part {
            Some(p) => {
                h.update([1u8]);
                h.update((p.len() as u64).to_be_bytes());
                h.update(p.as_bytes());
            }
            None => h.update([0u8]),
        }
    }
}

fn is_uuid(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// One segment of a word (between `-`/`_`): a number, a hex id, or a word whose digit runs
/// are variable (`v2`, `shard17`).
fn segment(s: &str, out: &mut String) {
    // Long all-hex runs are ids even without a digit ("deadbeef"); English words of 8+
    // letters drawn from a–f alone are rare enough to accept the risk.
    let all_hex = s.chars().all(|c| c.is_ascii_hexdigit());
    let hexish = all_hex && (s.len() >= 8 || (s.len() >= 6 && s.chars().any(|c| c.is_ascii_digit())));
    let prefixed =
        (s.starts_with("0x") || s.starts_with("0X")) && s.len() > 2 && s[2..].chars().all(|c| c.is_ascii_hexdigit());
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) {
        out.push_str("<n>");
    } else if hexish || prefixed {
        out.push_str("<hex>");
    } else {
        let mut in_digits = false;
        for c in s.chars() {
            if c.is_ascii_digit() {
                if !in_digits {
                    out.push_str("<n>");
                }
                in_digits = true;
            } else {
                out.push(c);
                in_digits = false;
            }
        }
    }
}

fn word(w: &str, out: &mut String) {
    if is_uuid(w) {
        out.push_str("<uuid>");
        return;
    }
    let mut start = 0;
    for (i, c) in w.char_indices() {
        if c == '-' || c == '_' {
            segment(&w[start..i], out);
            out.push(c);
            start = i + 1;
        }
    }
    segment(&w[start..], out);
}

/// The message with its variable parts replaced: `'…'`/`"…"`/`` `…` `` → `'<v>'`, UUIDs →
/// `<uuid>`, hex ids → `<hex>`, numbers → `<n>`; whitespace collapsed.
pub fn normalise_message(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let chars: Vec<(usize, char)> = msg.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (pos, c) = chars[i];
        if matches!(c, '\'' | '"' | '`')
            && let Some(close) = chars[i + 1..].iter().position(|&(_, d)| d == c)
        {
            out.push(c);
            out.push_str("<v>");
            out.push(c);
            i += close + 2;
            continue;
        }
        if c.is_alphanumeric() || c == '_' || c == '-' {
            let mut j = i;
            while j < chars.len() && (chars[j].1.is_alphanumeric() || chars[j].1 == '_' || chars[j].1 == '-') {
                j += 1;
            }
            let end = chars.get(j).map(|&(p, _)| p).unwrap_or(msg.len());
            word(&msg[pos..end], &mut out);
            i = j;
            continue;
        }
        if c.is_whitespace() {
            if !out.ends_with(' ') && !out.is_empty() {
                out.push(' ');
            }
        } else {
            out.push(c);
        }
        i += 1;
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_parts_become_placeholders() {
        assert_eq!(
            normalise_message(
                "Order 123e4567-e89b-12d3-a456-426614174000 failed: customer 4711 not found (ref 'ab c', id 0x1F, trace 5f3a9c12ee)"
            ),
            "Order <uuid> failed: customer <n> not found (ref '<v>', id <hex>, trace <hex>)"
        );
        assert_eq!(normalise_message("order_81   shard17 v2.5"), "order_<n> shard<n> v<n>.<n>");
        assert_eq!(normalise_message("plain words stay"), "plain words stay");
    }

    #[test]
    fn three_hundred_forty_messages_differing_only_by_ids_share_one_fingerprint() {
        let prints: std::collections::HashSet<String> = (0..340)
            .map(|i| {
                let msg = format!(
                    "payment {} for order {} declined by \"acct-{}\" (trace {:x})",
                    uuid::Uuid::new_v4(),
                    1000 + i,
                    i * 7,
                    0xdead_beef_u64 + i as u64
                );
                fingerprint(Some("orders.work"), "rejected", Some("PaymentDeclined"), Some(&msg))
            })
            .collect();
        assert_eq!(prints.len(), 1);
        assert_eq!(prints.iter().next().unwrap().len(), 64);
    }

    #[test]
    fn a_different_queue_reason_type_or_wording_is_a_different_fingerprint() {
        let base = fingerprint(Some("q"), "rejected", Some("E"), Some("order 1 missing"));
        assert_ne!(base, fingerprint(Some("q2"), "rejected", Some("E"), Some("order 1 missing")));
        assert_ne!(base, fingerprint(Some("q"), "expired", Some("E"), Some("order 1 missing")));
        assert_ne!(base, fingerprint(Some("q"), "rejected", Some("F"), Some("order 1 missing")));
        assert_ne!(base, fingerprint(Some("q"), "rejected", Some("E"), Some("order 1 locked")));
        assert_ne!(base, fingerprint(Some("q"), "rejected", None, Some("order 1 missing")));
        assert_eq!(base, fingerprint(Some("q"), "rejected", Some("E"), Some("order 99 missing")));
    }

    #[test]
    fn fields_cannot_run_into_each_other() {
        assert_ne!(fingerprint(Some("ab"), "c", None, None), fingerprint(Some("a"), "bc", None, None));
    }

    #[test]
    fn odd_input_does_not_panic() {
        for s in ["'", "\"unterminated", "é'x'é", "--__--", "", "\u{0}\u{fffd}", "0x", "ＡＢＣ１２３"] {
            let _ = normalise_message(s);
        }
    }
}
