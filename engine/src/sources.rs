//! Outbox sources: Revenant's own `outbox` table and existing outbox tables that services
//! already have, read and operated through a declared mapping of table and column names.
//!
//! Policy: a mapping is checked against the live database at start-up; a table or column
//! that does not exist stops start-up with a message naming it. Mapped names are only
//! ever used quoted, after that check, so a mapping cannot inject SQL. Every list query is
//! the same for both kinds: the mapping turns into SQL expressions ([`mapping::Cols`]).

pub mod actions;
pub mod mapping;
pub mod query;

use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;

use crate::settings::Settings;

pub const NATIVE: &str = "revenant";

#[derive(Clone)]
pub struct Source {
    pub name: String,
    pub pool: PgPool,
    pub cols: mapping::Cols,
    pub stuck_after: Duration,
    /// Attempts at or above which a pending row counts as stuck.
    pub stuck_attempts: i32,
}

impl Source {
    pub fn native(&self) -> bool {
        self.cols.native
    }
}

/// Opens every declared source: Revenant's own first, then each mapping, validated.
pub async fn open_all(settings: &Settings, own: &PgPool) -> anyhow::Result<Vec<Source>> {
    let mut out = vec![Source {
        name: NATIVE.to_string(),
        pool: own.clone(),
        cols: mapping::Cols::native(),
        stuck_after: settings.outbox_stuck_after,
        stuck_attempts: 3,
    }];
    for m in &settings.mapped_outboxes {
        let pool = match &m.database_url {
            Some(url) => crate::db::connect(url, 5)
                .await
                .with_context(|| format!("outbox source `{}`: cannot connect to its database_url", m.name))?,
            None => own.clone(),
        };
        let cols = mapping::Cols::mapped(&pool, m).await.with_context(|| format!("outbox source `{}`", m.name))?;
        out.push(Source {
            name: m.name.clone(),
            pool,
            cols,
            stuck_after: Duration::from_secs(m.stuck_after_secs.max(1) as u64),
            stuck_attempts: 3,
        });
    }
    Ok(out)
}

pub fn find<'a>(sources: &'a [Source], name: &str) -> Option<&'a Source> {
    sources.iter().find(|s| s.name == name)
}
