//! Reliability contracts: how much each queue's messages matter (critical, standard,
//! disposable), set per queue name or `*` glob, from the console or from revenant.toml.
//!
//! Policy: the most specific pattern wins (an exact name over any glob, then the glob with
//! more literal characters); at equal specificity a console contract beats a config one, so
//! an operator can override the file without a deploy. Unmatched queues are `standard`.
//! Every change writes its audit entry in the same transaction, and needs at least the
//! operator role.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{Acquire, PgConnection, PgExecutor};

use crate::{
    audit,
    auth::{Principal, Role},
};
pub use types::Level;

/// Where a contract was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    Console,
    Config,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contract {
    /// The row id; `None` for a contract from revenant.toml.
    pub id: Option<i64>,
    pub vhost: String,
    pub pattern: String,
    pub level: Level,
    pub note: Option<String>,
    pub origin: Origin,
    pub created_by: Option<String>,
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    #[error("{0}")]
    Invalid(String),
    #[error("changing queue contracts needs the operator role")]
    Forbidden,
    #[error("no queue contract with id {0}")]
    NotFound(i64),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Whether a `*` glob matches a whole queue name (`*` matches any run, dots included).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Greedy with backtracking to the last star: linear in practice, no regex engine needed.
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && p[pi] != '*' && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// How specific a pattern is: exact names first, then more literal characters.
fn specificity(c: &Contract) -> (bool, usize, bool) {
    (!c.pattern.contains('*'), c.pattern.chars().filter(|&ch| ch != '*').count(), c.origin == Origin::Console)
}

/// The contract that governs `queue` in `vhost`, if any matches.
pub fn governing<'a>(contracts: &'a [Contract], vhost: &str, queue: &str) -> Option<&'a Contract> {
    contracts
        .iter()
        .filter(|c| c.vhost == vhost && glob_matches(&c.pattern, queue))
        // Ties on specificity fall to the lexically smallest pattern, so the answer is stable.
        .max_by(|a, b| specificity(a).cmp(&specificity(b)).then_with(|| b.pattern.cmp(&a.pattern)))
}

/// The level of `queue`: its governing contract's, or `standard`.
pub fn level_for(contracts: &[Contract], vhost: &str, queue: &str) -> Level {
    governing(contracts, vhost, queue).map_or(Level::Standard, |c| c.level)
}

pub fn validate_pattern(pattern: &str) -> Result<(), ContractError> {
    let p = pattern.trim();
    if p.is_empty() || p.len() > 255 || p != pattern {
        return Err(ContractError::Invalid(
            "a pattern is 1 to 255 characters, without leading or trailing spaces".into(),
        ));
    }
    Ok(())
}

/// Contracts from revenant.toml, for `vhost`, as `(pattern, level)` pairs.
pub fn from_config(vhost: &str, entries: &[(String, Level)]) -> Result<Vec<Contract>, ContractError> {
    entries
        .iter()
        .map(|(pattern, level)| {
            validate_pattern(pattern)?;
            Ok(Contract {
                id: None,
                vhost: vhost.to_string(),
                pattern: pattern.clone(),
                level: *level,
                note: None,
                origin: Origin::Config,
                created_by: None,
                updated_at: None,
            })
        })
        .collect()
}

/// Console contracts and config contracts as one list: a console contract for the same
/// vhost and pattern replaces the config one.
pub fn merged(console: Vec<Contract>, config: Vec<Contract>) -> Vec<Contract> {
    let mut all = console;
    let extra: Vec<Contract> =
        config.into_iter().filter(|c| !all.iter().any(|d| d.vhost == c.vhost && d.pattern == c.pattern)).collect();
    all.extend(extra);
    all
}

/// A `queue_contracts` row.
struct Row {
    id: i64,
    vhost: String,
    pattern: String,
    level: String,
    note: Option<String>,
    created_by: String,
    updated_at: DateTime<Utc>,
}

fn from_row(r: Row) -> Contract {
    Contract {
        id: Some(r.id),
        vhost: r.vhost,
        pattern: r.pattern,
        // The table's CHECK constraint admits only the three levels.
        level: Level::parse(&r.level).unwrap_or(Level::Standard),
        note: r.note,
        origin: Origin::Console,
        created_by: Some(r.created_by),
        updated_at: Some(r.updated_at),
    }
}

/// The console's contracts, for one vhost or all, by vhost then pattern.
pub async fn list(db: impl PgExecutor<'_>, vhost: Option<&str>) -> Result<Vec<Contract>, sqlx::Error> {
    let rows = sqlx::query_as!(
        Row,
        "SELECT id, vhost, pattern, level, note, created_by, updated_at FROM queue_contracts
         WHERE ($1::text IS NULL OR vhost = $1) ORDER BY vhost, pattern",
        vhost,
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(from_row).collect())
}

fn allowed(actor: &Principal) -> Result<(), ContractError> {
    if actor.role >= Role::Operator { Ok(()) } else { Err(ContractError::Forbidden) }
}

