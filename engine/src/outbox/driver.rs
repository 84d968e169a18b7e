//! What differs between the kinds of relayed table: one driver per kind, one file each.
//!
//! Policy: the relay's session (claim ahead, publish with confirms, group-committed marks, the
//! crash bound) is the same for every kind; a driver is only the table's side of it, as
//! River's `riverdriver` keeps the queue logic apart from each database's SQL:
//! - [`super::native`]: Revenant's `outbox` schema, in Revenant's database or installed in a
//!   service's; shared by leases (`FOR UPDATE SKIP LOCKED`), so any number of relays at once;
//! - [`super::mapped`]: a service's own outbox table read through its mapping; no lease
//!   columns, so one relay at a time, the holder of the table's advisory lock.
//!
//! - [`super::streamed`]: Revenant's `outbox` schema or a mapped table read from the commit
//!   stream (logical replication): events of one key in commit order, one relay at a time per
//!   slot.
//!
//! A new kind is a new file implementing [`Driver`].

use std::{borrow::Cow, future::Future, time::Duration};

use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::store::{AttemptOutcome, ClaimedRow, FailedAttempt, StoreError};

/// Rows marked published, and each failed attempt's outcome.
pub(crate) type Written = (u64, Vec<(i64, AttemptOutcome)>);

pub(crate) trait Driver: Send + Sync + 'static {
    /// Waits until this relay may publish the table (or `shutdown`: false). A kind without
    /// leases takes its lock here; a leased kind may always publish.
    fn acquire(&self, _shutdown: &CancellationToken) -> impl Future<Output = bool> + Send {
        async { true }
    }

    /// A session ended: nothing of it is in flight any more (it drained before ending), and
    /// what it still held is to be claimed and sent again.
    fn reset(&self) {}

    /// Lets the table go on a clean stop, so a standby takes over at once.
    fn unlock(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Leases (or takes, under the lock) up to `batch` due rows.
    fn claim(
        &self,
        owner: Uuid,
        batch: i64,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<ClaimedRow>, StoreError>> + Send;

    /// Gives rows back unpublished, so they are claimed again now.
    fn release(&self, owner: Uuid, ids: &[i64]) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Whether a claimed row must not be sent once its deadline passed (a lease may have moved
    /// to another relay; a locked table's rows are ours while the lock is).
    fn leased(&self) -> bool;

    /// A row that can never be published as it stands: failed at once.
    fn mark_bad(
        &self,
        id: i64,
        owner: Uuid,
        reason: &str,
    ) -> impl Future<Output = Result<AttemptOutcome, StoreError>> + Send;

    /// Commits a group of marks in one transaction.
    fn write_marks(
        &self,
        owner: Uuid,
        max_attempts: i32,
        published: &[i64],
        failed: &[FailedAttempt],
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;

    /// After a flush's last attempt, marked or not: these rows are no longer in flight.
    fn flushed(&self, _ids: &[i64]) {}

    /// The broker refused this row's publish (or it was bad): its attempt is about to be
    /// marked. A kind that keeps a key's order holds the key back from now on.
    fn refused(&self, _id: i64) {}

    /// Rows with the same lane key take the same confirm channel, so they reach the broker in
    /// claim order: the routing key, or the kind's ordering key.
    fn lane_key<'r>(&self, row: &'r ClaimedRow) -> Cow<'r, [u8]> {
        Cow::Borrowed(row.routing_key.as_bytes())
    }

    /// Resolves when new rows may have arrived, for a kind that is told (the commit stream);
    /// the others are polled.
    fn arrived(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }

    /// A connection that wakes the relay when an operator retries a row, if the kind has one;
    /// new rows are found by polling.
    fn listen(&self) -> impl Future<Output = Option<PgListener>> + Send {
        async { None }
    }
}
