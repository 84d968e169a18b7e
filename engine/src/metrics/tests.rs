//! Unit tests of the parent module.
use std::{collections::HashMap, time::Duration};

use super::*;

type Sample = (String, Vec<(String, String)>, f64);

/// (name, labels, value) of a sample line, labels unescaped; panics on a malformed line.
fn parse_sample(line: &str) -> Sample {
    let name_end = line.find(['{', ' ']).expect("a name");
    let name = &line[..name_end];
    assert!(!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'), "{line}");
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if rest.starts_with('{') {
        let mut chars = rest[1..].char_indices();
        loop {
            let (k_start, c) = chars.next().expect("label or }");
            if c == '}' {
                rest = &rest[k_start + 2..];
                break;
            }
            let mut key = String::from(c);
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            assert_eq!(chars.next().map(|x| x.1), Some('"'), "{line}");
            let mut val = String::new();
            loop {
                match chars.next().expect("closing quote").1 {
                    '\\' => match chars.next().expect("escape").1 {
                        'n' => val.push('\n'),
                        c @ ('\\' | '"') => val.push(c),
                        c => panic!("bad escape \\{c} in {line}"),
                    },
                    '"' => break,
                    '\n' => panic!("raw newline in {line}"),
                    c => val.push(c),
                }
            }
            labels.push((key, val));
            if let Some((i, '}')) = chars.clone().next() {
                rest = &rest[i + 2..];
                break;
            }
            assert_eq!(chars.next().map(|x| x.1), Some(','), "{line}");
        }
    }
    let v = rest.strip_prefix(' ').expect("one space before the value");
    let value = match v {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().unwrap_or_else(|_| panic!("value `{v}` in {line}")),
    };
    (name.to_string(), labels, value)
}

/// Checks the whole text: families declared once, before their samples, and the
/// OpenMetrics `# EOF` last.
fn parse(text: &str) -> Vec<Sample> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = Vec::new();
    assert_eq!(text.lines().last(), Some("# EOF"), "{text}");
    for line in text.lines().filter(|l| *l != "# EOF") {
        if let Some(h) = line.strip_prefix("# HELP ") {
            assert!(h.split_once(' ').is_some(), "{line}");
        } else if let Some(t) = line.strip_prefix("# TYPE ") {
            let (name, kind) = t.split_once(' ').unwrap();
            assert!(["gauge", "counter", "histogram"].contains(&kind), "{line}");
            assert!(types.insert(name.into(), kind.into()).is_none(), "{name} declared twice");
        } else {
            let s = parse_sample(line);
            let family =
                [("_bucket", "histogram"), ("_sum", "histogram"), ("_count", "histogram"), ("_total", "counter")]
                    .iter()
                    .find_map(|(suf, kind)| s.0.strip_suffix(suf).filter(|f| types.get(*f).is_some_and(|k| k == kind)))
                    .unwrap_or(&s.0);
            assert!(types.contains_key(family), "sample {} before its TYPE", s.0);
            samples.push(s);
        }
    }
    samples
}

fn input() -> MetricsInput {
    MetricsInput {
        queues: vec![
            QueueMetrics { queue: "orders.dlq".into(), ready: Some(3), unacked: None, awaiting: 12 },
            QueueMetrics { queue: "we\"ird\\q\nx".into(), ready: None, unacked: Some(1), awaiting: 0 },
        ],
        sources: vec![
            SourceMetrics {
                source: "revenant".into(),
                pending: 5,
                stuck: 1,
                failed: 2,
                oldest_pending_age_secs: Some(42.5),
                up: true,
            },
            SourceMetrics { source: "legacy".into(), up: false, ..SourceMetrics::default() },
        ],
        slots: vec![SlotMetrics { slot: "debezium_orders".into(), retained_bytes: 52_428_800, active: false }],
        alerts: StateCounts { ok: 3, pending: 0, firing: 1, resolved: 2 },
    }
}

fn value(samples: &[Sample], name: &str, label: Option<(&str, &str)>) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| n == name && label.is_none_or(|(k, v)| l.iter().any(|(a, b)| a == k && b == v)))
        .map(|s| s.2)
}

