//! A list filter from the page's query (`DlQuery` → `ListFilter`): every value checked, a
//! malformed one refused naming it, before any query runs.

use chrono::Utc;
use engine::dead_letter::store;

use super::super::DlQuery;
use crate::error::AppError;

pub(super) fn clean(v: &Option<String>) -> Option<String> {
    v.as_ref().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn minutes(field: &str, v: &Option<String>) -> Result<Option<chrono::DateTime<Utc>>, AppError> {
    match clean(v) {
        None => Ok(None),
        Some(s) => match s.parse::<i64>() {
            Ok(n) if (1..=525_600).contains(&n) => Ok(Some(Utc::now() - chrono::Duration::minutes(n))),
            _ => Err(AppError::Invalid(format!("{field}: `{s}` is not a number of minutes between 1 and 525600"))),
        },
    }
}

/// PostgreSQL refuses a NUL byte in text: a filter holding one fails here, before a query
/// (or a download's stream) starts. The body search compares bytes, so it may hold one.
fn no_nul(q: &DlQuery) -> Result<(), AppError> {
    let text = [
        ("queue", &q.queue),
        ("origin", &q.origin),
        ("type", &q.msg_type),
        ("shape", &q.shape),
        ("reason", &q.reason),
        ("status", &q.status),
        ("error", &q.error),
        ("message id", &q.message_id),
        ("group", &q.group),
        ("newer than", &q.newer_than_mins),
        ("older than", &q.older_than_mins),
    ];
    match text.iter().find(|(_, v)| v.as_deref().is_some_and(|v| v.contains('\0'))) {
        Some((name, _)) => Err(AppError::Invalid(format!("{name}: a NUL byte (%00) cannot be searched for"))),
        None => Ok(()),
    }
}

pub fn filter(q: &DlQuery) -> Result<store::ListFilter, AppError> {
    no_nul(q)?;
    let status = match clean(&q.status).as_deref() {
        None => Some(store::Status::Awaiting),
        Some("all") => None,
        Some(s) => Some(store::Status::parse(s).ok_or_else(|| AppError::Invalid(format!("unknown status `{s}`")))?),
    };
    let group_id = match clean(&q.group) {
        None => None,
        Some(g) => {
            Some(g.parse::<i64>().map_err(|_| AppError::Invalid(format!("group: `{g}` is not a group number")))?)
        }
    };
    Ok(store::ListFilter {
        queue: clean(&q.queue),
        origin: clean(&q.origin),
        msg_type: clean(&q.msg_type),
        body_shape: clean(&q.shape),
        reason: clean(&q.reason),
        group_id,
        status,
        error_text: clean(&q.error),
        body_contains: clean(&q.body).map(String::into_bytes),
        message_id: clean(&q.message_id),
        newer_than: minutes("newer than", &q.newer_than_mins)?,
        older_than: minutes("older than", &q.older_than_mins)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_byte_in_a_text_filter_is_refused_naming_it_and_in_the_body_search_is_kept() {
        let q = DlQuery { error: Some("time\0out".into()), ..Default::default() };
        assert_eq!(filter(&q).unwrap_err(), AppError::Invalid("error: a NUL byte (%00) cannot be searched for".into()));
        let q = DlQuery { body: Some("a\0b".into()), ..Default::default() };
        assert_eq!(filter(&q).unwrap().body_contains, Some(b"a\0b".to_vec()));
    }
}
