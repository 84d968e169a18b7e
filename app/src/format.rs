//! Formatting for people reading at a glance: ages, sizes, times. Pure; tested.

use chrono::{DateTime, FixedOffset, Utc};

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

/// `t` in a zone `offset_secs` east of UTC (what the browser says its zone is at that
/// instant), named by its offset: "2026-12-05 21:04:30 UTC+1"; plain [`time`] at UTC itself.
pub fn local_time(t: DateTime<Utc>, offset_secs: i32) -> String {
    match FixedOffset::east_opt(offset_secs) {
        Some(zone) if offset_secs != 0 => {
            format!("{} {}", t.with_timezone(&zone).format("%Y-%m-%d %H:%M:%S"), zone_name(offset_secs))
        }
        _ => time(t),
    }
}

/// "UTC+1", "UTC+5:30", "UTC-3".
fn zone_name(offset_secs: i32) -> String {
    let sign = if offset_secs < 0 { '-' } else { '+' };
    let mins = offset_secs.unsigned_abs() / 60;
    match mins % 60 {
        0 => format!("UTC{sign}{}", mins / 60),
        m => format!("UTC{sign}{}:{m:02}", mins / 60),
    }
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
    fn local_times_name_their_offset_and_utc_stays_utc() {
        let t = DateTime::parse_from_rfc3339("2026-12-05T23:30:00Z").unwrap().to_utc();
        assert_eq!(local_time(t, 3600), "2026-12-06 00:30:00 UTC+1");
        assert_eq!(local_time(t, 5 * 3600 + 1800), "2026-12-06 05:00:00 UTC+5:30");
        assert_eq!(local_time(t, -3 * 3600), "2026-12-05 20:30:00 UTC-3");
        assert_eq!(local_time(t, 0), "2026-12-05 23:30:00 UTC");
        assert_eq!(local_time(t, 90_000), "2026-12-05 23:30:00 UTC", "an impossible offset falls back to UTC");
    }

    #[test]
    fn sizes_and_capped_counts() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(2048), "2.0 KiB");
        assert_eq!(count(10_000, true), "10000+");
    }
}
