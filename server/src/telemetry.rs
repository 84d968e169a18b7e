//! Logging: `tracing` with an `EnvFilter` (RUST_LOG, default `info`), compact or JSON.

use engine::settings::LogFormat;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,lapin=off"));
    let registry = tracing_subscriber::registry().with(filter);
    // A second init (tests that start several servers) is harmless: keep the first.
    let _ = match format {
        LogFormat::Compact => registry.with(fmt::layer().compact().with_target(false)).try_init(),
        LogFormat::Json => registry.with(fmt::layer().json().flatten_event(true)).try_init(),
    };
}
