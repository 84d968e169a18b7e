//! The reconnect policy of the roles that hold a broker connection for a long time (the
//! relay, the replay publisher): after a lost connection or a failed connect, wait a capped,
//! jittered, doubling delay, then try again; a session that ran for a minute was healthy and
//! starts the backoff over; shutdown ends the wait at once.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::outbox::backoff::Backoff;

/// A session that lasted this long resets the backoff.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);

pub struct Reconnect {
    backoff: Backoff,
    failures: u32,
    /// Who reconnects, for the log line ("relay …", "replay publisher …").
    who: String,
}

impl Reconnect {
    pub fn new(who: impl Into<String>) -> Self {
        Self {
            backoff: Backoff::new(Duration::from_millis(250), Duration::from_secs(30)),
            failures: 0,
            who: who.into(),
        }
    }

    /// After a session that started at `started` ended with `error`: logs it and waits before
    /// the next connect. Returns false when `shutdown` came first (stop reconnecting).
    pub async fn wait(&mut self, started: Instant, error: &anyhow::Error, shutdown: &CancellationToken) -> bool {
        if started.elapsed() > HEALTHY_AFTER {
            self.failures = 0;
        }
        self.failures = self.failures.saturating_add(1);
        let wait = self.backoff.delay(self.failures).max(Duration::from_millis(100));
        tracing::warn!(who = %self.who, error = %format!("{error:#}"), retry_in_ms = wait.as_millis() as u64,
            "broker session ended; reconnecting");
        tokio::select! {
            _ = shutdown.cancelled() => false,
            _ = tokio::time::sleep(wait) => true,
        }
    }
}
