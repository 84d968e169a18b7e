//! `/metrics` in the Prometheus text exposition format (version 0.0.4).
//!
//! Policy: the server gathers the database-backed gauges with [`collect`] (a handful of
//! cheap queries: the latest depth samples, awaiting counts per queue, per-source health,
//! alert states) and passes the in-process counters of this instance; [`render`] is pure so
//! the format is unit-tested. Every family has HELP and TYPE lines, label values are
//! escaped (`\\`, `"`, newline), histograms are cumulative and end with `+Inf`. Counters
//! are this process's: Prometheus sums instances.

use std::fmt::Write as _;

use serde::Serialize;
use sqlx::PgPool;

use crate::{
    alerts::{self, StateCounts},
    dead_letter::ingest::IngestCounts,
    outbox::stats::{LatencySnapshot, RelayStats},
    sources::{Source, query},
};

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QueueMetrics {
    pub queue: String,
    /// Broker-side ready messages from the latest sample; None when never sampled.
    pub ready: Option<i64>,
    /// None when the management API is off.
    pub unacked: Option<i64>,
    /// Dead letters of this queue awaiting triage in the store.
    pub awaiting: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SourceMetrics {
    pub source: String,
    /// Counts stop at `sources::query::COUNT_CAP`.
    pub pending: i64,
    pub stuck: i64,
    pub failed: i64,
    /// None when nothing is pending.
    pub oldest_pending_age_secs: Option<f64>,
    /// False when the source database did not answer: its gauges are left out.
    pub up: bool,
}

/// Replay counters of this process, as plain numbers so this module does not depend on the
/// replay role: fill them from `replay::stats::ReplayStats::snapshot()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReplayCounters {
    /// Replays published and confirmed.
    pub sent: u64,
    pub failed: u64,
    /// Publishes the broker returned as unroutable.
    pub returned: u64,
}

/// What the database knows; the server adds its process counters at render time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MetricsInput {
    pub queues: Vec<QueueMetrics>,
    pub sources: Vec<SourceMetrics>,
    pub alerts: StateCounts,
}

/// This process's counters; a role that does not run here is None and its families are left out.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters<'a> {
    pub relay: Option<&'a RelayStats>,
    pub ingest: Option<IngestCounts>,
    pub replay: Option<ReplayCounters>,
}

pub async fn collect(pool: &PgPool, sources: &[Source]) -> Result<MetricsInput, sqlx::Error> {
    let rows: Vec<(String, Option<i64>, Option<i64>, i64)> = sqlx::query_as(
        "WITH latest AS (
             SELECT DISTINCT ON (queue) queue, ready, unacked FROM queue_samples ORDER BY queue, at DESC
         ), awaiting AS (
             SELECT queue, count(*) AS n FROM dead_letters WHERE status = 'awaiting' GROUP BY queue
         )
         SELECT coalesce(l.queue, a.queue), l.ready, l.unacked, coalesce(a.n, 0)
         FROM latest l FULL JOIN awaiting a ON a.queue = l.queue ORDER BY 1",
    )
    .fetch_all(pool)
    .await?;
    let queues = rows
        .into_iter()
        .map(|(queue, ready, unacked, awaiting)| QueueMetrics { queue, ready, unacked, awaiting })
        .collect();
    let mut out = Vec::with_capacity(sources.len());
    for src in sources {
        // One source's database being down must not take the whole scrape with it.
        let health = query::health(src).await;
        let age = alerts::measure::oldest_pending_age(src).await;
        out.push(match (health, age) {
            (Ok(h), Ok(age)) => SourceMetrics {
                source: src.name.clone(),
                pending: h.pending.n,
                stuck: h.stuck.n,
                failed: h.failed.n,
                oldest_pending_age_secs: age,
                up: true,
            },
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(source = %src.name, error = %e, "metrics: cannot read the outbox source");
                SourceMetrics { source: src.name.clone(), ..SourceMetrics::default() }
            }
        });
    }
    Ok(MetricsInput { queues, sources: out, alerts: alerts::state_counts(pool).await? })
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

