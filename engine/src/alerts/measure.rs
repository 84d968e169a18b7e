//! A rule's current value, read from the tables the other roles keep.
//!
//! Policy: the clock of every age and window is the database's `now()`, not this process's,
//! so instances with skewed clocks agree. A value that cannot be known (no depth sample yet
//! for the queue) is `None` and the rule keeps its state, rather than reading as zero and
//! resolving an alert nobody has fixed. Counts on outbox sources stop at the sources'
//! `COUNT_CAP`, like the console's own counts.

use sqlx::PgPool;

use super::{crud::Rule, rule::RuleKind};
use crate::sources::{
    self, Source,
    query::{self, Bucket, Filter},
};

#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("outbox source `{0}` is not declared in this instance's settings")]
    UnknownSource(String),
    #[error("the rule has no target")]
    NoTarget,
    #[error("topology rules need the RabbitMQ management API (management_url)")]
    NoTopology,
    #[error("topology: {0}")]
    Topology(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    pub value: f64,
    /// The newest failure group in the window, for `new_failure_group` links.
    pub group_id: Option<i64>,
}

impl Measurement {
    fn of(value: f64) -> Option<Self> {
        Some(Self { value, group_id: None })
    }
}

/// The window as the database's interval argument, minutes.
fn window(rule: &Rule) -> i32 {
    rule.window_mins.unwrap_or(60)
}

pub async fn measure(
    own: &PgPool,
    sources: &[Source],
    probe: Option<&super::TopologyProbe>,
    rule: &Rule,
) -> Result<Option<Measurement>, MeasureError> {
    let target = || rule.target.as_deref().ok_or(MeasureError::NoTarget);
    let source = || {
        let t = target()?;
        sources::find(sources, t).ok_or_else(|| MeasureError::UnknownSource(t.to_string()))
    };
    match rule.kind {
        RuleKind::TopologyCritical => topology_failures(own, probe.ok_or(MeasureError::NoTopology)?).await,
        RuleKind::DlqDepth => {
            let ready: Option<i64> = sqlx::query_scalar!(
                "SELECT ready FROM queue_samples WHERE queue = $1 ORDER BY at DESC LIMIT 1",
                target()?
            )
            .fetch_optional(own)
            .await?;
            Ok(ready.and_then(|r| Measurement::of(r as f64)))
        }
        RuleKind::DlqAwaiting => {
            // Kept by triggers (dead_letter_queue_counts): no row yet is none awaiting.
            let n: Option<i64> =
                sqlx::query_scalar!("SELECT awaiting FROM dead_letter_queue_counts WHERE queue = $1", target()?)
                    .fetch_optional(own)
                    .await?;
            Ok(Measurement::of(n.unwrap_or(0) as f64))
        }
        RuleKind::DlqNew => {
            let n: i64 = sqlx::query_scalar!(
                r#"SELECT count(*) AS "n!" FROM dead_letters
                   WHERE queue = $1 AND ingested_at > now() - make_interval(mins => $2)"#,
                target()?,
                window(rule),
            )
            .fetch_one(own)
            .await?;
            Ok(Measurement::of(n as f64))
        }
        RuleKind::NewFailureGroup => {
            let r = sqlx::query!(
                r#"SELECT count(*) AS "n!", (array_agg(id ORDER BY first_seen DESC, id DESC))[1] AS "newest?"
                   FROM failure_groups WHERE first_seen > now() - make_interval(mins => $1)"#,
                window(rule),
            )
            .fetch_one(own)
            .await?;
            Ok(Some(Measurement { value: r.n as f64, group_id: r.newest }))
        }
        RuleKind::OutboxOldestAge => {
            let src = source()?;
            Ok(Measurement::of(oldest_pending_age(src).await?.unwrap_or(0.0)))
        }
        RuleKind::OutboxStuck => count(source()?, Bucket::Stuck).await,
        RuleKind::OutboxFailed => count(source()?, Bucket::Failed).await,
        RuleKind::SlotRetainedMb => {
            let slots = crate::outbox::logical::slots::list(&source()?.pool).await?;
            let most = slots.iter().filter_map(|s| s.retained_bytes).max().unwrap_or(0);
            Ok(Measurement::of(most as f64 / 1_048_576.0))
        }
        RuleKind::PublishersBlocked => {
            // The longest current block of any role, from heartbeats of the last 30 s.
            let longest = crate::heartbeats::blocked(own).await?.first().map(|b| chrono::Utc::now() - b.since);
            Ok(Measurement::of(longest.map_or(0.0, |d| d.num_milliseconds().max(0) as f64 / 1000.0)))
        }
    }
}

async fn count(src: &Source, bucket: Bucket) -> Result<Option<Measurement>, MeasureError> {
    let c = query::count(src, &Filter { bucket, ..Filter::default() }).await?;
    Ok(Measurement::of(c.n as f64))
}

/// Seconds since the oldest pending row was created, by the source database's clock; None
/// when nothing is pending.
pub async fn oldest_pending_age(src: &Source) -> Result<Option<f64>, sqlx::Error> {
    let c = &src.cols;
    // The column names come from a mapping checked against the live table at start-up, and
    // are quoted (sources::mapping): safe to splice.
    // Runtime-checked: the table and columns are the source's, from configuration.
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT extract(epoch FROM now() - min({}))::float8 FROM {} WHERE {}",
        c.created_at, c.table, c.pending_cond
    )))
    .fetch_one(&src.pool)
    .await
}

/// Failing checks on critical queues and node alarms, as the Topology page reports them. An
/// unreachable management API is "no value" (the rule keeps its state), not zero.
async fn topology_failures(own: &PgPool, p: &super::TopologyProbe) -> Result<Option<Measurement>, MeasureError> {
    use crate::topology::{self, contract};
    let console = contract::list(own, Some(&p.vhost)).await.map_err(|e| MeasureError::Topology(e.to_string()))?;
    let config =
        contract::from_config(&p.vhost, &p.config_contracts).map_err(|e| MeasureError::Topology(e.to_string()))?;
    let contracts = contract::merged(console, config);
    let watched = topology::watched(own).await?;
    let http = topology::http_client().map_err(|e| MeasureError::Topology(e.to_string()))?;
    match topology::report(&http, &p.management_url, &p.vhost, &contracts, &watched).await {
        Ok(report) => Ok(Measurement::of(topology::failing_critical(&report).len() as f64)),
        Err(e) => Err(MeasureError::Topology(e.to_string())),
    }
}
