//! When RabbitMQ blocks publishers (a memory or disk alarm on any node of the cluster).
//!
//! Policy:
//! - the broker says so on each connection (`connection.blocked` with a reason such as "low on
//!   memory", then `connection.unblocked`); [`follow`] reads those notices into the role's
//!   [`BlockState`], which its heartbeat, `/metrics` and the Overview read;
//! - while blocked, lapin writes nothing to the socket: a publish or a confirm cannot complete.
//!   A wait bounded by [`within`] does not time out while the connection is blocked (nor for a
//!   whole timeout after the block ends), so a block never reads as "no confirm" and never ends
//!   a session: no reconnect, and no pile of blocked connections that cannot close;
//! - a connection that could not be closed at the end of a session is counted
//!   ([`BlockState::note_unclosed`]) and shown, never silently left behind.

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use lapin::{Connection, Event};
use serde::Serialize;
use tokio::{sync::watch, task::JoinHandle};

/// One block: what the broker gave as its reason, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Block {
    pub reason: String,
    pub since: DateTime<Utc>,
}

impl Block {
    pub fn secs(&self) -> u64 {
        (Utc::now() - self.since).num_seconds().max(0) as u64
    }
}

/// Whether a role's broker connection is blocked, shared with whoever reports on it.
#[derive(Debug)]
pub struct BlockState {
    tx: watch::Sender<Option<Block>>,
    /// Bumped at every change, so a wait can tell a block came and went while it slept.
    generation: AtomicU64,
    /// Connections that did not close when their session ended (blocked or unresponsive).
    unclosed: AtomicU64,
}

impl Default for BlockState {
    fn default() -> Self {
        Self { tx: watch::Sender::new(None), generation: AtomicU64::new(0), unclosed: AtomicU64::new(0) }
    }
}

impl BlockState {
    pub fn current(&self) -> Option<Block> {
        self.tx.borrow().clone()
    }

    pub fn is_blocked(&self) -> bool {
        self.tx.borrow().is_some()
    }

    pub fn unclosed(&self) -> u64 {
        self.unclosed.load(Relaxed)
    }

    /// A session's connection did not close within its limit.
    pub fn note_unclosed(&self) {
        self.unclosed.fetch_add(1, Relaxed);
    }

    fn set(&self, block: Option<Block>) {
        self.generation.fetch_add(1, Relaxed);
        self.tx.send_replace(block);
    }

    fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    /// Resolves once the connection is not blocked (at once if it is not).
    pub async fn unblocked(&self) {
        let mut rx = self.tx.subscribe();
        let _ = rx.wait_for(Option::is_none).await;
    }

    fn block(&self, reason: String, who: &str) {
        tracing::warn!(who, reason, "RabbitMQ blocks publishing on this connection; waiting, not timing out");
        self.set(Some(Block { reason, since: Utc::now() }));
    }

    fn unblock(&self, who: &str) {
        if let Some(b) = self.current() {
            tracing::info!(who, blocked_secs = b.secs(), "RabbitMQ unblocked publishing on this connection");
        }
        self.set(None);
    }
}

/// Follows one connection's blocked/unblocked notices into a state until dropped; dropping it
/// (the session is over) clears the state, since the connection it spoke for is gone.
pub struct Follow {
    task: JoinHandle<()>,
    state: Arc<BlockState>,
}

/// Starts following `conn`'s notices; `who` names the role in the log lines.
pub fn follow(conn: &Connection, state: Arc<BlockState>, who: &str) -> Follow {
    let mut events = conn.events_listener();
    let who = who.to_string();
    if conn.status().blocked() {
        // Blocked before the listener was attached: the reason went by unheard.
        state.block("blocked (reason not heard)".into(), &who);
    }
    let s = state.clone();
    let task = tokio::spawn(async move {
        while let Some(event) = events.next().await {
            match event {
                Event::ConnectionBlocked(reason) => s.block(reason, &who),
                Event::ConnectionUnblocked => s.unblock(&who),
                _ => {}
            }
        }
    });
    Follow { task, state }
}

impl Drop for Follow {
    fn drop(&mut self) {
        self.task.abort();
        self.state.set(None);
    }
}

/// Ends a session's connection: closes it within 2 s, or counts it as unclosed (a blocked
/// connection cannot send its close) and says so; then stops following it.
pub async fn close(conn: &Connection, follow: Follow, why: &str) {
    let blocked = follow.state.current();
    let closed = tokio::time::timeout(Duration::from_secs(2), conn.close(200, why.into())).await;
    if closed.is_err() && conn.status().connected() {
        follow.state.note_unclosed();
        tracing::warn!(
            blocked = blocked.is_some(),
            unclosed = follow.state.unclosed(),
            "a broker connection did not close within 2 s; it is counted in unclosed_connections"
        );
    }
    drop(follow);
}

/// A confirm (or a publish) that did not complete within its timeout while unblocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unanswered(pub Duration);

/// Awaits `fut` for at most `timeout` of unblocked time: while `state` says blocked the clock
/// stops, and a block that began or ended during the wait starts it over.
pub async fn within<F: Future>(state: &BlockState, timeout: Duration, fut: F) -> Result<F::Output, Unanswered> {
    tokio::pin!(fut);
    loop {
        let generation = state.generation();
        tokio::select! {
            out = &mut fut => return Ok(out),
            _ = tokio::time::sleep(timeout) => {}
        }
        if state.is_blocked() {
            tokio::select! {
                out = &mut fut => return Ok(out),
                _ = state.unblocked() => {}
            }
            continue;
        }
        if state.generation() != generation {
            continue;
        }
        return Err(Unanswered(timeout));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn times_out_when_never_blocked() {
        let s = BlockState::default();
        let r = within(&s, Duration::from_secs(15), std::future::pending::<()>()).await;
        assert_eq!(r, Err(Unanswered(Duration::from_secs(15))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_block_stops_the_clock_and_restarts_it_when_lifted() {
        let s = Arc::new(BlockState::default());
        s.block("low on memory".into(), "test");
        let started = tokio::time::Instant::now();
        let s2 = s.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(600)).await;
            s2.unblock("test");
        });
        let r = within(&s, Duration::from_secs(15), std::future::pending::<()>()).await;
        assert!(r.is_err());
        // 600 s blocked, then a whole timeout of unblocked time.
        assert_eq!(started.elapsed().as_secs(), 615);
    }

    #[tokio::test(start_paused = true)]
    async fn a_block_that_came_and_went_during_the_wait_restarts_the_clock() {
        let s = Arc::new(BlockState::default());
        let s2 = s.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            s2.block("low on disk".into(), "test");
            tokio::time::sleep(Duration::from_secs(5)).await;
            s2.unblock("test");
        });
        let started = tokio::time::Instant::now();
        let r = within(&s, Duration::from_secs(15), std::future::pending::<()>()).await;
        assert!(r.is_err());
        assert_eq!(started.elapsed().as_secs(), 30);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_during_a_block_is_taken() {
        let s = BlockState::default();
        s.block("low on memory".into(), "test");
        let r = within(&s, Duration::from_secs(1), async {
            tokio::time::sleep(Duration::from_secs(100)).await;
            7
        })
        .await;
        assert_eq!(r, Ok(7));
        assert_eq!(s.current().map(|b| b.reason), Some("low on memory".into()));
    }
}
