//! `/metrics` in the OpenMetrics text format (which Prometheus scrapes), written by the
//! `prometheus-client` crate.
//!
//! Policy: the server gathers the database-backed gauges with [`collect`] (a handful of
//! cheap queries: the latest depth samples, awaiting counts per queue, per-source health,
//! alert states) and passes the in-process counters of this instance; [`render`] is pure so
//! the output is unit-tested. Counters are this process's: Prometheus sums instances.

use std::fmt;

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet, text::encode},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
    registry::Registry,
};
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

/// A logical replication slot of a source's database (`outbox::logical::slots`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SlotMetrics {
    pub slot: String,
    pub retained_bytes: i64,
    /// Whether a session reads it now.
    pub active: bool,
}

/// Replay counters of this process: `replay::stats::ReplayStats::snapshot()`.
pub type ReplayCounters = crate::replay::stats::ReplayCounts;

/// What the database knows; the server adds its process counters at render time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MetricsInput {
    pub queues: Vec<QueueMetrics>,
    pub sources: Vec<SourceMetrics>,
    pub slots: Vec<SlotMetrics>,
    pub alerts: StateCounts,
}

/// This process's counters; a role that does not run here is None and its families are left out.
#[derive(Debug, Clone, Default)]
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
    let mut slots: Vec<SlotMetrics> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for src in sources {
        match crate::outbox::logical::slots::list(&src.pool).await {
            Ok(list) => {
                slots.extend(list.into_iter().filter(|s| seen.insert((s.database.clone(), s.name.clone()))).map(|s| {
                    SlotMetrics {
                        slot: s.name,
                        retained_bytes: s.retained_bytes.unwrap_or(0),
                        active: s.active_pid.is_some(),
                    }
                }))
            }
            Err(e) => tracing::warn!(source = %src.name, error = %e, "metrics: cannot list replication slots"),
        }
    }
    Ok(MetricsInput { queues, sources: out, slots, alerts: alerts::state_counts(pool).await? })
}

/// A family's samples, `(label value, value)`; the label name is the family's.
type Labelled<'a> = Vec<(&'a str, f64)>;

/// One scrape: a snapshot of the database gauges and this process's counters, encoded by
/// `prometheus-client` (which writes the HELP and TYPE lines, escapes label values, makes
/// histograms cumulative up to `+Inf` and ends the text with `# EOF`).
#[derive(Debug)]
struct Scrape {
    input: MetricsInput,
    relay: Option<RelayCounters>,
    ingest: Option<IngestCounts>,
    replay: Option<ReplayCounters>,
}

/// The relay's counters read once, so a scrape is consistent with itself.
#[derive(Debug)]
struct RelayCounters {
    published: u64,
    failed_attempts: u64,
    failed_final: u64,
    returned: u64,
    in_flight: u64,
    connected: bool,
    unconfirmed: u64,
    blocked: Option<crate::amqp::blocked::Block>,
    unclosed: u64,
    latency: LatencySnapshot,
}

impl RelayCounters {
    fn read(r: &RelayStats) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        Self {
            published: r.published.load(Relaxed),
            failed_attempts: r.failed_attempts.load(Relaxed),
            failed_final: r.failed_final.load(Relaxed),
            returned: r.returned.load(Relaxed),
            in_flight: r.in_flight.load(Relaxed),
            connected: r.connected.load(Relaxed),
            unconfirmed: r.unconfirmed.load(Relaxed),
            blocked: r.blocks.current(),
            unclosed: r.blocks.unclosed(),
            latency: r.confirm_latency(),
        }
    }
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, label: &str, samples: Labelled) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (value, v) in samples {
        ConstGauge::new(v).encode(m.encode_family(&[(label, value)])?)?;
    }
    Ok(())
}

