//! The limits of a streamed download (`[downloads]`): how long one may run in all, and how
//! long it may wait on a client that stopped reading.

use std::time::Duration;

use serde::Deserialize;

use super::{SettingsError, parse::int};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownloadSettings {
    /// A streamed download still running after this long is cut off (its slot freed).
    pub deadline: Duration,
    /// A client that has read nothing for this long is cut off: its connection is closed.
    pub stall: Duration,
}

impl Default for DownloadSettings {
    fn default() -> Self {
        Self { deadline: Duration::from_secs(600), stall: Duration::from_secs(30) }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDownloads {
    deadline_secs: Option<i64>,
    stall_secs: Option<i64>,
}

pub(super) fn build(
    raw: RawDownloads,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<DownloadSettings, SettingsError> {
    let d = DownloadSettings::default();
    let secs = |v: i64| Duration::from_secs(v as u64);
    Ok(DownloadSettings {
        deadline: secs(int(
            "downloads.deadline_secs",
            "REVENANT_DOWNLOAD_DEADLINE_SECS",
            env,
            raw.deadline_secs,
            d.deadline.as_secs() as i64,
            1..=86_400,
        )?),
        stall: secs(int(
            "downloads.stall_secs",
            "REVENANT_DOWNLOAD_STALL_SECS",
            env,
            raw.stall_secs,
            d.stall.as_secs() as i64,
            1..=3_600,
        )?),
    })
}
