//! The replay publisher's knobs (`[replay]`), like the relay's: window, marks, leases, timeouts.

use std::time::Duration;

use serde::Deserialize;

use super::{SettingsError, parse::int};
use crate::replay::config::PublisherConfig;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReplay {
    window: Option<i64>,
    channels: Option<i64>,
    batch: Option<i64>,
    mark_batch: Option<i64>,
    mark_flush_ms: Option<i64>,
    confirm_timeout_ms: Option<i64>,
    lease_secs: Option<i64>,
    poll_ms: Option<i64>,
    max_plans: Option<i64>,
}

pub(super) fn build(raw: RawReplay, env: &dyn Fn(&str) -> Option<String>) -> Result<PublisherConfig, SettingsError> {
    let d = PublisherConfig::default();
    let ms = |v: i64| Duration::from_millis(v as u64);
    let cfg = PublisherConfig {
        window: int("replay.window", "REVENANT_REPLAY_WINDOW", env, raw.window, d.window as i64, 1..=10_000)? as usize,
        channels: int("replay.channels", "REVENANT_REPLAY_CHANNELS", env, raw.channels, d.channels as i64, 1..=64)?
            as usize,
        batch: int("replay.batch", "REVENANT_REPLAY_BATCH", env, raw.batch, d.batch, 1..=10_000)?,
        mark_batch: int(
            "replay.mark_batch",
            "REVENANT_REPLAY_MARK_BATCH",
            env,
            raw.mark_batch,
            d.mark_batch as i64,
            1..=10_000,
        )? as usize,
        mark_flush: ms(int(
            "replay.mark_flush_ms",
            "REVENANT_REPLAY_MARK_FLUSH_MS",
            env,
            raw.mark_flush_ms,
            d.mark_flush.as_millis() as i64,
            0..=10_000,
        )?),
        confirm_timeout: ms(int(
            "replay.confirm_timeout_ms",
            "REVENANT_REPLAY_CONFIRM_TIMEOUT_MS",
            env,
            raw.confirm_timeout_ms,
            d.confirm_timeout.as_millis() as i64,
            100..=600_000,
        )?),
        lease: Duration::from_secs(int(
            "replay.lease_secs",
            "REVENANT_REPLAY_LEASE_SECS",
            env,
            raw.lease_secs,
            d.lease.as_secs() as i64,
            2..=3600,
        )? as u64),
        poll: ms(int(
            "replay.poll_ms",
            "REVENANT_REPLAY_POLL_MS",
            env,
            raw.poll_ms,
            d.poll.as_millis() as i64,
            10..=600_000,
        )?),
        max_plans: int("replay.max_plans", "REVENANT_REPLAY_MAX_PLANS", env, raw.max_plans, d.max_plans as i64, 1..=64)?
            as usize,
        control_every: d.control_every,
    };
    // The lease is renewed every `control_every`; it must outlast a few renewals and a confirm.
    if cfg.lease <= cfg.confirm_timeout {
        return Err(SettingsError::Invalid {
            key: "replay.lease_secs",
            env: "REVENANT_REPLAY_LEASE_SECS",
            reason: format!(
                "must exceed replay.confirm_timeout_ms ({} ms): a plan's lease would run out while a confirm is awaited",
                cfg.confirm_timeout.as_millis()
            ),
        });
    }
    Ok(cfg)
}
