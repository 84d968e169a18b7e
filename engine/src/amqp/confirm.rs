//! What one confirmed publish came to, decided in one place for the relay and replay.
//!
//! Policy: three outcomes, not two.
//! - **acked**: the broker has the message;
//! - **refused**: the broker answered and did not take it (nacked, or returned as unroutable
//!   with `mandatory`), or confirms were off: a real failure, counted as an attempt;
//! - **unknown**: no answer within the confirm timeout of unblocked time, or the channel went
//!   away before the answer. The message may well have been delivered (a broker that was slow,
//!   a confirm lost with its connection), so it is never recorded as failed and never counts as
//!   an attempt: the relay keeps the row leased and re-sends it when the lease ends, replay marks
//!   the item unconfirmed and re-sends it under the same message id. Either way a consumer may
//!   see it twice, which is the at-least-once promise, never a loss.

use std::{collections::HashMap, time::Duration};

use anyhow::Context;
use lapin::{
    Channel, Confirmation, Connection, ExchangeKind,
    options::ExchangeDeclareOptions,
    types::{FieldTable, ShortString},
};
use tokio::time::Instant;

use super::{blocked::Unanswered, is_not_found};

/// What a confirm future hands back.
pub type Awaited = Result<lapin::Result<Confirmation>, Unanswered>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Acked,
    Refused { reason: String, returned: bool },
    Unknown { reason: String, channel_lost: bool },
}

/// Turns one awaited confirm into its outcome.
pub fn settle(res: Awaited) -> Outcome {
    let refused = |reason: String, returned| Outcome::Refused { reason, returned };
    match res {
        Ok(Ok(Confirmation::Ack(None))) => Outcome::Acked,
        Ok(Ok(Confirmation::Ack(Some(ret)))) => {
            refused(format!("returned by the broker: {} {}", ret.reply_code, ret.reply_text), true)
        }
        Ok(Ok(Confirmation::Nack(Some(ret)))) => {
            refused(format!("nacked by the broker (returned: {} {})", ret.reply_code, ret.reply_text), false)
        }
        Ok(Ok(Confirmation::Nack(None))) => refused("nacked by the broker".into(), false),
        Ok(Ok(Confirmation::NotRequested)) => {
            refused("no confirm: confirms are not enabled on the channel".into(), false)
        }
        Ok(Err(e)) => Outcome::Unknown {
            reason: format!("confirm lost with the channel ({e}); it may have been delivered"),
            channel_lost: true,
        },
        Err(Unanswered(t)) => Outcome::Unknown {
            reason: format!("no confirm within {} ms; it may have been delivered", t.as_millis()),
            channel_lost: false,
        },
    }
}

/// How long "this exchange does not exist" is believed before asking again: long enough that
/// a batch for a missing exchange costs one check, short enough that creating it takes effect.
const MISSING_FOR: Duration = Duration::from_secs(1);

/// The exchange check done before each publish to a new exchange: a passive declare on a probe
/// channel of its own (a 404 closes the channel it runs on, which must never be one carrying
/// publishes), remembered for the session when found, for [`MISSING_FOR`] when missing.
#[derive(Default)]
pub struct Exchanges {
    probe: Option<Channel>,
    found: HashMap<String, bool>,
    missing_at: HashMap<String, Instant>,
}

impl Exchanges {
    /// Whether `name` exists; the default exchange (`""`) always does. `Err` when the
    /// connection cannot answer.
    pub async fn exists(&mut self, conn: &Connection, name: &str) -> anyhow::Result<bool> {
        if name.is_empty() || self.found.contains_key(name) {
            return Ok(true);
        }
        if self.missing_at.get(name).is_some_and(|at| at.elapsed() < MISSING_FOR) {
            return Ok(false);
        }
        let short = ShortString::try_new(name).map_err(|_| anyhow::anyhow!("exchange name longer than 255 bytes"))?;
        let probe = match &self.probe {
            Some(c) if c.status().connected() => c.clone(),
            _ => {
                let c = conn.create_channel().await.context("cannot open a probe channel")?;
                self.probe = Some(c.clone());
                c
            }
        };
        let opts = ExchangeDeclareOptions { passive: true, ..Default::default() };
        match probe.exchange_declare(short, ExchangeKind::Direct, opts, FieldTable::default()).await {
            Ok(()) => {
                self.missing_at.remove(name);
                self.found.insert(name.to_string(), true);
                Ok(true)
            }
            Err(e) if is_not_found(&e) => {
                // The 404 closed the probe channel: the next check opens another.
                self.probe = None;
                self.missing_at.insert(name.to_string(), Instant::now());
                Ok(false)
            }
            Err(e) => Err(anyhow::Error::new(e).context("passive exchange check failed")),
        }
    }

    /// Closes the probe channel, if one is open.
    pub async fn close(&mut self) {
        if let Some(c) = self.probe.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), c.close(200, "probe done".into())).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_or_a_lost_channel_is_unknown_never_refused() {
        let t = settle(Err(Unanswered(Duration::from_millis(15_000))));
        assert!(matches!(&t, Outcome::Unknown { channel_lost: false, reason } if reason.contains("15000 ms")), "{t:?}");
        let lost = settle(Ok(Err(lapin::Error::from(lapin::ErrorKind::InvalidChannelState(
            lapin::ChannelState::Closed,
            "test",
        )))));
        assert!(matches!(lost, Outcome::Unknown { channel_lost: true, .. }), "{lost:?}");
    }

    #[test]
    fn nacks_are_refusals() {
        assert_eq!(settle(Ok(Ok(Confirmation::Ack(None)))), Outcome::Acked);
        assert!(matches!(settle(Ok(Ok(Confirmation::Nack(None)))), Outcome::Refused { returned: false, .. }));
        assert!(matches!(settle(Ok(Ok(Confirmation::NotRequested))), Outcome::Refused { returned: false, .. }));
    }
}