/// `<role>_blocked{reason}` (1 while RabbitMQ blocks the role's connection, with the broker's
/// reason), `<role>_blocked_seconds`, `<role>_unclosed_connections`.
fn blocked(
    e: &mut DescriptorEncoder,
    role: &str,
    block: Option<&crate::amqp::blocked::Block>,
    unclosed: u64,
) -> fmt::Result {
    let (reason, v) = block.map_or(("", 0.0), |b| (b.reason.as_str(), 1.0));
    let help = format!("1 while RabbitMQ blocks the {role}'s publishing (a memory or disk alarm), with its reason.");
    gauge(e, &format!("{role}_blocked"), &help, "reason", vec![(reason, v)])?;
    let secs = block.map_or(0.0, |b| b.secs() as f64);
    single_gauge(e, &format!("{role}_blocked_seconds"), "How long the current block has lasted; 0 when none.", secs)?;
    counter(
        e,
        &format!("{role}_unclosed_connections"),
        "Broker connections that did not close when their session ended (blocked or unresponsive).",
        unclosed,
    )
}

fn single_gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> fmt::Result {
    ConstGauge::new(v).encode(e.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// `name` without `_total`: the encoder adds it to the sample.
fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    ConstCounter::new(v).encode(e.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn flag(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let q = &self.input.queues;
        gauge(
            &mut e,
            "dlq_ready_messages",
            "Ready messages in the queue at its latest depth sample.",
            "queue",
            q.iter().filter_map(|m| Some((m.queue.as_str(), m.ready? as f64))).collect(),
        )?;
        gauge(
            &mut e,
            "dlq_unacked_messages",
            "Unacknowledged messages (management API) at the latest sample.",
            "queue",
            q.iter().filter_map(|m| Some((m.queue.as_str(), m.unacked? as f64))).collect(),
        )?;
        gauge(
            &mut e,
            "dlq_awaiting_triage",
            "Stored dead letters of the queue awaiting triage.",
            "queue",
            q.iter().map(|m| (m.queue.as_str(), m.awaiting as f64)).collect(),
        )?;

        let sources = &self.input.sources;
        gauge(
            &mut e,
            "outbox_source_up",
            "1 when the outbox source's database answered this scrape.",
            "source",
            sources.iter().map(|s| (s.source.as_str(), flag(s.up))).collect(),
        )?;
        let up = || sources.iter().filter(|s| s.up);
        let per_source = |get: fn(&SourceMetrics) -> f64| up().map(|s| (s.source.as_str(), get(s))).collect();
        gauge(
            &mut e,
            "outbox_pending",
            "Pending outbox rows (capped at 10000).",
            "source",
            per_source(|s| s.pending as f64),
        )?;
        gauge(
            &mut e,
            "outbox_stuck",
            "Stuck outbox rows (capped at 10000).",
            "source",
            per_source(|s| s.stuck as f64),
        )?;
        gauge(
            &mut e,
            "outbox_failed",
            "Failed outbox rows (capped at 10000).",
            "source",
            per_source(|s| s.failed as f64),
        )?;
        gauge(
            &mut e,
            "outbox_oldest_pending_age_seconds",
            "Age of the oldest pending outbox row; 0 when none is pending.",
            "source",
            per_source(|s| s.oldest_pending_age_secs.unwrap_or(0.0)),
        )?;

        let slots = &self.input.slots;
        gauge(
            &mut e,
            "replication_slot_retained_wal_bytes",
            "Write-ahead log a logical replication slot of a source's database holds back (pg_current_wal_lsn() - restart_lsn).",
            "slot",
            slots.iter().map(|s| (s.slot.as_str(), s.retained_bytes as f64)).collect(),
        )?;
        gauge(
            &mut e,
            "replication_slot_active",
            "1 when a session reads the slot; a slot nobody reads keeps WAL until the disk is full.",
            "slot",
            slots.iter().map(|s| (s.slot.as_str(), flag(s.active))).collect(),
        )?;

        if let Some(r) = &self.relay {
            counter(&mut e, "relay_published", "Outbox rows published and confirmed.", r.published)?;
            counter(
                &mut e,
                "relay_failed_attempts",
                "Publish attempts the broker refused (nacked, returned) or that could not be sent.",
                r.failed_attempts,
            )?;
            counter(
                &mut e,
                "relay_unconfirmed",
                "Publishes with no confirm in time or whose channel went away (may have been delivered; re-sent when their lease ends).",
                r.unconfirmed,
            )?;
            blocked(&mut e, "relay", r.blocked.as_ref(), r.unclosed)?;
            counter(&mut e, "relay_failed", "Outbox rows that ended failed.", r.failed_final)?;
            counter(&mut e, "relay_returned", "Publishes returned as unroutable.", r.returned)?;
            single_gauge(&mut e, "relay_in_flight", "Publishes awaiting their confirm.", r.in_flight as f64)?;
            single_gauge(&mut e, "relay_connected", "1 when the relay has a confirm-mode channel.", flag(r.connected))?;
            let h = &r.latency;
            let mut m = e.encode_descriptor(
                "relay_confirm_latency_seconds",
                "Publish to broker confirm.",
                None,
                MetricType::Histogram,
            )?;
            let buckets: Vec<(f64, u64)> = h.buckets().collect();
            m.encode_histogram::<NoLabelSet>(h.sum_seconds, h.count, &buckets, None)?;
        }
        if let Some(i) = &self.ingest {
            counter(&mut e, "ingest_received", "Dead letters received from DLQs.", i.received)?;
            counter(&mut e, "ingest_stored", "Dead letters stored (then acked).", i.stored)?;
            counter(&mut e, "ingest_duplicates", "Redeliveries of dead letters already stored.", i.duplicates)?;
            counter(&mut e, "ingest_store_errors", "Dead letters that could not be stored.", i.store_errors)?;
            counter(
                &mut e,
                "ingest_quarantined",
                "Dead letters the store refused repeatedly, then stored raw as unreadable.",
                i.quarantined,
            )?;
            single_gauge(
                &mut e,
                "ingest_queues_stuck",
                "Watched queues not moving now (a message requeued because the store failed, or a consumer that keeps losing its connection); /readyz names them.",
                i.stuck_queues as f64,
            )?;
        }
        if let Some(r) = &self.replay {
            counter(&mut e, "replay_sent", "Replays published and confirmed.", r.sent)?;
            counter(&mut e, "replay_failed", "Replay attempts that failed.", r.failed)?;
            counter(&mut e, "replay_returned", "Replays returned as unroutable.", r.returned)?;
            counter(
                &mut e,
                "replay_unconfirmed",
                "Replays with no confirm in time or whose channel went away (marked unconfirmed, sent again).",
                r.unconfirmed,
            )?;
            blocked(&mut e, "replay", r.blocked.as_ref(), r.unclosed)?;
            single_gauge(
                &mut e,
                "replay_plans_running",
                "Replay plans this instance is sending now.",
                r.plans_running as f64,
            )?;
            counter(
                &mut e,
                "replay_auto_paused",
                "Replay plans paused automatically because replayed messages died again.",
                r.auto_paused,
            )?;
            single_gauge(
                &mut e,
                "replay_connected",
                "1 when the replay publisher has its broker connection.",
                flag(r.connected),
            )?;
        }

        let a = &self.input.alerts;
        let states = [("ok", a.ok), ("pending", a.pending), ("firing", a.firing), ("resolved", a.resolved)];
        gauge(
            &mut e,
            "alert_rules",
            "Enabled alert rules by state.",
            "state",
            states.map(|(s, n)| (s, n as f64)).to_vec(),
        )
    }
}

/// The OpenMetrics text of one scrape (every family named `revenant_…`).
pub fn render(input: &MetricsInput, counters: Counters<'_>) -> String {
    let mut registry = Registry::with_prefix("revenant");
    registry.register_collector(Box::new(Scrape {
        input: input.clone(),
        relay: counters.relay.map(RelayCounters::read),
        ingest: counters.ingest,
        replay: counters.replay,
    }));
    let mut out = String::with_capacity(4096);
    // Writing to a String cannot fail; an encoder error would be a bug in a family above.
    if let Err(e) = encode(&mut out, &registry) {
        tracing::error!(error = %e, "metrics: encoding failed");
    }
    out
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests;