#[test]
fn every_line_parses_and_every_family_has_help_and_type() {
    let text = render(
        &input(),
        Counters {
            ingest: Some(IngestCounts {
                received: 9,
                stored: 8,
                duplicates: 1,
                store_errors: 0,
                batches: 2,
                quarantined: 1,
                stuck_queues: 1,
            }),
            ..Counters::default()
        },
    );
    let samples = parse(&text);
    assert_eq!(text.matches("# HELP ").count(), text.matches("# TYPE ").count());
    assert_eq!(value(&samples, "revenant_dlq_awaiting_triage", Some(("queue", "orders.dlq"))), Some(12.0));
    let slot = Some(("slot", "debezium_orders"));
    assert_eq!(value(&samples, "revenant_replication_slot_retained_wal_bytes", slot), Some(52_428_800.0));
    assert_eq!(value(&samples, "revenant_replication_slot_active", slot), Some(0.0));
    assert_eq!(value(&samples, "revenant_dlq_ready_messages", Some(("queue", "orders.dlq"))), Some(3.0));
    assert_eq!(value(&samples, "revenant_outbox_oldest_pending_age_seconds", Some(("source", "revenant"))), Some(42.5));
    assert_eq!(
        value(&samples, "revenant_outbox_pending", Some(("source", "legacy"))),
        None,
        "a down source reports no counts"
    );
    assert_eq!(value(&samples, "revenant_outbox_source_up", Some(("source", "legacy"))), Some(0.0));
    assert_eq!(value(&samples, "revenant_ingest_stored_total", None), Some(8.0));
    assert_eq!(value(&samples, "revenant_ingest_quarantined_total", None), Some(1.0));
    assert_eq!(value(&samples, "revenant_ingest_queues_stuck", None), Some(1.0));
    assert_eq!(value(&samples, "revenant_alert_rules", Some(("state", "firing"))), Some(1.0));
    assert!(!text.contains("revenant_relay_"), "no relay here, no relay families");
}

#[test]
fn label_values_are_escaped_and_read_back_unchanged() {
    let text = render(&input(), Counters::default());
    assert!(text.contains(r#"queue="we\"ird\\q\nx""#), "{text}");
    let samples = parse(&text);
    assert_eq!(value(&samples, "revenant_dlq_awaiting_triage", Some(("queue", "we\"ird\\q\nx"))), Some(0.0));
}

#[test]
fn the_confirm_latency_histogram_is_cumulative_and_ends_with_inf_equal_to_count() {
    let relay = RelayStats::default();
    for ms in [1, 3, 3, 40, 900, 20_000] {
        relay.observe_confirm_latency(Duration::from_millis(ms));
    }
    relay.published.fetch_add(6, std::sync::atomic::Ordering::Relaxed);
    let replay = ReplayCounters {
        sent: 3,
        failed: 1,
        plans_running: 2,
        auto_paused: 1,
        connected: true,
        unconfirmed: 4,
        blocked: Some(crate::amqp::blocked::Block { reason: "low on memory".into(), since: chrono::Utc::now() }),
        ..ReplayCounters::default()
    };
    let text =
        render(&MetricsInput::default(), Counters { relay: Some(&relay), replay: Some(replay), ..Counters::default() });
    let samples = parse(&text);
    let buckets: Vec<(String, f64)> = samples
        .iter()
        .filter(|s| s.0 == "revenant_relay_confirm_latency_seconds_bucket")
        .map(|s| (s.1[0].1.clone(), s.2))
        .collect();
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
    assert_eq!(buckets.last().unwrap(), &("+Inf".to_string(), 6.0));
    assert_eq!(value(&samples, "revenant_relay_confirm_latency_seconds_count", None), Some(6.0));
    assert_eq!(buckets.iter().find(|b| b.0 == "0.005").unwrap().1, 3.0);
    assert_eq!(value(&samples, "revenant_relay_published_total", None), Some(6.0));
    assert_eq!(value(&samples, "revenant_replay_failed_total", None), Some(1.0));
    assert_eq!(value(&samples, "revenant_replay_plans_running", None), Some(2.0));
    assert_eq!(value(&samples, "revenant_replay_auto_paused_total", None), Some(1.0));
    assert_eq!(value(&samples, "revenant_replay_connected", None), Some(1.0));
    assert_eq!(value(&samples, "revenant_replay_unconfirmed_total", None), Some(4.0));
    assert_eq!(value(&samples, "revenant_replay_blocked", Some(("reason", "low on memory"))), Some(1.0));
    assert_eq!(value(&samples, "revenant_relay_blocked", Some(("reason", ""))), Some(0.0));
    assert_eq!(value(&samples, "revenant_relay_blocked_seconds", None), Some(0.0));
}
