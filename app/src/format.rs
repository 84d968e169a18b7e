//! Formatting for people reading at a glance: ages, sizes, times. Pure; tested.

use chrono::{DateTime, Utc};

/// "45s", "12m 03s", "3h 07m", "2d 04h".
pub fn age_secs(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

pub fn age_since(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    age_secs((now - t).num_seconds())
}

pub fn bytes(n: i64) -> String {
    match n {
        ..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

pub fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// A count the server capped: "10000+".
pub fn count(n: i64, capped: bool) -> String {
    if capped { format!("{n}+") } else { n.to_string() }
}

/// Shortens text for a table cell, on a character boundary.
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max { s.to_string() } else { format!("{}…", s.chars().take(max).collect::<String>()) }
}

/// Percent-encodes a query value (the browser does this for form GETs; links need it too).
pub use types::routes::encode as urlencode;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_in_the_largest_useful_units() {
        assert_eq!(age_secs(45), "45s");
        assert_eq!(age_secs(723), "12m 03s");
        assert_eq!(age_secs(3 * 3600 + 7 * 60), "3h 07m");
        assert_eq!(age_secs(2 * 86_400 + 4 * 3600), "2d 04h");
        assert_eq!(age_secs(-5), "0s");
    }

    #[test]
    fn clipping_never_splits_a_character() {
        assert_eq!(clip("héllo wörld", 5), "héllo…");
        assert_eq!(clip("ok", 5), "ok");
    }

    #[test]
    fn sizes_and_capped_counts() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(2048), "2.0 KiB");
        assert_eq!(count(10_000, true), "10000+");
    }
}