fn float(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else if v.is_nan() {
        "NaN".into()
    } else {
        format!("{v}")
    }
}

struct Out(String);

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.0.push_str(name);
        if !labels.is_empty() {
            let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape_label(v))).collect();
            let _ = write!(self.0, "{{{}}}", inner.join(","));
        }
        let _ = writeln!(self.0, " {}", float(value));
    }
    fn single(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
    fn histogram(&mut self, name: &str, help: &str, h: &LatencySnapshot) {
        self.family(name, "histogram", help);
        for (le, count) in h.cumulative() {
            self.sample(&format!("{name}_bucket"), &[("le", &float(le))], count as f64);
        }
        self.sample(&format!("{name}_sum"), &[], h.sum_seconds);
        self.sample(&format!("{name}_count"), &[], h.count as f64);
    }
}

pub fn render(input: &MetricsInput, counters: Counters<'_>) -> String {
    let mut o = Out(String::with_capacity(4096));
    let q = &input.queues;
    o.family("revenant_dlq_ready_messages", "gauge", "Ready messages in the queue at its latest depth sample.");
    for m in q.iter().filter(|m| m.ready.is_some()) {
        o.sample("revenant_dlq_ready_messages", &[("queue", &m.queue)], m.ready.unwrap_or(0) as f64);
    }
    o.family(
        "revenant_dlq_unacked_messages",
        "gauge",
        "Unacknowledged messages (management API) at the latest sample.",
    );
    for m in q {
        if let Some(u) = m.unacked {
            o.sample("revenant_dlq_unacked_messages", &[("queue", &m.queue)], u as f64);
        }
    }
    o.family("revenant_dlq_awaiting_triage", "gauge", "Stored dead letters of the queue awaiting triage.");
    for m in q {
        o.sample("revenant_dlq_awaiting_triage", &[("queue", &m.queue)], m.awaiting as f64);
    }

    let up: Vec<&SourceMetrics> = input.sources.iter().filter(|s| s.up).collect();
    o.family("revenant_outbox_source_up", "gauge", "1 when the outbox source's database answered this scrape.");
    for s in &input.sources {
        o.sample("revenant_outbox_source_up", &[("source", &s.source)], if s.up { 1.0 } else { 0.0 });
    }
    for (name, help, get) in [
        (
            "revenant_outbox_pending",
            "Pending outbox rows (capped at 10000).",
            (|s: &SourceMetrics| s.pending) as fn(&SourceMetrics) -> i64,
        ),
        ("revenant_outbox_stuck", "Stuck outbox rows (capped at 10000).", |s| s.stuck),
        ("revenant_outbox_failed", "Failed outbox rows (capped at 10000).", |s| s.failed),
    ] {
        o.family(name, "gauge", help);
        for s in &up {
            o.sample(name, &[("source", &s.source)], get(s) as f64);
        }
    }
    o.family(
        "revenant_outbox_oldest_pending_age_seconds",
        "gauge",
        "Age of the oldest pending outbox row; 0 when none is pending.",
    );
    for s in &up {
        let age = s.oldest_pending_age_secs.unwrap_or(0.0);
        o.sample("revenant_outbox_oldest_pending_age_seconds", &[("source", &s.source)], age);
    }

    if let Some(r) = counters.relay {
        use std::sync::atomic::Ordering::Relaxed;
        o.single(
            "revenant_relay_published_total",
            "counter",
            "Outbox rows published and confirmed.",
            r.published.load(Relaxed) as f64,
        );
        let fa = r.failed_attempts.load(Relaxed) as f64;
        o.single(
            "revenant_relay_failed_attempts_total",
            "counter",
            "Publish attempts that did not end in a confirm.",
            fa,
        );
        o.single(
            "revenant_relay_failed_total",
            "counter",
            "Outbox rows that ended failed.",
            r.failed_final.load(Relaxed) as f64,
        );
        o.single(
            "revenant_relay_returned_total",
            "counter",
            "Publishes returned as unroutable.",
            r.returned.load(Relaxed) as f64,
        );
        o.single(
            "revenant_relay_in_flight",
            "gauge",
            "Publishes awaiting their confirm.",
            r.in_flight.load(Relaxed) as f64,
        );
        let connected = if r.connected.load(Relaxed) { 1.0 } else { 0.0 };
        o.single("revenant_relay_connected", "gauge", "1 when the relay has a confirm-mode channel.", connected);
        o.histogram("revenant_relay_confirm_latency_seconds", "Publish to broker confirm.", &r.confirm_latency());
    }
    if let Some(i) = counters.ingest {
        o.single("revenant_ingest_received_total", "counter", "Dead letters received from DLQs.", i.received as f64);
        o.single("revenant_ingest_stored_total", "counter", "Dead letters stored (then acked).", i.stored as f64);
        o.single(
            "revenant_ingest_duplicates_total",
            "counter",
            "Redeliveries of dead letters already stored.",
            i.duplicates as f64,
        );
        o.single(
            "revenant_ingest_store_errors_total",
            "counter",
            "Dead letters that could not be stored.",
            i.store_errors as f64,
        );
    }
    if let Some(r) = counters.replay {
        o.single("revenant_replay_sent_total", "counter", "Replays published and confirmed.", r.sent as f64);
        o.single("revenant_replay_failed_total", "counter", "Replay attempts that failed.", r.failed as f64);
        o.single("revenant_replay_returned_total", "counter", "Replays returned as unroutable.", r.returned as f64);
    }

    o.family("revenant_alert_rules", "gauge", "Enabled alert rules by state.");
    let a = &input.alerts;
    for (state, n) in [("ok", a.ok), ("pending", a.pending), ("firing", a.firing), ("resolved", a.resolved)] {
        o.sample("revenant_alert_rules", &[("state", state)], n as f64);
    }
    o.0
}

