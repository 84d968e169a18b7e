//! What a replay would do, before anything is sent: how many messages, to which
//! destinations, whether those exist and are consumed, and which were replayed before.
//!
//! Policy: counts come from aggregates inside PostgreSQL over the same resolution the plan
//! will freeze; broker checks are passive and on throwaway channels. A broker that cannot be
//! reached still gets the operator their counts, with `broker_error` saying why the checks
//! are missing, rather than an error page at the worst moment.

use std::time::Duration;

use sqlx::{PgPool, Postgres, QueryBuilder};

use super::{
    ReplayError, TYPED_CONFIRMATION_ABOVE, broker,
    model::{Order, Preview, Selection, Target, TargetCheck},
    selection,
};

/// Destinations listed (and checked on the broker) per preview.
pub const MAX_TARGETS: i64 = 20;
/// Kinds of message (type and body shape) listed per preview.
pub const MAX_KINDS: i64 = 6;
const BROKER_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn preview(pool: &PgPool, amqp_url: &str, sel: &Selection, target: &Target) -> Result<Preview, ReplayError> {
    selection::validate(sel, target)?;
    // Runtime-checked: the selection (ids, group or list filter) and the target shape the SQL.
    let mut q = QueryBuilder::<Postgres>::new("WITH s AS (");
    selection::push_resolved(&mut q, sel, target, &Order::None);
    q.push(
        ") SELECT count(*), count(*) FILTER (WHERE exchange IS NULL),
            count(*) FILTER (WHERE replayed_before) FROM s",
    );
    let (count, without_destination, already_replayed): (i64, i64, i64) = q.build_query_as().fetch_one(pool).await?;

    // Runtime-checked: the selection (ids, group or list filter) and the target shape the SQL.
    let mut q = QueryBuilder::<Postgres>::new("WITH s AS (");
    selection::push_resolved(&mut q, sel, target, &Order::None);
    q.push(
        ") SELECT exchange, routing_key, count(*) FROM s WHERE exchange IS NOT NULL
           GROUP BY exchange, routing_key ORDER BY count(*) DESC, exchange, routing_key LIMIT ",
    )
    .push_bind(MAX_TARGETS + 1);
    let mut rows: Vec<(String, String, i64)> = q.build_query_as().fetch_all(pool).await?;
    let more_targets = rows.len() as i64 > MAX_TARGETS;
    rows.truncate(MAX_TARGETS as usize);
    let mut targets: Vec<TargetCheck> = rows
        .into_iter()
        .map(|(exchange, routing_key, count)| {
            // Through the default exchange the routing key is the queue.
            let queue = exchange.is_empty().then(|| routing_key.clone());
            TargetCheck { exchange, routing_key, count, exists: None, queue, consumers: None, reaches: None }
        })
        .collect();
    // Runtime-checked: the selection (ids, group or list filter) and the target shape the SQL.
    let mut q = QueryBuilder::<Postgres>::new("WITH s AS (");
    selection::push_resolved(&mut q, sel, target, &Order::None);
    q.push(
        ") SELECT origin_queue FROM s WHERE origin_queue IS NOT NULL
           GROUP BY origin_queue ORDER BY count(*) DESC, origin_queue LIMIT 5",
    );
    let origin_queues: Vec<String> = q.build_query_scalar().fetch_all(pool).await?;
    // Runtime-checked: the selection (ids, group or list filter) and the target shape the SQL.
    let mut q = QueryBuilder::<Postgres>::new("WITH s AS (");
    selection::push_resolved(&mut q, sel, target, &Order::None);
    q.push(") SELECT msg_type, body_shape, count(*) FROM s GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT ")
        .push_bind(MAX_KINDS);
    let kinds: Vec<(Option<String>, Option<String>, i64)> = q.build_query_as().fetch_all(pool).await?;
    let broker_error = match tokio::time::timeout(BROKER_TIMEOUT, check(amqp_url, &mut targets)).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("{e:#}")),
        Err(_) => Some(format!("the broker did not answer within {} s", BROKER_TIMEOUT.as_secs())),
    };
    if let Some(e) = &broker_error {
        tracing::warn!(error = %e, "replay preview without broker checks");
    }
    Ok(Preview {
        count,
        targets,
        more_targets,
        without_destination,
        origin_queues,
        already_replayed,
        kinds,
        needs_typed_confirmation: count > TYPED_CONFIRMATION_ABOVE,
        broker_error,
    })
}

/// Fills `reaches` for the targets that go through an exchange: the queues the broker routes
/// each (exchange, routing key) to, from one management API snapshot. A failure leaves them
/// None and is returned for the preview to show.
pub async fn reaches(
    http: &reqwest::Client,
    management_url: &str,
    vhost: &str,
    targets: &mut [TargetCheck],
) -> Result<(), crate::topology::TopologyError> {
    use crate::topology::routing::{Route, route};
    if targets.iter().all(|t| t.exchange.is_empty()) {
        return Ok(());
    }
    let t = crate::topology::fetch::snapshot(http, management_url, vhost).await?;
    for check in targets.iter_mut().filter(|c| !c.exchange.is_empty()) {
        check.reaches = match route(&t, &check.exchange, &check.routing_key) {
            Route::Queues(q) => Some(q.into_iter().collect()),
            Route::Nowhere => Some(Vec::new()),
            Route::Unknown(_) => None,
        };
    }
    Ok(())
}

async fn check(amqp_url: &str, targets: &mut [TargetCheck]) -> anyhow::Result<()> {
    let conn = crate::amqp::connect(amqp_url, "revenant-replay-preview").await?;
    let res = async {
        for t in targets.iter_mut() {
            match &t.queue {
                Some(queue) => {
                    t.consumers = broker::queue_consumers(&conn, queue).await?;
                    t.exists = Some(t.consumers.is_some());
                }
                None => t.exists = Some(broker::exchange_exists(&conn, &t.exchange).await?),
            }
        }
        Ok(())
    }
    .await;
    let _ = conn.close(200, "preview done".into()).await;
    res
}
