//! The audit log: who did what, to how many items, from where, with what outcome.
//!
//! Policy: callers write the entry with the same executor (transaction) as the effect it
//! describes, so an action and its record commit or roll back together. Nothing updates or
//! deletes entries. Every role reads the log, but the detail of an action in
//! [`ADMIN_ONLY_DETAIL`] is read by admins only: the list blanks it for anyone else, and a
//! text search by anyone else does not look into it (else matching rows would tell it).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgExecutor, Postgres, QueryBuilder};

use crate::auth::{Principal, Role};

/// Actions whose detail only admins read: a webhook "Send test"'s HTTP code, transport error
/// and host, which only admins see of a real delivery too (`alerts`). Others see the entry
/// and its outcome (`ok` / `failed`).
pub const ADMIN_ONLY_DETAIL: &[&str] = &["alert.test"];

/// Who acts, from where: what every audit entry needs.
pub struct Actor<'a> {
    pub principal: &'a Principal,
    pub ip: Option<&'a str>,
}

#[derive(Debug, Clone)]
pub struct Entry<'a> {
    pub actor: &'a Principal,
    pub source_ip: Option<&'a str>,
    pub action: &'a str,
    pub target: Option<String>,
    pub filter: Option<serde_json::Value>,
    pub item_count: i64,
    pub outcome: &'a str,
    pub detail: Option<serde_json::Value>,
}

pub async fn record(db: impl PgExecutor<'_>, e: Entry<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        "INSERT INTO audit_log (actor, actor_role, source_ip, action, target, filter, item_count, outcome, detail)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        e.actor.username,
        e.actor.role.as_str(),
        e.source_ip,
        e.action,
        e.target,
        e.filter,
        e.item_count,
        e.outcome,
        e.detail
    )
    .fetch_one(db)
    .await
}

/// For actions by the CLI (e.g. `revenant user add`), which has no session.
pub fn cli_principal() -> Principal {
    Principal {
        username: format!("cli:{}", std::env::var("USER").unwrap_or_else(|_| "unknown".into())),
        role: crate::auth::Role::Admin,
    }
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct AuditRow {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub actor_role: String,
    pub source_ip: Option<String>,
    pub action: String,
    pub target: Option<String>,
    pub filter: Option<serde_json::Value>,
    pub item_count: i64,
    pub outcome: String,
    pub detail: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<String>,
    pub text: Option<String>,
    /// Keyset cursor: entries with an id below this.
    pub before_id: Option<i64>,
    /// Keyset cursor the other way: the entries just above this id (the previous page).
    /// Ignored when `before_id` is set.
    pub after_id: Option<i64>,
}

/// Whether `reader` may read the detail of the row at hand, as SQL (see the module policy).
fn push_detail_readable(q: &mut QueryBuilder<Postgres>, reader: Role) {
    if reader.at_least(Role::Admin) {
        q.push("true");
    } else {
        let hidden: Vec<String> = ADMIN_ONLY_DETAIL.iter().map(|a| a.to_string()).collect();
        q.push("action <> ALL(").push_bind(hidden).push(")");
    }
}

/// A page of entries as `reader` may read them, newest first; one more than `limit` is
/// fetched to tell if more exist (older ones, or with `after_id`, newer ones: that page is read
/// upwards, then reversed).
pub async fn list(
    db: impl PgExecutor<'_>,
    f: &AuditFilter,
    reader: Role,
    limit: i64,
) -> Result<(Vec<AuditRow>, bool), sqlx::Error> {
    // Runtime-checked: the WHERE clause depends on which filters and cursor are given, and
    // which details are readable on the reader's role.
    let mut q = QueryBuilder::<Postgres>::new(
        "SELECT id, at, actor, actor_role, source_ip, action, target, filter, item_count, outcome, CASE WHEN ",
    );
    push_detail_readable(&mut q, reader);
    q.push(" THEN detail END AS detail FROM audit_log WHERE true");
    if let Some(a) = &f.actor {
        q.push(" AND actor = ").push_bind(a.clone());
    }
    if let Some(a) = &f.action {
        q.push(" AND action = ").push_bind(a.clone());
    }
    if let Some(t) = &f.text {
        let pat = format!("%{}%", t.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
        q.push(" AND (coalesce(target, '') ILIKE ").push_bind(pat.clone());
        q.push(" OR (");
        push_detail_readable(&mut q, reader);
        q.push(" AND coalesce(detail::text, '') ILIKE ").push_bind(pat).push("))");
    }
    let upwards = match (f.before_id, f.after_id) {
        (Some(b), _) => {
            q.push(" AND id < ").push_bind(b);
            false
        }
        (None, Some(a)) => {
            q.push(" AND id > ").push_bind(a);
            true
        }
        (None, None) => false,
    };
    q.push(if upwards { " ORDER BY id ASC LIMIT " } else { " ORDER BY id DESC LIMIT " }).push_bind(limit + 1);
    let mut rows: Vec<AuditRow> = q.build_query_as().fetch_all(db).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    if upwards {
        rows.reverse();
    }
    Ok((rows, more))
}
