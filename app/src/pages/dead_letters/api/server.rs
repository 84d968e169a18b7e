//! The server side of the Dead letters server functions.

use chrono::Utc;
use engine::dead_letter::{headers, store, x_death};
use engine::replay::edit::{self, EditError, diff};
use serde_json::Value;

use super::*;

mod filter;
pub mod watch;
use filter::clean;
pub use filter::filter;

pub fn triage_error(e: engine::triage::TriageError) -> AppError {
    use engine::triage::TriageError as E;
    match e {
        E::Invalid(m) => AppError::Invalid(m),
        E::SelectionGone => AppError::Conflict(e.to_string()),
        E::Db(e) => AppError::from(e),
        E::Store(e) => AppError::internal(e),
    }
}

pub async fn queues() -> Result<Vec<QueueView>, AppError> {
    let state = crate::state::app_state()?;
    let latest = engine::dead_letter::depth::latest(&state.pool).await?;
    let awaiting = engine::dead_letter::awaiting::by_queue(&state.pool).await?;
    let watching = engine::dead_letter::watch::watching(&state.pool).await?;
    let ingesting = engine::dead_letter::watch::ingesting(&state.pool).await?;
    let mut names: Vec<String> = watching.clone();
    for n in latest.iter().map(|s| s.queue.clone()).chain(awaiting.iter().map(|a| a.queue.clone())) {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let now = Utc::now();
    let ui = engine::management::ui_for_dead_letters(&state.settings);
    let all = engine::dead_letter::depth::series_of(&state.pool, &names, now - chrono::Duration::hours(1)).await?;
    let inflow = engine::dead_letter::inflow::last_hour(&state.pool, now).await?;
    let mut unreadable = engine::dead_letter::queue_health::unreadable_by_queue(&state.pool).await?;
    let mut stuck = engine::dead_letter::queue_health::stuck_by_queue(&state.pool).await?;
    let missing = engine::dead_letter::missing::all(&state.pool).await?;
    let mut out = Vec::new();
    for name in names {
        let sample = latest.iter().find(|s| s.queue == name);
        let series: Vec<_> = all.iter().filter(|s| s.queue == name).collect();
        out.push(QueueView {
            inflow: engine::dead_letter::inflow::series(&inflow, now, |b| b.queue == name),
            awaiting: awaiting.iter().find(|a| a.queue == name).map(|a| a.awaiting).unwrap_or(0),
            ready: sample.map(|s| s.ready),
            unacked: sample.and_then(|s| s.unacked),
            consumers: sample.map(|s| s.consumers),
            sampled_secs_ago: sample.map(|s| (now - s.at).num_seconds()),
            series: series.iter().map(|s| s.ready).collect(),
            watching: watching.contains(&name),
            ingested: ingesting.contains(&name),
            broker_link: ui.as_ref().map(|u| u.queue(&name)),
            unreadable: unreadable.get(&name).map(|u| u.count).unwrap_or(0),
            unreadable_note: unreadable.remove(&name).map(|u| u.latest),
            stuck: stuck.remove(&name),
            missing_secs: missing.get(&name).map(|since| (now - *since).num_seconds().max(0)),
            queue: name,
        });
    }
    Ok(out)
}

/// Nothing matched with a DLQ (or origin) filter: how many match with that name as the
/// other field instead, the rest of the filter kept. None when that matches nothing either.
async fn swap(pool: &engine::db::Pool, q: &DlQuery, f: &store::ListFilter) -> Result<Option<Swap>, AppError> {
    let (field, value, swapped, query) = match (&f.queue, &f.origin) {
        (Some(v), None) => (
            "queue",
            v,
            store::ListFilter { queue: None, origin: Some(v.clone()), ..f.clone() },
            DlQuery { queue: None, origin: Some(v.clone()), ..q.clone() },
        ),
        (None, Some(v)) => (
            "origin",
            v,
            store::ListFilter { queue: Some(v.clone()), origin: None, ..f.clone() },
            DlQuery { queue: Some(v.clone()), origin: None, ..q.clone() },
        ),
        _ => return Ok(None),
    };
    let (n, capped) = store::count(pool, &swapped, 10_000).await.map_err(AppError::internal)?;
    Ok((n > 0).then(|| Swap {
        value: value.clone(),
        field: field.into(),
        count: crate::format::count(n, capped),
        href: super::super::href(&query, None),
    }))
}

fn cursor(s: &str) -> Option<store::Cursor> {
    let (ts, id) = s.split_once('~')?;
    Some(store::Cursor {
        ingested_at: chrono::DateTime::<Utc>::from_timestamp_micros(ts.parse().ok()?)?,
        id: id.parse().ok()?,
    })
}

fn cursor_text(c: store::Cursor) -> String {
    format!("{}~{}", c.ingested_at.timestamp_micros(), c.id)
}

pub async fn list(q: &DlQuery, after: Option<&str>, before: Option<&str>) -> Result<DlPage, AppError> {
    let state = crate::state::app_state()?;
    let f = filter(q)?;
    let at = match (before.and_then(cursor), after.and_then(cursor)) {
        (Some(c), _) => store::At::Before(c),
        (None, Some(c)) => store::At::After(c),
        (None, None) => store::At::Newest,
    };
    let page = store::page(&state.pool, &f, at, 50).await.map_err(AppError::internal)?;
    let (n, capped) = store::count(&state.pool, &f, 10_000).await.map_err(AppError::internal)?;
    let now = Utc::now();
    let rows = store::BODY_SEARCH_ROWS;
    let search_note = f.body_contains.as_ref().map(|_| match (page.searched_partly, page.items.is_empty()) {
        (true, true) => format!("No match in the {rows} messages read; the page links search further."),
        (true, false) => format!("Body search read {rows} messages for this page; the page links search further."),
        _ if capped => {
            format!("Body search reads {rows} messages per page, newest first; the count covers the newest {rows}.")
        }
        _ => "Body search read every message that matches the other filters.".to_string(),
    });
    let swap = if page.items.is_empty() { swap(&state.pool, q, &f).await? } else { None };
    let types = store::type_counts(&state.pool, &f, 8).await.map_err(AppError::internal)?.unwrap_or_default();
    // A facet says something only when some message has a type.
    let types = if types.iter().any(|(t, _)| t.is_some()) { types } else { Vec::new() };
    Ok(DlPage {
        types,
        swap,
        search_note,
        next: page.next.map(cursor_text),
        prev: page.prev.map(cursor_text),
        count: crate::format::count(n, capped),
        rows: page
            .items
            .into_iter()
            .map(|r| DlRow {
                preview: crate::format::clip(&crate::body_view::BodyView::render(&r.body_head, 200).text, 120),
                error: match (r.error_type, r.error_message) {
                    (Some(t), Some(m)) => Some(format!("{t}: {m}")),
                    (t, m) => t.or(m),
                },
                age_secs: (now - r.ingested_at).num_seconds(),
                id: r.id,
                queue: r.queue,
                message_id: r.message_id,
                reason: r.reason,
                original_queue: r.original_queue,
                death_count: r.death_count,
                group_id: r.group_id,
                status: r.status,
                body_size: r.body_size,
                msg_type: r.msg_type,
                body_shape: r.body_shape,
            })
            .collect(),
    })
}

fn group_view(g: engine::dead_letter::model::FailureGroup, now: chrono::DateTime<Utc>) -> GroupView {
    GroupView {
        id: g.id,
        original_queue: g.original_queue,
        reason: g.reason,
        error_type: g.error_type,
        error_sample: g.error_sample,
        msg_type: g.msg_type,
        body_shape: g.body_shape,
        first_seen: g.first_seen,
        last_seen_secs: (now - g.last_seen).num_seconds(),
        count: g.count,
        awaiting: g.awaiting,
    }
}

fn group_filter(q: &GroupsQuery) -> store::GroupFilter {
    store::GroupFilter {
        original_queue: clean(&q.queue),
        dlq: clean(&q.dlq),
        reason: None,
        only_awaiting: q.only_awaiting,
        msg_type: clean(&q.msg_type),
    }
}

pub async fn groups(q: GroupsQuery) -> Result<Vec<GroupView>, AppError> {
    let state = crate::state::app_state()?;
    let now = Utc::now();
    Ok(store::groups(&state.pool, &group_filter(&q), 200)
        .await
        .map_err(AppError::internal)?
        .into_iter()
        .map(|g| group_view(g, now))
        .collect())
}

pub async fn group_types(q: GroupsQuery) -> Result<Vec<GroupTypeView>, AppError> {
    let state = crate::state::app_state()?;
    Ok(store::group_type_counts(&state.pool, &group_filter(&q))
        .await
        .map_err(AppError::internal)?
        .into_iter()
        .map(|t| GroupTypeView { msg_type: t.msg_type, groups: t.groups, awaiting: t.awaiting })
        .collect())
}

/// Bodies shown per group page (the newest awaiting ones), each cut at 4 KiB.
const GROUP_SAMPLES: i64 = 3;

pub async fn group(id: i64) -> Result<GroupPageView, AppError> {
    let state = crate::state::app_state()?;
    let d = store::group(&state.pool, id, GROUP_SAMPLES)
        .await
        .map_err(AppError::internal)?
        .ok_or_else(|| AppError::NotFound(format!("no failure group #{id}")))?;
    let last_seen = d.group.last_seen;
    let now = Utc::now();
    let buckets = engine::dead_letter::inflow::group_last_hour(&state.pool, id, now).await?;
    let breakdown = engine::dead_letter::breakdown::of_group(&state.pool, id).await?;
    Ok(GroupPageView {
        broker: engine::management::ui_for_dead_letters(&state.settings),
        breakdown,
        inflow: engine::dead_letter::inflow::series(&buckets, now, |_| true),
        group: group_view(d.group, Utc::now()),
        last_seen,
        dlqs: d.dlqs,
        samples: d.samples.into_iter().map(|s| (s.id, crate::body_view::BodyView::render(&s.body, 4096))).collect(),
    })
}

/// A typed header value as a person reads it: strings as they are, the rest as plain JSON.
fn plain(v: &Value) -> Value {
    let Some(o) = v.as_object() else { return v.clone() };
    if let Some(h) = o.get("hex").and_then(Value::as_str) {
        return Value::String(format!("0x{h}"));
    }
    match (o.get("t").and_then(Value::as_str), o.get("v")) {
        (Some("table"), Some(Value::Object(m))) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), plain(v))).collect())
        }
        (Some("array"), Some(Value::Array(a))) => Value::Array(a.iter().map(plain).collect()),
        (_, Some(v)) => v.clone(),
        _ => Value::Null,
    }
}

