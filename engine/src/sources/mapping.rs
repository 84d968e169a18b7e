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
    pub event_type: String,
    pub routing_key: String,
    pub exchange: String,
    pub payload: String,
    pub created_at: String,
    pub status: String,
    pub attempts: String,
    pub last_error: String,
    pub published_at: String,
    pub pending_cond: String,
    pub attempts_col: Option<String>,
    pub last_error_col: Option<String>,
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
        let columns: Vec<(String, String)> = sqlx::query!(
            r#"SELECT a.attname::text AS "name!", a.atttypid::regtype::text AS "ty!" FROM pg_attribute a
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped"#,
            &qualified,
        )
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|r| (r.name, r.ty))
        .collect();
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
        ty("event_id_column", &m.event_id_column)?;
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
        let exchange = match &m.exchange_column {
            Some(c) => {
                ty("exchange_column", c)?;
                format!("{}::text", q(c))
            }
            None => "''::text".into(),
        };
        let mut pending = Vec::new();
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
            pending.push(format!("NOT coalesce({}, false)", q(c)));
        }
        if let Some(c) = &m.published_at_column {
            let t = ty("published_at_column", c)?;
            published_at =
                if t == "timestamp without time zone" { format!("({} AT TIME ZONE 'UTC')", q(c)) } else { q(c) };
            pending.push(format!("{} IS NULL", q(c)));
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
        Ok(Cols {
            native: false,
            table: table_sql,
            id: q(&m.id_column),
            id_type,
            event_id: format!("{}::text", q(&m.event_id_column)),
            event_type: format!("{}::text", q(&m.type_column)),
            routing_key: format!("{}::text", q(&m.routing_key_column)),
            exchange,
            payload,
            created_at,
            status: format!("CASE WHEN {pending_cond} THEN 'pending' ELSE 'published' END"),
            attempts: attempts_col.as_ref().map(|c| format!("coalesce({c}, 0)::int")).unwrap_or_else(|| "0".into()),
            last_error: last_error_col.as_ref().map(|c| format!("{c}::text")).unwrap_or_else(|| "NULL::text".into()),
            published_at,
            pending_cond,
            attempts_col,
            last_error_col,
        })
    }
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
