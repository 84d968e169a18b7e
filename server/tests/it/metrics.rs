//! `/metrics` is valid OpenMetrics text (which Prometheus scrapes) and its figures match the store.

use std::collections::HashMap;

use crate::harness::spawn_app;

/// A strict-enough parser of the OpenMetrics text format: every line is a comment (`# HELP`
/// or `# TYPE` with a known type) or `name{labels} value`, with a parsable float value, and
/// the last line is `# EOF`.
fn parse(text: &str) -> HashMap<String, f64> {
    let mut samples = HashMap::new();
    assert_eq!(text.lines().last(), Some("# EOF"), "{text}");
    for line in text.lines().filter(|l| !l.is_empty() && *l != "# EOF") {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let kind = parts.next().unwrap();
            assert!(kind == "HELP" || kind == "TYPE", "bad comment: {line}");
            if kind == "TYPE" {
                let t = parts.nth(1).unwrap_or("");
                assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&t), "bad type: {line}");
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'), "bad name: {line}");
        if name_end < series.len() {
            assert!(series.ends_with('}'), "unclosed labels: {line}");
        }
        let v: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().unwrap_or_else(|_| panic!("bad value: {line}")),
        };
        samples.insert(series.to_string(), v);
    }
    samples
}

#[tokio::test]
async fn metrics_parse_and_match_the_store() {
    let app = spawn_app().await;
    sqlx::query!(
        r#"INSERT INTO outbox (event_type, routing_key, payload, created_at)
           SELECT 't', 'k', '\x00', now() - interval '90 seconds' FROM generate_series(1, 3)"#,
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    sqlx::query!(
        r#"INSERT INTO dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason, fingerprint)
           SELECT 'orders.dlq', md5(g::text), '\x00', 1, '', 'k', 'rejected', 'f' FROM generate_series(1, 2) g"#,
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    let text = reqwest::get(format!("{}/metrics", app.base)).await.unwrap().text().await.unwrap();
    let m = parse(&text);
    assert_eq!(m.get("revenant_outbox_pending{source=\"revenant\"}"), Some(&3.0), "{text}");
    let age = m.get("revenant_outbox_oldest_pending_age_seconds{source=\"revenant\"}").copied().unwrap_or(0.0);
    assert!((89.0..200.0).contains(&age), "oldest age {age}");
    assert_eq!(m.get("revenant_dlq_awaiting_triage{queue=\"orders.dlq\"}"), Some(&2.0), "{text}");
}