/// Creates or replaces the contract for `(vhost, pattern)`, with its `contract.set` audit entry.
pub async fn set(
    conn: &mut PgConnection,
    actor: &Principal,
    ip: Option<&str>,
    vhost: &str,
    pattern: &str,
    level: Level,
    note: Option<&str>,
) -> Result<Contract, ContractError> {
    allowed(actor)?;
    validate_pattern(pattern)?;
    let note = note.map(str::trim).filter(|n| !n.is_empty());
    // A savepoint when the caller already holds a transaction, a transaction otherwise.
    let mut tx = conn.begin().await?;
    let previous: Option<String> = sqlx::query_scalar!(
        "SELECT level FROM queue_contracts WHERE vhost = $1 AND pattern = $2 FOR UPDATE",
        vhost,
        pattern
    )
    .fetch_optional(&mut *tx)
    .await?;
    let row = sqlx::query_as!(
        Row,
        "INSERT INTO queue_contracts (vhost, pattern, level, note, created_by) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT ON CONSTRAINT queue_contracts_vhost_pattern_key
         DO UPDATE SET level = EXCLUDED.level, note = EXCLUDED.note, updated_at = now()
         RETURNING id, vhost, pattern, level, note, created_by, updated_at",
        vhost,
        pattern,
        level.as_str(),
        note,
        &actor.username,
    )
    .fetch_one(&mut *tx)
    .await?;
    let contract = from_row(row);
    audit::record(
        &mut *tx,
        audit::Entry {
            actor,
            source_ip: ip,
            action: "contract.set",
            target: Some(format!("queue contract {vhost} {pattern}")),
            filter: None,
            item_count: 1,
            outcome: "ok",
            detail: Some(serde_json::json!({
                "vhost": vhost, "pattern": pattern, "level": level.as_str(),
                "previous_level": previous, "note": note,
            })),
        },
    )
    .await?;
    tx.commit().await?;
    tracing::info!(actor = %actor.username, vhost, pattern, level = level.as_str(), "queue contract set");
    Ok(contract)
}

/// Deletes a console contract, with its `contract.delete` audit entry; returns what it was.
pub async fn delete(
    conn: &mut PgConnection,
    actor: &Principal,
    ip: Option<&str>,
    id: i64,
) -> Result<Contract, ContractError> {
    allowed(actor)?;
    let mut tx = conn.begin().await?;
    let row = sqlx::query_as!(
        Row,
        "DELETE FROM queue_contracts WHERE id = $1 RETURNING id, vhost, pattern, level, note, created_by, updated_at",
        id,
    )
    .fetch_optional(&mut *tx)
    .await?;
    let contract = from_row(row.ok_or(ContractError::NotFound(id))?);
    audit::record(
        &mut *tx,
        audit::Entry {
            actor,
            source_ip: ip,
            action: "contract.delete",
            target: Some(format!("queue contract {} {}", contract.vhost, contract.pattern)),
            filter: None,
            item_count: 1,
            outcome: "ok",
            detail: Some(serde_json::json!({
                "vhost": contract.vhost, "pattern": contract.pattern, "level": contract.level.as_str(),
            })),
        },
    )
    .await?;
    tx.commit().await?;
    tracing::info!(actor = %actor.username, id, "queue contract deleted");
    Ok(contract)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(pattern: &str, level: Level, origin: Origin) -> Contract {
        Contract {
            id: None,
            vhost: "/".into(),
            pattern: pattern.into(),
            level,
            note: None,
            origin,
            created_by: None,
            updated_at: None,
        }
    }

    #[test]
    fn globs_match_whole_names_with_star_spanning_dots() {
        assert!(glob_matches("orders.*", "orders.created"));
        assert!(glob_matches("orders.*", "orders.eu.created"));
        assert!(!glob_matches("orders.*", "orders"));
        assert!(!glob_matches("orders.*", "xorders.created"));
        assert!(glob_matches("*.dlq", "orders.dlq"));
        assert!(glob_matches("*", "anything"));
        assert!(glob_matches("a*b*c", "a-x-b-y-c"));
        assert!(!glob_matches("a*b*c", "a-x-b-y"));
        assert!(glob_matches("exact", "exact"));
        assert!(!glob_matches("exact", "exact2"));
    }

    #[test]
    fn the_most_specific_pattern_wins_and_unmatched_queues_are_standard() {
        let all = vec![
            c("*", Level::Disposable, Origin::Config),
            c("orders.*", Level::Critical, Origin::Config),
            c("orders.audit", Level::Disposable, Origin::Config),
        ];
        assert_eq!(level_for(&all, "/", "orders.created"), Level::Critical);
        assert_eq!(level_for(&all, "/", "orders.audit"), Level::Disposable);
        assert_eq!(level_for(&all, "/", "misc"), Level::Disposable);
        assert_eq!(level_for(&all[1..], "/", "misc"), Level::Standard);
        assert_eq!(level_for(&all, "other-vhost", "orders.created"), Level::Standard);
    }

    #[test]
    fn a_console_contract_overrides_the_config_one_for_the_same_pattern() {
        let config = from_config("/", &[("orders.*".into(), Level::Standard)]).unwrap();
        let console = vec![c("orders.*", Level::Critical, Origin::Console)];
        let all = merged(console, config);
        assert_eq!(all.len(), 1);
        assert_eq!(level_for(&all, "/", "orders.x"), Level::Critical);
    }

    #[test]
    fn levels_parse_from_config_words_and_nothing_else() {
        assert_eq!(Level::parse("Critical"), Some(Level::Critical));
        assert_eq!(Level::parse("disposable"), Some(Level::Disposable));
        assert_eq!(Level::parse("gold"), None);
        assert!(from_config("/", &[(" ".into(), Level::Standard)]).is_err());
    }
}