/// The first configured outbox source holding a row whose event id is `message_id`. A source
/// that cannot answer is skipped (logged): the page shows the dead letter regardless.
async fn outbox_origin(sources: &[engine::sources::Source], message_id: &str) -> Option<OutboxOrigin> {
    for src in sources {
        match engine::sources::query::by_event_id(src, message_id).await {
            Ok(Some(r)) => {
                return Some(OutboxOrigin {
                    source: src.name.clone(),
                    row_id: r.id,
                    event_type: r.event_type,
                    created_at: r.created_at,
                    attempts: r.attempts,
                    status: r.status,
                    published_at: r.published_at,
                });
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(source = %src.name, error = %e, "cannot look the message id up in the outbox"),
        }
    }
    None
}

/// Characters of one header value the table shows; "Copy headers" copies them all.
const HEADER_VALUE_CHARS: usize = 2_000;

/// A header value cut for the table (a 120 KB value or an unreadable part's hex would make the
/// page as tall as the value), saying how much is left out.
fn shorten(value: String) -> String {
    match value.char_indices().nth(HEADER_VALUE_CHARS) {
        Some((cut, _)) => {
            let rest = value[cut..].chars().count();
            format!("{}… ({rest} more characters: \"Copy headers\" copies them all)", &value[..cut])
        }
        None => value,
    }
}

pub async fn detail(id: i64, full: bool) -> Result<DeadLetterView, AppError> {
    let state = crate::state::app_state()?;
    let d = store::get(&state.pool, id).await.map_err(|e| match e {
        store::StoreError::NotFound(_) => AppError::NotFound(format!("no dead letter #{id}")),
        other => AppError::internal(other),
    })?;
    let mut headers_rows = Vec::new();
    let mut shown = serde_json::Map::new();
    let mut deaths = Vec::new();
    let mut convention = None;
    if let Some(Value::Object(map)) = &d.headers {
        for (k, v) in map {
            let kind = v.get("t").and_then(Value::as_str).unwrap_or("?").to_string();
            let p = plain(v);
            let value = match &p {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            headers_rows.push(HeaderRow { name: k.clone(), kind, value: shorten(value) });
            shown.insert(k.clone(), p);
        }
        let table = headers::table_from_json(&Value::Object(map.clone())).ok();
        if let Some((c, _)) = engine::dead_letter::conventions::recognise(table.as_ref()) {
            let facts = engine::dead_letter::conventions::facts(table.as_ref());
            convention = Some(ConventionView {
                name: c.label().to_string(),
                facts: facts.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            });
        }
        if let Some(parsed) = x_death::parse(table.as_ref()) {
            deaths = parsed
                .entries
                .into_iter()
                .map(|e| DeathRow {
                    count: e.count,
                    reason: e.reason,
                    queue: e.queue,
                    exchange: e.exchange,
                    routing_keys: e.routing_keys.join(", "),
                    time: e.time,
                })
                .collect();
        }
    }
    let opt = |k: &str, v: &Option<String>| v.as_ref().map(|v| (k.to_string(), v.clone()));
    let properties: Vec<(String, String)> = [
        Some(("queue".to_string(), d.queue.clone())),
        opt("message_id", &d.message_id),
        opt("correlation_id", &d.correlation_id),
        opt("content_type", &d.content_type),
        opt("content_encoding", &d.content_encoding),
        opt("app_id", &d.app_id),
        opt("type", &d.msg_type),
        opt("user_id", &d.user_id),
        d.delivery_mode.map(|v| ("delivery_mode".to_string(), v.to_string())),
        d.priority.map(|v| ("priority".to_string(), v.to_string())),
        opt("expiration", &d.expiration),
        opt("reply_to", &d.reply_to),
        Some(("delivered via".to_string(), format!("exchange `{}` key `{}`", d.exchange, d.routing_key))),
        Some(("reason".to_string(), d.reason.clone())),
        opt("original queue", &d.original_queue),
        opt("original exchange", &d.original_exchange),
        (!d.original_routing_keys.is_empty())
            .then(|| ("original routing keys".to_string(), d.original_routing_keys.join(", "))),
        Some(("death count".to_string(), d.death_count.to_string())),
        opt("error type", &d.error_type),
        opt("error message", &d.error_message),
    ]
    .into_iter()
    .flatten()
    .collect();
    let times = [
        d.amqp_timestamp.map(|t| ("timestamp".to_string(), t)),
        d.first_death_at.map(|t| ("first death".to_string(), t)),
        Some(("ingested".to_string(), d.ingested_at)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let outbox = match &d.message_id {
        Some(mid) => outbox_origin(&state.sources, mid).await,
        None => None,
    };
    Ok(DeadLetterView {
        outbox,
        id: d.id,
        status: d.status,
        archived_reason: d.archived_reason.clone(),
        properties,
        times,
        headers: headers_rows,
        deaths,
        body: crate::body_view::BodyView::render(&d.body, if full { usize::MAX } else { 64 * 1024 }),
        group_id: d.group_id,
        replay_of: d.replay_of,
        origin_queue: d.original_queue.clone(),
        convention,
        headers_text: serde_json::to_string_pretty(&shown).map_err(AppError::internal)?,
        broker: engine::management::ui_for_dead_letters(&state.settings),
        message_id: d.message_id.clone(),
        queue: d.queue.clone(),
        unreadable: d.unreadable.clone(),
    })
}

/// Bodies larger than this are not sent to the browser for editing.
const EDITABLE_BYTES: usize = 1024 * 1024;

fn edit_error(e: EditError) -> AppError {
    match e {
        EditError::NotFound(id) => AppError::NotFound(format!("no dead letter #{id}")),
        EditError::Invalid(m) => AppError::Invalid(m),
        EditError::Conflict(m) => AppError::Conflict(m),
        EditError::Db(e) => AppError::from(e),
    }
}

/// A typed header value as `text (type)`.
fn typed_text(v: &Option<Value>) -> Option<String> {
    v.as_ref().map(|t| {
        let kind = t.get("t").and_then(Value::as_str).unwrap_or("?");
        match edit::to_plain(t) {
            Value::String(s) => format!("{s} ({kind})"),
            other => format!("{other} ({kind})"),
        }
    })
}

fn edit_view(original: &store::DeadLetter, e: edit::Edit) -> EditView {
    let d = diff::diff(&original.body, original.headers.as_ref(), &e.body, e.headers.as_ref());
    let kind = |k: diff::LineKind| match k {
        diff::LineKind::Same => "same",
        diff::LineKind::Removed => "removed",
        diff::LineKind::Added => "added",
        diff::LineKind::Folded => "folded",
    };
    EditView {
        id: e.id,
        edited_by: e.edited_by,
        edited_at: e.edited_at,
        note: e.note,
        body_summary: d.body.summary(),
        body_lines: match d.body {
            diff::BodyDiff::Text(lines) => {
                lines.into_iter().map(|l| DiffLineView { kind: kind(l.kind).to_string(), text: l.text }).collect()
            }
            _ => vec![],
        },
        headers: d
            .headers
            .into_iter()
            .map(|c| HeaderChangeView {
                change: match c.change {
                    diff::Change::Added => "added",
                    diff::Change::Removed => "removed",
                    diff::Change::Changed => "changed",
                }
                .to_string(),
                before: typed_text(&c.before),
                after: typed_text(&c.after),
                name: c.name,
            })
            .collect(),
    }
}

async fn original(pool: &engine::db::Pool, id: i64) -> Result<store::DeadLetter, AppError> {
    store::get(pool, id).await.map_err(|e| match e {
        store::StoreError::NotFound(_) => AppError::NotFound(format!("no dead letter #{id}")),
        other => AppError::internal(other),
    })
}

pub async fn edits(id: i64) -> Result<EditsView, AppError> {
    let state = crate::state::app_state()?;
    let d = original(&state.pool, id).await?;
    let cur = edit::current(&state.pool, id).await.map_err(edit_error)?;
    let latest = edit::latest_edit(&state.pool, id).await?.map(|e| edit_view(&d, e));
    let size = cur.body.len();
    let (body, body_note) = if size > EDITABLE_BYTES {
        (None, Some(format!("The body is {size} bytes, too large to edit in the browser (1 MiB at most).")))
    } else {
        match String::from_utf8(cur.body) {
            Ok(text) => (Some(text), None),
            Err(_) => (None, Some("The body is binary (not UTF-8), so it cannot be edited here.".to_string())),
        }
    };
    let plain = edit::table_to_plain(cur.headers.as_ref());
    Ok(EditsView {
        latest,
        body,
        body_note,
        headers: serde_json::to_string_pretty(&plain).map_err(AppError::internal)?,
        locked: (cur.status == DeadLetterStatus::Replaying).then(|| {
            "This message is being replayed: edit it once that replay has finished or been cancelled.".to_string()
        }),
    })
}

pub async fn save_edit(
    who: &engine::auth::Principal,
    id: i64,
    body: Option<String>,
    headers_json: &str,
    note: &str,
) -> Result<EditView, AppError> {
    let state = crate::state::app_state()?;
    let plain: Value = serde_json::from_str(headers_json)
        .map_err(|e| AppError::Invalid(format!("the headers are not valid JSON: {e}")))?;
    let cur = edit::current(&state.pool, id).await.map_err(edit_error)?;
    let body = match body {
        None => cur.body,
        // A textarea turns CRLF into LF: a body sent back untouched stays byte for byte.
        Some(text) => match std::str::from_utf8(&cur.body) {
            Ok(was) if was.replace("\r\n", "\n") == text => cur.body,
            _ => text.into_bytes(),
        },
    };
    let ip = crate::guard::client_ip();
    let e = edit::save_edit(&state.pool, who, ip.as_deref(), id, body, plain, Some(note)).await.map_err(edit_error)?;
    let d = original(&state.pool, id).await?;
    Ok(edit_view(&d, e))
}

/// A retention in days, as the page sends it.
pub fn days(v: &str) -> Result<i64, AppError> {
    let max = engine::triage::PURGE_MAX_DAYS;
    v.trim().parse::<i64>().ok().filter(|d| (1..=max).contains(d)).ok_or_else(|| {
        AppError::Invalid(format!("older than: `{}` is not a number of days between 1 and {max}", v.trim()))
    })
}

pub async fn purge_count(q: &DlQuery, older_than_days: &str) -> Result<PurgeCountView, AppError> {
    let state = crate::state::app_state()?;
    let (f, days) = (filter(q)?, days(older_than_days)?);
    let (n, capped) = engine::triage::purge_count(&state.pool, days, &f, 100_000).await.map_err(triage_error)?;
    Ok(PurgeCountView { count: n, text: crate::format::count(n, capped), days })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_header_value_is_cut_for_the_table_and_says_how_much_is_left() {
        let long = "é".repeat(HEADER_VALUE_CHARS + 5);
        let shown = shorten(long);
        assert!(shown.starts_with(&"é".repeat(HEADER_VALUE_CHARS)));
        assert!(shown.ends_with("… (5 more characters: \"Copy headers\" copies them all)"), "{shown}");
        assert_eq!(shorten("short".into()), "short");
    }
}
