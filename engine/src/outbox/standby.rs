//! One relay at a time: the holder of a session-level advisory lock in the table's database
//! publishes; the others stand by and try again every [`STANDBY_RETRY`]. When the holder dies
//! its database session ends, the lock is free, and a standby takes over.
//!
//! Policy: the holder's claims run on the very connection that holds the lock, so a lost lock
//! shows up at the next claim and the session stops.

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::{Mutex, MutexGuard};
use tokio_util::sync::CancellationToken;

/// How often a standby relay tries to take the lock.
pub const STANDBY_RETRY: Duration = Duration::from_secs(2);

/// What the lock is taken on.
pub(crate) enum LockOn {
    /// A mapped table, by its oid (`revenant.relay:<oid>`).
    Table(String),
    /// A commit-stream source, by its slot's name (`revenant.stream:<slot>`; the console's
    /// slot list finds the slot's reader by this lock).
    Slot(String),
}

pub(crate) struct Standby {
    source: String,
    pool: PgPool,
    on: LockOn,
    /// The connection holding the lock.
    conn: Mutex<Option<PgConnection>>,
}

impl Standby {
    pub(crate) fn new(source: &str, pool: PgPool, on: LockOn) -> Self {
        Self { source: source.to_string(), pool, on, conn: Mutex::new(None) }
    }

    fn what(&self) -> &str {
        match &self.on {
            LockOn::Table(t) | LockOn::Slot(t) => t,
        }
    }

    /// Waits until this relay holds the lock (or `shutdown`: false).
    pub(crate) async fn acquire(&self, shutdown: &CancellationToken) -> bool {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_mut() {
            if conn.ping().await.is_ok() {
                return true;
            }
            *slot = None;
        }
        let mut said = false;
        let mut since = Instant::now();
        loop {
            if shutdown.is_cancelled() {
                return false;
            }
            match self.try_lock().await {
                Ok(Some(conn)) => {
                    tracing::info!(source = %self.source, of = %self.what(), "this relay now publishes the source");
                    *slot = Some(conn);
                    return true;
                }
                Ok(None) if !said || since.elapsed() > Duration::from_secs(300) => {
                    tracing::info!(source = %self.source, of = %self.what(),
                        "another relay publishes this source; standing by to take over");
                    (said, since) = (true, Instant::now());
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(source = %self.source, error = %e, "cannot try the relay lock; retrying"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return false,
                _ = tokio::time::sleep(STANDBY_RETRY) => {}
            }
        }
    }

    async fn try_lock(&self) -> Result<Option<PgConnection>, sqlx::Error> {
        let mut conn = self.pool.acquire().await?.detach();
        let got: Option<bool> = match &self.on {
            LockOn::Table(table) => {
                sqlx::query_scalar!(
                    "SELECT pg_try_advisory_lock(hashtextextended('revenant.relay:' || to_regclass($1)::oid::text, 0))",
                    table
                )
                .fetch_one(&mut conn)
                .await?
            }
            LockOn::Slot(slot) => {
                sqlx::query_scalar!("SELECT pg_try_advisory_lock(hashtextextended('revenant.stream:' || $1, 0))", slot)
                    .fetch_one(&mut conn)
                    .await?
            }
        };
        if got == Some(true) {
            Ok(Some(conn))
        } else {
            let _ = conn.close().await;
            Ok(None)
        }
    }

    /// The lock's connection (`None` once it was lost or let go).
    pub(crate) async fn conn(&self) -> MutexGuard<'_, Option<PgConnection>> {
        self.conn.lock().await
    }

    /// Lets the lock go (clean stop): a standby takes over at its next try.
    pub(crate) async fn release(&self) {
        if let Some(conn) = self.conn.lock().await.take() {
            let _ = conn.close().await;
        }
    }
}
