//! Logging: `tracing` with an `EnvFilter`, compact or JSON.
//!
//! Policy: the level comes from `RUST_LOG`, default `DEFAULT_FILTER`. lapin is held at
//! `error` unless `RUST_LOG` names it: its warnings about returned messages print the whole
//! message, body included, and no default level may log message bodies.

use engine::settings::LogFormat;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

pub const DEFAULT_FILTER: &str = "info,sqlx=warn,lapin=error";

/// The filter directives for a `RUST_LOG` value (None when unset or empty).
pub fn directives(rust_log: Option<&str>) -> String {
    match rust_log.map(str::trim).filter(|v| !v.is_empty()) {
        None => DEFAULT_FILTER.to_string(),
        Some(v) if v.split(',').any(|d| d.trim_start().starts_with("lapin")) => v.to_string(),
        Some(v) => format!("{v},lapin=error"),
    }
}

pub fn init(format: LogFormat) {
    let wanted = directives(std::env::var("RUST_LOG").ok().as_deref());
    let filter = EnvFilter::try_new(&wanted).unwrap_or_else(|e| {
        eprintln!("RUST_LOG `{wanted}` is not a valid filter ({e}); using `{DEFAULT_FILTER}`");
        EnvFilter::new(DEFAULT_FILTER)
    });
    let registry = tracing_subscriber::registry().with(filter);
    // A second init (tests that start several servers) is harmless: keep the first.
    let _ = match format {
        LogFormat::Compact => registry.with(fmt::layer().compact().with_target(false)).try_init(),
        LogFormat::Json => registry.with(fmt::layer().json().flatten_event(true)).try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lapin_stays_at_error_unless_named() {
        assert_eq!(directives(None), DEFAULT_FILTER);
        assert_eq!(directives(Some("")), DEFAULT_FILTER);
        assert_eq!(directives(Some("info")), "info,lapin=error");
        assert_eq!(directives(Some("debug,lapin=trace")), "debug,lapin=trace");
    }

    #[test]
    fn the_default_filter_parses() {
        assert!(EnvFilter::try_new(DEFAULT_FILTER).is_ok());
    }
}
