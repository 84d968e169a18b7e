//! Server-side helpers of the outbox server functions (ssr only).

use engine::sources::{Source, query};

use super::*;

pub fn source(name: Option<&str>) -> Result<Source, AppError> {
    let state = crate::state::app_state()?;
    let name = name.filter(|n| !n.is_empty()).unwrap_or(engine::sources::NATIVE);
    engine::sources::find(&state.sources, name)
        .cloned()
        .ok_or_else(|| AppError::NotFound(format!("no outbox source named {name}")))
}

fn minutes(field: &str, v: &Option<String>) -> Result<Option<i64>, AppError> {
    match v.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => match s.parse::<i64>() {
            Ok(n) if (1..=525_600).contains(&n) => Ok(Some(n)),
            _ => Err(AppError::Invalid(format!("{field}: `{s}` is not a number of minutes between 1 and 525600"))),
        },
    }
}

pub fn filter(q: &OutboxQuery) -> Result<query::Filter, AppError> {
    let clean = |v: &Option<String>| v.as_ref().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    let bucket = match clean(&q.bucket) {
        None => query::Bucket::Pending,
        Some(b) => query::Bucket::parse(&b).ok_or_else(|| AppError::Invalid(format!("unknown list `{b}`")))?,
    };
    Ok(query::Filter {
        bucket,
        event_type: clean(&q.event_type),
        routing_key: clean(&q.routing_key),
        error: clean(&q.error),
        payload: clean(&q.payload),
        event_id: clean(&q.event_id),
        older_than_mins: minutes("older than", &q.older_than_mins)?,
        newer_than_mins: minutes("newer than", &q.newer_than_mins)?,
    })
}

pub fn row_view(r: query::RowSummary) -> RowView {
    let now = chrono::Utc::now();
    RowView {
        age_secs: (now - r.created_at).num_seconds(),
        created_at: r.created_at,
        id: r.id,
        event_id: r.event_id,
        event_type: r.event_type,
        exchange: r.exchange,
        routing_key: r.routing_key,
        status: r.status,
        attempts: r.attempts,
        last_error: r.last_error,
        payload_size: r.payload_size,
    }
}

pub fn action_error(e: engine::sources::actions::ActionError) -> AppError {
    use engine::sources::actions::ActionError as E;
    match e {
        E::Invalid(m) => AppError::Invalid(m),
        E::SelectionGone => AppError::Conflict(e.to_string()),
        E::Db(e) => AppError::from(e),
    }
}

/// The card's lines for a source read from the commit stream.
pub async fn stream_view(src: &Source) -> Result<StreamView, AppError> {
    let c = engine::outbox::stream_card(src).await?;
    let line = match c.status.as_ref().and_then(|s| s.retained_bytes) {
        None => format!("commit stream · slot {} not made yet (a relay makes it when it starts)", c.slot),
        Some(b) => {
            format!("commit stream · slot {} · holds back {} of write-ahead log", c.slot, crate::format::bytes(b))
        }
    };
    let events = |n: i64| if n == 1 { "1 event".to_string() } else { format!("{n} events") };
    let held = (c.held_events > 0).then(|| match c.failed_heads {
        0 => format!("{} held in their key's order behind a refused one, retrying", events(c.held_events)),
        f => format!(
            "{} held in their key's order; {} failed for good and {} its key: retry or archive (Failed list)",
            events(c.held_events),
            events(f),
            if f == 1 { "holds" } else { "hold" }
        ),
    });
    Ok(StreamView { line, held })
}
