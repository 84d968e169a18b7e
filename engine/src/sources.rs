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

use crate::settings::{MappedOutbox, Settings};

pub const NATIVE: &str = "revenant";

#[derive(Clone)]
pub struct Source {
    pub name: String,
    pub pool: PgPool,
    pub cols: mapping::Cols,
    pub stuck_after: Duration,
    /// Attempts at or above which a pending row counts as stuck.
    pub stuck_attempts: i32,
    /// Whether `revenant relay` publishes this source (always for Revenant's own outbox).
    pub relay: bool,
    /// The longest wait between a relay's claims of this table while it is idle (adaptive
    /// polling, `outbox::poll`).
    pub poll: Duration,
    /// How the relay finds new rows: polling, or the commit stream.
    pub capture: crate::settings::Capture,
    /// The source's own `database_url`, if it has one (the commit stream's connection takes
    /// its password from it); `None`: Revenant's database.
    pub database_url: Option<String>,
}

impl Source {
    pub fn native(&self) -> bool {
        self.cols.native
    }
}

/// Opens every declared source: Revenant's own first, then each declared one, validated.
pub async fn open_all(settings: &Settings, own: &PgPool) -> anyhow::Result<Vec<Source>> {
    let mut out = vec![Source {
        name: NATIVE.to_string(),
        pool: own.clone(),
        cols: mapping::Cols::native(),
        stuck_after: settings.outbox_stuck_after,
        stuck_attempts: 3,
        relay: true,
        poll: settings.relay.poll,
        capture: settings.relay.capture.clone(),
        database_url: None,
    }];
    for m in &settings.mapped_outboxes {
        out.push(open(m, own).await?);
    }
    Ok(out)
}

/// Opens one declared source (see [`open_all`]).
pub async fn open(m: &MappedOutbox, own: &PgPool) -> anyhow::Result<Source> {
    opened(m, own).await.with_context(|| format!("outbox source `{}`", m.name))
}

async fn opened(m: &MappedOutbox, own: &PgPool) -> anyhow::Result<Source> {
    let pool = match &m.database_url {
        Some(url) => crate::db::connect(url, 5).await.context("cannot connect to its database_url")?,
        None => own.clone(),
    };
    let cols = if m.native {
        let installed: Option<String> =
            sqlx::query_scalar!("SELECT to_regclass('revenant.outbox')::text").fetch_one(&pool).await?;
        if installed.is_none() {
            anyhow::bail!(
                "`native = true` but its database has no revenant.outbox; run `revenant outbox install --database-url …` first"
            );
        }
        if crate::outbox::install::has_insert_notify(&pool).await? {
            tracing::warn!(
                source = %m.name,
                "revenant.outbox there still has the insert NOTIFY trigger of earlier versions, which serialises the \
                 service's commits; run `revenant outbox install --database-url …` to drop it"
            );
        }
        mapping::Cols::native()
    } else {
        if m.relay {
            mapping::ensure_relay_state(&pool)
                .await
                .context("`relay = true` keeps retry state in revenant.relay_state in the table's database, and it cannot be created there")?;
        }
        mapping::Cols::mapped(&pool, m).await?
    };
    Ok(Source {
        name: m.name.clone(),
        pool,
        cols,
        stuck_after: Duration::from_secs(m.stuck_after_secs.max(1) as u64),
        stuck_attempts: 3,
        relay: m.relay,
        poll: Duration::from_millis(m.poll_ms as u64),
        // Checked with the other settings (settings::sources).
        capture: crate::settings::capture_of(m),
        database_url: m.database_url.clone(),
    })
}

pub fn find<'a>(sources: &'a [Source], name: &str) -> Option<&'a Source> {
    sources.iter().find(|s| s.name == name)
}
