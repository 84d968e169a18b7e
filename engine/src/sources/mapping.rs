//! A source's columns as SQL expressions, and the start-up check of a declared mapping.

use crate::settings::MappedOutbox;

#[derive(Debug, thiserror::Error)]
pub enum MappingError {
    #[error("table `{0}` does not exist")]
    NoTable(String),
    #[error("column `{column}` (set as {key}) does not exist in table `{table}`")]
    NoColumn { table: String, key: &'static str, column: String },
    #[error("column `{column}` (set as {key}) has type {ty}, which Revenant cannot read as {want}")]
    BadType { column: String, key: &'static str, ty: String, want: &'static str },
    #[error("`{key}` = `{column}`: {reason}")]
    Unsupported { key: &'static str, column: String, reason: String },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// SQL expressions for one source. Every name inside is a quoted identifier that was
/// checked to exist, or a constant.
#[derive(Debug, Clone)]
pub struct Cols {
    pub native: bool,
    pub table: String,
    pub id: String,
    /// PostgreSQL type of the id column, for casting cursors and id lists.
    pub id_type: String,
    pub event_id: String,
    /// The event id column itself, and its type, to look a row up by an id its index can
    /// use (`event_id` above is cast to text for display and filters).
    pub event_id_col: String,
    pub event_id_type: String,
    pub event_type: String,
    pub routing_key: String,
    pub exchange: String,
    pub payload: String,
    pub created_at: String,
    pub status: String,
    pub attempts: String,
    pub last_error: String,
    pub published_at: String,
    /// The table's own "not published yet" test: what the relay claims and marks.
    pub pending_cond: String,
    pub attempts_col: Option<String>,
    pub last_error_col: Option<String>,
    /// The console's buckets: pending (not failed or archived), failed, archived. A mapped
    /// table that Revenant does not relay has no failed or archived rows (`None`).
    pub bucket_pending: String,
    pub bucket_failed: Option<String>,
    pub bucket_archived: Option<String>,
    /// For the detail page: when the next attempt is due, why the row was archived.
    pub next_attempt_at: String,
    pub archived_reason: String,
    /// What the relay publishes besides the row's columns above.
    pub headers: String,
    pub content_type: String,
    /// The `SET` list that marks a row published the way the table does.
    pub mark_published_set: String,
    /// The source's name as an SQL literal (the key of its rows in `revenant.relay_state`).
    pub source_literal: String,
    /// Revenant relays this mapped table and keeps its retry state in `revenant.relay_state`.
    pub relayed: bool,
}

/// Where Revenant keeps attempts, errors, failed and archived states for the rows of mapped
/// tables it relays: in the source's own database, so a claim, a mark and a console list
/// each read the table and its state in one statement.
pub const RELAY_STATE_DDL: &str = include_str!("../../../migrations/0011_relay_state.sql");
/// The commit stream's column in `revenant.relay_state` (idempotent).
pub const RELAY_STATE_STREAM_DDL: &str = include_str!("../../../migrations/0027_relay_state_stream_held.sql");

/// An SQL string literal (standard_conforming_strings is on since PostgreSQL 9.1).
pub fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Cols {
    pub fn native() -> Cols {
        Cols {
            native: true,
            table: "outbox".into(),
            id: "id".into(),
            id_type: "bigint".into(),
            event_id: "event_id::text".into(),
            event_id_col: "event_id".into(),
            event_id_type: "uuid".into(),
            event_type: "event_type".into(),
            routing_key: "routing_key".into(),
            exchange: "exchange".into(),
            payload: "payload".into(),
            created_at: "created_at".into(),
            status: "status".into(),
            attempts: "attempts".into(),
            last_error: "last_error".into(),
            published_at: "published_at".into(),
            pending_cond: "status = 'pending'".into(),
            attempts_col: Some("attempts".into()),
            last_error_col: Some("last_error".into()),
            bucket_pending: "status = 'pending'".into(),
            bucket_failed: Some("status = 'failed'".into()),
            bucket_archived: Some("status = 'archived'".into()),
            next_attempt_at: "next_attempt_at".into(),
            archived_reason: "archived_reason".into(),
            headers: "headers".into(),
            content_type: "content_type".into(),
            mark_published_set: "status = 'published', published_at = now()".into(),
            source_literal: quote_literal(super::NATIVE),
            relayed: true,
        }
    }

    /// Checks the mapping against the database and builds the expressions.
    pub async fn mapped(pool: &sqlx::PgPool, m: &MappedOutbox) -> Result<Cols, MappingError> {
        let (schema, table) = match m.table.split_once('.') {
            Some((s, t)) => (Some(s.to_string()), t.to_string()),
            None => (None, m.table.clone()),
        };
        // Resolved like the queries will be: through the connection's search_path.
        let qualified = match &schema {
            Some(s) => format!("{}.{}", quote_ident(s), quote_ident(&table)),
            None => quote_ident(&table),
        };
        // The system catalog is the same in every database, so the check against Revenant's holds.
        let described = sqlx::query!(
            r#"SELECT a.attname::text AS "name!", a.atttypid::regtype::text AS "ty!", a.attnotnull AS "not_null!"
             FROM pg_attribute a
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped"#,
            &qualified,
        )
        .fetch_all(pool)
        .await?;
        let not_null: std::collections::HashSet<String> =
            described.iter().filter(|r| r.not_null).map(|r| r.name.clone()).collect();
        let columns: Vec<(String, String)> = described.into_iter().map(|r| (r.name, r.ty)).collect();
        if columns.is_empty() {
            return Err(MappingError::NoTable(m.table.clone()));
        }
        let ty = |key: &'static str, col: &str| -> Result<String, MappingError> {
            columns.iter().find(|(c, _)| c == col).map(|(_, t)| t.clone()).ok_or_else(|| MappingError::NoColumn {
                table: m.table.clone(),
                key,
                column: col.to_string(),
            })
        };
        let q = |c: &str| quote_ident(c);
        let table_sql = match &schema {
            Some(s) => format!("{}.{}", q(s), q(&table)),
            None => q(&table),
        };
        let id_type = ty("id_column", &m.id_column)?;
        let event_id_type = ty("event_id_column", &m.event_id_column)?;
        ty("type_column", &m.type_column)?;
        ty("routing_key_column", &m.routing_key_column)?;
        let payload_ty = ty("payload_column", &m.payload_column)?;
        let payload = match payload_ty.as_str() {
            "bytea" => q(&m.payload_column),
            "json" | "jsonb" | "text" | "character varying" | "character" | "xml" => {
                format!("convert_to({}::text, 'UTF8')", q(&m.payload_column))
            }
            other => {
                return Err(MappingError::BadType {
                    column: m.payload_column.clone(),
                    key: "payload_column",
                    ty: other.into(),
                    want: "bytes or text",
                });
            }
        };
        let created_ty = ty("created_at_column", &m.created_at_column)?;
        let created_at = match created_ty.as_str() {
            "timestamp with time zone" => q(&m.created_at_column),
            "timestamp without time zone" => format!("({} AT TIME ZONE 'UTC')", q(&m.created_at_column)),
            other => {
                return Err(MappingError::BadType {
                    column: m.created_at_column.clone(),
                    key: "created_at_column",
                    ty: other.into(),
                    want: "a timestamp",
                });
            }
        };
        let exchange = match (&m.exchange_column, &m.exchange) {
            (Some(c), _) => {
                ty("exchange_column", c)?;
                format!("{}::text", q(c))
            }
            (None, Some(e)) => format!("{}::text", quote_literal(e)),
            (None, None) => "''::text".into(),
        };
        let mut pending = Vec::new();
        let mut sets = Vec::new();
        let mut published_at = "NULL::timestamptz".to_string();
        if let Some(c) = &m.published_flag_column {
            let t = ty("published_flag_column", c)?;
            if t != "boolean" {
                return Err(MappingError::BadType {
                    column: c.clone(),
                    key: "published_flag_column",
                    ty: t,
                    want: "a boolean",
                });
            }
            // Written as a partial index on the pending rows would be (`WHERE NOT publicado`), so
            // the relay's claim and the Pending list can use one.
            pending.push(if not_null.contains(c) { format!("NOT {}", q(c)) } else { format!("{} IS NOT TRUE", q(c)) });
            sets.push(format!("{} = true", q(c)));
        }
        if let Some(c) = &m.published_at_column {
            let t = ty("published_at_column", c)?;
            // A timestamp without time zone is read and written as UTC, as the console shows it.
            let (read, now) = match t.as_str() {
                "timestamp without time zone" => {
                    (format!("({} AT TIME ZONE 'UTC')", q(c)), "(now() AT TIME ZONE 'UTC')")
                }
                "timestamp with time zone" => (q(c), "now()"),
                other => {
                    return Err(MappingError::BadType {
                        column: c.clone(),
                        key: "published_at_column",
                        ty: other.into(),
                        want: "a timestamp",
                    });
                }
            };
            published_at = read;
            pending.push(format!("{} IS NULL", q(c)));
            sets.push(format!("{} = {now}", q(c)));
        }
        let pending_cond = format!("({})", pending.join(" AND "));
        let attempts_col = match &m.attempts_column {
            Some(c) => {
                ty("attempts_column", c)?;
                Some(q(c))
            }
            None => None,
        };
        let last_error_col = match &m.last_error_column {
            Some(c) => {
                ty("last_error_column", c)?;
                Some(q(c))
            }
            None => None,
        };
        let headers = match &m.headers_column {
            Some(c) => {
                let t = ty("headers_column", c)?;
                if !matches!(t.as_str(), "json" | "jsonb") {
                    return Err(MappingError::BadType {
                        column: c.clone(),
                        key: "headers_column",
                        ty: t,
                        want: "json or jsonb",
                    });
                }
                format!("coalesce({}::jsonb, '{{}}'::jsonb)", q(c))
            }
            None => "'{}'::jsonb".into(),
        };
        let content_type = match &m.content_type {
            Some(ct) => format!("{}::text", quote_literal(ct)),
            None => match payload_ty.as_str() {
                "json" | "jsonb" => "'application/json'::text".into(),
                "bytea" => "'application/octet-stream'::text".into(),
                "xml" => "'application/xml'::text".into(),
                _ => "'text/plain; charset=utf-8'::text".into(),
            },
        };
        let source_literal = quote_literal(&m.name);
        let attempts_plain =
            attempts_col.as_ref().map(|c| format!("coalesce({c}, 0)::int")).unwrap_or_else(|| "0".into());
        let last_error_plain =
            last_error_col.as_ref().map(|c| format!("{c}::text")).unwrap_or_else(|| "NULL::text".into());
        let mut cols = Cols {
            native: false,
            id: q(&m.id_column),
            id_type,
            event_id: format!("{}::text", q(&m.event_id_column)),
            event_id_col: q(&m.event_id_column),
            event_id_type,
            event_type: format!("{}::text", q(&m.type_column)),
            routing_key: format!("{}::text", q(&m.routing_key_column)),
            exchange,
            payload,
            created_at,
            status: format!("CASE WHEN {pending_cond} THEN 'pending' ELSE 'published' END"),
            attempts: attempts_plain,
            last_error: last_error_plain,
            published_at,
            bucket_pending: pending_cond.clone(),
            bucket_failed: None,
            bucket_archived: None,
            next_attempt_at: "NULL::timestamptz".into(),
            archived_reason: "NULL::text".into(),
            pending_cond,
            attempts_col,
            last_error_col,
            headers,
            content_type,
            mark_published_set: sets.join(", "),
            source_literal,
            relayed: false,
            table: table_sql,
        };
        if m.relay {
            if !matches!(cols.id_type.as_str(), "smallint" | "integer" | "bigint") {
                return Err(MappingError::Unsupported {
                    key: "id_column",
                    column: m.id_column.clone(),
                    reason: format!(
                        "a relayed table needs an integer id column (this one is {}); the event id may be any type",
                        cols.id_type
                    ),
                });
            }
            cols.with_relay_state();
        }
        Ok(cols)
    }

    /// The row's id as `revenant.relay_state` keys it.
    pub fn row_key(&self) -> String {
        format!("{}.{}::bigint", self.table, self.id)
    }

    /// `revenant.relay_state`'s `col` for the current row of the table (NULL when it has none).
    fn state(&self, col: &str) -> String {
        format!(
            "(SELECT s.{col} FROM revenant.relay_state s WHERE s.source = {} AND s.row_id = {})",
            self.source_literal,
            self.row_key()
        )
    }

    /// Rows of this table whose state is `status`, as a condition on the current row.
    fn in_state(&self, status: &str) -> String {
        format!(
            "{} IN (SELECT s.row_id FROM revenant.relay_state s WHERE s.source = {} AND s.status = '{status}')",
            self.row_key(),
            self.source_literal
        )
    }

    /// Switches the console's expressions to read the relay's state beside the table's columns.
    fn with_relay_state(&mut self) {
        let p = self.pending_cond.clone();
        let status = self.state("status");
        self.status = format!(
            "CASE WHEN NOT {p} THEN 'published' WHEN {status} IN ('failed', 'archived') THEN {status} ELSE 'pending' END"
        );
        self.attempts = format!("coalesce({}, {})::int", self.state("attempts"), self.attempts);
        self.last_error = format!("coalesce({}, {})", self.state("last_error"), self.last_error);
        self.bucket_pending = format!(
            "({p} AND NOT EXISTS (SELECT 1 FROM revenant.relay_state s WHERE s.source = {} AND s.row_id = {} \
             AND s.status IN ('failed', 'archived')))",
            self.source_literal,
            self.row_key()
        );
        self.bucket_failed = Some(format!("({p} AND {})", self.in_state("failed")));
        self.bucket_archived = Some(format!("({p} AND {})", self.in_state("archived")));
        self.next_attempt_at = format!("CASE WHEN {p} THEN {} END", self.state("next_attempt_at"));
        self.archived_reason = self.state("archived_reason");
        self.relayed = true;
    }
}

/// Creates `revenant.relay_state` in a relayed source's database when it is missing, and
/// gives one made by an earlier version the commit stream's column.
pub async fn ensure_relay_state(pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    let exists: Option<String> =
        sqlx::query_scalar!("SELECT to_regclass('revenant.relay_state')::text").fetch_one(pool).await?;
    if exists.is_none()
        && let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(RELAY_STATE_DDL)).execute(pool).await
    {
        // Two processes creating it at once: the loser finds it made.
        let made: Option<String> =
            sqlx::query_scalar!("SELECT to_regclass('revenant.relay_state')::text").fetch_one(pool).await?;
        if made.is_none() {
            return Err(e);
        }
    }
    let has_lsn = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('revenant.relay_state')
                            AND attname = 'stream_lsn' AND NOT attisdropped) AS "x!""#
    )
    .fetch_one(pool)
    .await?;
    if !has_lsn {
        sqlx::raw_sql(sqlx::AssertSqlSafe(RELAY_STATE_STREAM_DDL)).execute(pool).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_and_escaped() {
        assert_eq!(quote_ident("tipo"), "\"tipo\"");
        assert_eq!(quote_ident("a\"; DROP TABLE x; --"), "\"a\"\"; DROP TABLE x; --\"");
    }
}
