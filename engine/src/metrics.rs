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
    /// Plans this instance is sending now.
    pub plans_running: u64,
    /// Plans paused automatically because replayed messages died again.
    pub auto_paused: u64,
    /// Whether the replay publisher has its broker connection.
    pub connected: bool,
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
    let queues = sqlx::query_as!(
        QueueMetrics,
        r#"WITH latest AS (
             SELECT DISTINCT ON (queue) queue, ready, unacked FROM queue_samples ORDER BY queue, at DESC
         ), awaiting AS (
             SELECT queue, awaiting AS n FROM dead_letter_queue_counts WHERE awaiting > 0
         )
         SELECT coalesce(l.queue, a.queue) AS "queue!", l.ready AS "ready?", l.unacked AS "unacked?",
                coalesce(a.n, 0) AS "awaiting!"
         FROM latest l FULL JOIN awaiting a ON a.queue = l.queue ORDER BY 1"#
    )
    .fetch_all(pool)
    .await?;
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
        o.single(
            "revenant_replay_plans_running",
            "gauge",
            "Replay plans this instance is sending now.",
            r.plans_running as f64,
        );
        o.single(
            "revenant_replay_auto_paused_total",
            "counter",
            "Replay plans paused automatically because replayed messages died again.",
            r.auto_paused as f64,
        );
        o.single(
            "revenant_replay_connected",
            "gauge",
            "1 when the replay publisher has its broker connection.",
            if r.connected { 1.0 } else { 0.0 },
        );
    }

    o.family("revenant_alert_rules", "gauge", "Enabled alert rules by state.");
    let a = &input.alerts;
    for (state, n) in [("ok", a.ok), ("pending", a.pending), ("firing", a.firing), ("resolved", a.resolved)] {
        o.sample("revenant_alert_rules", &[("state", state)], n as f64);
    }
    o.0
}

#[cfg(test)]
mod tests;