#[cfg(test)]
mod tests {
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

    /// Checks the whole text: families declared once, before their samples.
    fn parse(text: &str) -> Vec<Sample> {
        let mut types: HashMap<String, String> = HashMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(h) = line.strip_prefix("# HELP ") {
                assert!(h.split_once(' ').is_some(), "{line}");
            } else if let Some(t) = line.strip_prefix("# TYPE ") {
                let (name, kind) = t.split_once(' ').unwrap();
                assert!(["gauge", "counter", "histogram"].contains(&kind), "{line}");
                assert!(types.insert(name.into(), kind.into()).is_none(), "{name} declared twice");
            } else {
                let s = parse_sample(line);
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suf| s.0.strip_suffix(suf).filter(|f| types.get(*f).is_some_and(|k| k == "histogram")))
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
                ingest: Some(IngestCounts { received: 9, stored: 8, duplicates: 1, store_errors: 0 }),
                ..Counters::default()
            },
        );
        let samples = parse(&text);
        assert_eq!(text.matches("# HELP ").count(), text.matches("# TYPE ").count());
        assert_eq!(value(&samples, "revenant_dlq_awaiting_triage", Some(("queue", "orders.dlq"))), Some(12.0));
        assert_eq!(value(&samples, "revenant_dlq_ready_messages", Some(("queue", "orders.dlq"))), Some(3.0));
        assert_eq!(
            value(&samples, "revenant_outbox_oldest_pending_age_seconds", Some(("source", "revenant"))),
            Some(42.5)
        );
        assert_eq!(
            value(&samples, "revenant_outbox_pending", Some(("source", "legacy"))),
            None,
            "a down source reports no counts"
        );
        assert_eq!(value(&samples, "revenant_outbox_source_up", Some(("source", "legacy"))), Some(0.0));
        assert_eq!(value(&samples, "revenant_ingest_stored_total", None), Some(8.0));
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
        let replay = ReplayCounters { sent: 3, failed: 1, returned: 0 };
        let text = render(
            &MetricsInput::default(),
            Counters { relay: Some(&relay), replay: Some(replay), ..Counters::default() },
        );
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
    }
}
