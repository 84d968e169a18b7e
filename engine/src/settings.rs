//! Typed configuration: `revenant.toml` first, then environment variables over it.
//!
//! Policy: every setting is validated at start-up and a bad or missing value stops the
//! process with one line that names the setting (its TOML key and its env var). Unknown
//! TOML keys are refused too, so a typo never silently falls back to a default.

use std::{net::SocketAddr, path::Path, time::Duration};

pub use capture::{Capture, OrderKey, parse as parse_capture};
pub use downloads::DownloadSettings;
pub use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("config file `{path}`: {reason}")]
    File { path: String, reason: String },
    #[error("setting `{key}` ({env}): {reason}")]
    Invalid { key: &'static str, env: &'static str, reason: String },
    #[error("setting `{key}` ({env}) is required")]
    Missing { key: &'static str, env: &'static str },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Compact,
    Json,
}

/// Which background roles a `serve` process runs beside the web console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    pub relay: bool,
    pub ingest: bool,
    pub alerts: bool,
    /// The replay publisher (sends replay plans).
    pub replay: bool,
}

#[derive(Debug, Clone)]
pub struct RelaySettings {
    /// Publishes awaiting their confirm at once (over all channels); 1 is the strict mode.
    pub window: usize,
    /// Confirm channels the relay publishes on; rows of one routing key always take the same.
    pub channels: usize,
    /// Rows claimed per claim transaction.
    pub batch: i64,
    pub lease: Duration,
    pub max_attempts: i32,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// The longest wait between claims of an idle table (adaptive polling: `outbox::poll`).
    pub poll: Duration,
    /// The first wait after a claim comes back short; it doubles up to `poll`.
    pub poll_min: Duration,
    pub confirm_timeout: Duration,
    /// Confirmed rows whose marks may wait uncommitted at once; a flush starts when this many
    /// are waiting. With `window` it bounds what a `kill -9` can re-send.
    pub mark_batch: usize,
    /// A flush starts when the oldest waiting mark is this old, whatever their number.
    pub mark_flush: Duration,
    /// `synchronous_commit = off` for the mark transactions only: a PostgreSQL crash can then
    /// lose recent marks (those rows are re-sent), never an event.
    pub synchronous_commit: bool,
    /// How Revenant's own outbox is read: polled, or from the commit stream.
    pub capture: Capture,
    /// Revenant's own `database_url`: the commit stream's replication connection takes its
    /// password from it (sqlx's pool does not give its own back).
    pub database_url: Option<SecretString>,
}

/// A declared source's capture; its settings were checked at start-up (a wrong one reads as
/// polling).
pub fn capture_of(m: &MappedOutbox) -> Capture {
    capture::parse(m.capture.as_deref(), m.order_key.as_deref(), m.after_publish.as_deref()).unwrap_or_default()
}

#[derive(Debug, Clone)]
pub struct IngestSettings {
    /// Seeds the watched set (`dead_letter::watch`) at start-up; the set itself lives in PostgreSQL.
    pub queues: Vec<String>,
    /// Also watch every queue the topology shows as a dead-letter target (management API).
    pub auto: bool,
    pub prefetch: u16,
    /// Deliveries stored in one transaction (then acked with `multiple`).
    pub batch: usize,
    /// How long a batch waits for more deliveries after its first one.
    pub linger: Duration,
    /// Batches committing at once per queue (acks still go out in delivery order).
    pub commits: usize,
}

#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// Set the `Secure` flag on session cookies (turn on behind TLS).
    pub secure_cookies: bool,
    /// Origins allowed to send mutations besides the request's own host.
    pub allowed_origins: Vec<String>,
    /// Trust this header for the user name (an authenticating reverse proxy); off when None.
    /// Believed only from `trusted_proxies`.
    pub proxy_user_header: Option<String>,
    /// Peers whose `X-Forwarded-For` (and `proxy_user_header`) are believed.
    pub trusted_proxies: crate::auth::TrustedProxies,
    pub session_ttl: Duration,
}

/// A declared outbox source other than Revenant's own table: an existing table of a service
/// (read through the column mapping), or Revenant's schema installed in a service's database
/// (`native = true`, see `revenant outbox install`). Checked by [`sources::validate`] here and
/// against the live database when the sources open.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MappedOutbox {
    pub name: String,
    pub database_url: Option<String>,
    /// `revenant.outbox` in `database_url` (installed by `revenant outbox install`): no mapping.
    #[serde(default)]
    pub native: bool,
    /// Revenant publishes this source's rows (it is the table's relay).
    #[serde(default)]
    pub relay: bool,
    #[serde(default)]
    pub table: String,
    #[serde(default)]
    pub id_column: String,
    #[serde(default)]
    pub event_id_column: String,
    #[serde(default)]
    pub type_column: String,
    #[serde(default)]
    pub routing_key_column: String,
    /// The exchange every row of this source is published to (default: the default exchange).
    pub exchange: Option<String>,
    pub exchange_column: Option<String>,
    /// A json/jsonb column whose object becomes the message's headers.
    pub headers_column: Option<String>,
    /// The messages' content type (default: from the payload column's type).
    pub content_type: Option<String>,
    #[serde(default)]
    pub payload_column: String,
    #[serde(default)]
    pub created_at_column: String,
    pub published_flag_column: Option<String>,
    pub published_at_column: Option<String>,
    pub attempts_column: Option<String>,
    pub last_error_column: Option<String>,
    #[serde(default = "default_stuck_secs")]
    pub stuck_after_secs: i64,
    /// How often the relay looks for new rows of a mapped table (it has no NOTIFY trigger).
    #[serde(default = "default_poll_ms")]
    pub poll_ms: i64,
    /// `poll` (default) or `logical`: from the commit stream (`native = true` only).
    pub capture: Option<String>,
    /// With `capture = "logical"`: `routing_key` (default) or `header:NAME`.
    pub order_key: Option<String>,
    /// With `capture = "logical"`: `mark` (default) or `delete` a published event's row.
    pub after_publish: Option<String>,
}

impl Default for MappedOutbox {
    fn default() -> Self {
        Self {
            name: String::new(),
            database_url: None,
            native: false,
            relay: false,
            table: String::new(),
            id_column: String::new(),
            event_id_column: String::new(),
            type_column: String::new(),
            routing_key_column: String::new(),
            exchange: None,
            exchange_column: None,
            headers_column: None,
            content_type: None,
            payload_column: String::new(),
            created_at_column: String::new(),
            published_flag_column: None,
            published_at_column: None,
            attempts_column: None,
            last_error_column: None,
            stuck_after_secs: default_stuck_secs(),
            poll_ms: default_poll_ms(),
            capture: None,
            order_key: None,
            after_publish: None,
        }
    }
}

fn default_poll_ms() -> i64 {
    250
}

fn default_stuck_secs() -> i64 {
    300
}

#[derive(Debug, Clone)]
pub struct Settings {
    /// Secret: it may carry a password; `{:?}` of the settings prints `[REDACTED]`.
    pub database_url: SecretString,
    /// One AMQP URL, or several nodes of one cluster joined with commas (`amqp_urls`):
    /// `amqp::connect` tries them in turn.
    pub amqp_url: SecretString,
    pub bind: SocketAddr,
    pub log_format: LogFormat,
    pub site_root: String,
    pub roles: Roles,
    pub relay: RelaySettings,
    pub ingest: IngestSettings,
    pub auth: AuthSettings,
    pub outbox_stuck_after: Duration,
    pub mapped_outboxes: Vec<MappedOutbox>,
    pub management_url: Option<SecretString>,
    /// The console's public URL, for links in alerts (e.g. https://revenant.example.com).
    pub public_url: Option<String>,
    pub alerts_tick: Duration,
    /// Queue reliability contracts declared in the file: (name pattern, level).
    pub contracts: Vec<ContractSetting>,
    /// The RabbitMQ vhost the Topology page checks (default: the one in AMQP_URL).
    pub topology_vhost: String,
    /// When set, `/metrics` needs `Authorization: Bearer <token>`.
    pub metrics_token: Option<SecretString>,
    /// Serve `/metrics` without a token even when `public_url` is set (by default it then
    /// needs `metrics_token`).
    pub metrics_public: bool,
    /// Let alert webhooks target loopback, link-local and private addresses.
    pub allow_private_webhooks: bool,
    /// Limits of a streamed download (NDJSON of dead letters).
    pub downloads: DownloadSettings,
    /// The replay publisher's window, marks, leases and timeouts (`[replay]`).
    pub replay: crate::replay::config::PublisherConfig,
    /// Environment variables that replaced a value the file set (start-up says so).
    pub overrides: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ContractSetting {
    pub pattern: String,
    pub level: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    database_url: Option<String>,
    amqp_url: Option<String>,
    amqp_urls: Option<Vec<String>>,
    bind: Option<String>,
    log_format: Option<String>,
    site_root: Option<String>,
    management_url: Option<String>,
    public_url: Option<String>,
    topology_vhost: Option<String>,
    metrics_token: Option<String>,
    metrics_public: Option<bool>,
    #[serde(default)]
    contracts: Vec<ContractSetting>,
    #[serde(default)]
    alerts: RawAlerts,
    #[serde(default)]
    roles: RawRoles,
    #[serde(default)]
    relay: RawRelay,
    #[serde(default)]
    ingest: RawIngest,
    #[serde(default)]
    auth: RawAuth,
    #[serde(default)]
    outbox: RawOutbox,
    #[serde(default)]
    downloads: downloads::RawDownloads,
    #[serde(default)]
    replay: replay::RawReplay,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoles {
    relay: Option<bool>,
    ingest: Option<bool>,
    alerts: Option<bool>,
    replay: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlerts {
    tick_ms: Option<i64>,
    allow_private_webhooks: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelay {
    window: Option<i64>,
    channels: Option<i64>,
    batch: Option<i64>,
    lease_secs: Option<i64>,
    max_attempts: Option<i64>,
    backoff_base_ms: Option<i64>,
    backoff_max_ms: Option<i64>,
    poll_ms: Option<i64>,
    poll_min_ms: Option<i64>,
    confirm_timeout_ms: Option<i64>,
    mark_batch: Option<i64>,
    mark_flush_ms: Option<i64>,
    synchronous_commit: Option<String>,
    capture: Option<String>,
    order_key: Option<String>,
    after_publish: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIngest {
    queues: Option<Vec<String>>,
    auto: Option<bool>,
    prefetch: Option<i64>,
    batch: Option<i64>,
    linger_ms: Option<i64>,
    commits: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    secure_cookies: Option<bool>,
    allowed_origins: Option<Vec<String>>,
    proxy_user_header: Option<String>,
    trusted_proxies: Option<Vec<String>>,
    session_ttl_hours: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutbox {
    stuck_after_secs: Option<i64>,
    #[serde(default)]
    sources: Vec<MappedOutbox>,
}

/// Reads settings from the given file (if it exists; a named file that is missing is an
/// error) and from `env`, a lookup so tests need not touch the process environment.
pub fn load(
    file: Option<&Path>,
    file_required: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings, SettingsError> {
    let raw = match file {
        Some(path) if path.exists() => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| SettingsError::File { path: path.display().to_string(), reason: e.to_string() })?;
            toml::from_str::<RawFile>(&text)
                .map_err(|e| SettingsError::File { path: path.display().to_string(), reason: toml_reason(&text, &e) })?
        }
        Some(path) if file_required => {
            return Err(SettingsError::File { path: path.display().to_string(), reason: "no such file".into() });
        }
        _ => RawFile::default(),
    };
    build(raw, env)
}

/// Loads from the process environment: `REVENANT_CONFIG` names the file (required when
/// set), otherwise `./revenant.toml` is read when present.
pub fn from_env() -> Result<Settings, SettingsError> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match env("REVENANT_CONFIG") {
        Some(path) => load(Some(Path::new(&path)), true, &env),
        None => load(Some(Path::new("revenant.toml")), false, &env),
    }
}

fn build(raw: RawFile, env: &dyn Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
    parse::take_overrides();
    let database_url =
        url("database_url", "DATABASE_URL", pick(env, "DATABASE_URL", raw.database_url), &["postgres", "postgresql"])?;
    let amqp_url = parse::amqp_urls(env, raw.amqp_url, raw.amqp_urls)?;
    let bind_raw = pick(env, "REVENANT_BIND", raw.bind).unwrap_or_else(|| "127.0.0.1:3000".into());
    let bind = bind_raw.parse::<SocketAddr>().map_err(|_| SettingsError::Invalid {
        key: "bind",
        env: "REVENANT_BIND",
        reason: format!("`{bind_raw}` is not an address like 127.0.0.1:3000"),
    })?;
    let log_format = match pick(env, "REVENANT_LOG_FORMAT", raw.log_format).as_deref() {
        None | Some("compact") => LogFormat::Compact,
        Some("json") => LogFormat::Json,
        Some(other) => {
            return Err(SettingsError::Invalid {
                key: "log_format",
                env: "REVENANT_LOG_FORMAT",
                reason: format!("`{other}` is neither compact nor json"),
            });
        }
    };
    let site_root = pick(env, "REVENANT_SITE_ROOT", raw.site_root).unwrap_or_else(|| "target/site".into());
    // "off" switches the management API off; unset means the local default.
    let management_url = match pick(env, "REVENANT_MANAGEMENT_URL", raw.management_url).as_deref() {
        Some("off") => None,
        Some(v) => Some(url("management_url", "REVENANT_MANAGEMENT_URL", Some(v.to_string()), &["http", "https"])?),
        None => Some("http://guest:guest@127.0.0.1:15672".to_string()),
    };
    let roles = Roles {
        relay: boolean("roles.relay", "REVENANT_RELAY", env, raw.roles.relay, true)?,
        ingest: boolean("roles.ingest", "REVENANT_INGEST", env, raw.roles.ingest, true)?,
        alerts: boolean("roles.alerts", "REVENANT_ALERTS", env, raw.roles.alerts, true)?,
        replay: boolean("roles.replay", "REVENANT_REPLAY", env, raw.roles.replay, true)?,
    };
    let r = raw.relay;
    let ms = |v: i64| Duration::from_millis(v as u64);
    let relay = RelaySettings {
        window: int("relay.window", "REVENANT_RELAY_WINDOW", env, r.window, 64, 1..=10_000)? as usize,
        batch: int("relay.batch", "REVENANT_RELAY_BATCH", env, r.batch, 200, 1..=10_000)?,
        lease: Duration::from_secs(int(
            "relay.lease_secs",
            "REVENANT_RELAY_LEASE_SECS",
            env,
            r.lease_secs,
            30,
            1..=3600,
        )? as u64),
        max_attempts: int("relay.max_attempts", "REVENANT_RELAY_MAX_ATTEMPTS", env, r.max_attempts, 10, 1..=1000)?
            as i32,
        backoff_base: ms(int(
            "relay.backoff_base_ms",
            "REVENANT_RELAY_BACKOFF_BASE_MS",
            env,
            r.backoff_base_ms,
            500,
            1..=3_600_000,
        )?),
        backoff_max: ms(int(
            "relay.backoff_max_ms",
            "REVENANT_RELAY_BACKOFF_MAX_MS",
            env,
            r.backoff_max_ms,
            300_000,
            1..=86_400_000,
        )?),
        poll: ms(int("relay.poll_ms", "REVENANT_RELAY_POLL_MS", env, r.poll_ms, 250, 10..=600_000)?),
        poll_min: ms(int("relay.poll_min_ms", "REVENANT_RELAY_POLL_MIN_MS", env, r.poll_min_ms, 5, 1..=60_000)?),
        confirm_timeout: ms(int(
            "relay.confirm_timeout_ms",
            "REVENANT_RELAY_CONFIRM_TIMEOUT_MS",
            env,
            r.confirm_timeout_ms,
            10_000,
            100..=600_000,
        )?),
        channels: int(
            "relay.channels",
            "REVENANT_RELAY_CHANNELS",
            env,
            r.channels,
            crate::publish::DEFAULT_CHANNELS as i64,
            1..=64,
        )? as usize,
        mark_batch: int("relay.mark_batch", "REVENANT_RELAY_MARK_BATCH", env, r.mark_batch, 256, 1..=10_000)? as usize,
        mark_flush: ms(int(
            "relay.mark_flush_ms",
            "REVENANT_RELAY_MARK_FLUSH_MS",
            env,
            r.mark_flush_ms,
            5,
            0..=10_000,
        )?),
        synchronous_commit: synchronous_commit(env, r.synchronous_commit)?,
        capture: {
            let capture = parse::pick(env, "REVENANT_RELAY_CAPTURE", r.capture);
            let order_key = parse::pick(env, "REVENANT_RELAY_ORDER_KEY", r.order_key);
            let after = parse::pick(env, "REVENANT_RELAY_AFTER_PUBLISH", r.after_publish);
            capture::parse(capture.as_deref(), order_key.as_deref(), after.as_deref()).map_err(|reason| {
                SettingsError::Invalid { key: "relay.capture", env: "REVENANT_RELAY_CAPTURE", reason }
            })?
        },
        database_url: Some(database_url.clone().into()),
    };
    let env_queues = list(env("REVENANT_INGEST_QUEUES"));
    parse::note_override("REVENANT_INGEST_QUEUES", env_queues.is_some(), raw.ingest.queues.is_some());
    let queues = env_queues.or(raw.ingest.queues).unwrap_or_default();
    for q in &queues {
        if q.is_empty() || q.len() > 255 {
            return Err(SettingsError::Invalid {
                key: "ingest.queues",
                env: "REVENANT_INGEST_QUEUES",
                reason: format!("`{q}` is not a valid queue name (1 to 255 bytes)"),
            });
        }
    }
    let ingest = IngestSettings {
        queues,
        auto: boolean("ingest.auto", "REVENANT_INGEST_AUTO", env, raw.ingest.auto, false)?,
        prefetch: int("ingest.prefetch", "REVENANT_INGEST_PREFETCH", env, raw.ingest.prefetch, 500, 1..=65_535)? as u16,
        batch: int("ingest.batch", "REVENANT_INGEST_BATCH", env, raw.ingest.batch, 250, 1..=2_000)? as usize,
        linger: ms(int("ingest.linger_ms", "REVENANT_INGEST_LINGER_MS", env, raw.ingest.linger_ms, 5, 0..=10_000)?),
        commits: int("ingest.commits", "REVENANT_INGEST_COMMITS", env, raw.ingest.commits, 2, 1..=8)? as usize,
    };
    let a = raw.auth;
    let proxies = list(env("REVENANT_TRUSTED_PROXIES")).or(a.trusted_proxies).unwrap_or_default();
    let trusted_proxies = crate::auth::TrustedProxies::parse(&proxies).map_err(|reason| SettingsError::Invalid {
        key: "auth.trusted_proxies",
        env: "REVENANT_TRUSTED_PROXIES",
        reason,
    })?;
    let auth = AuthSettings {
        trusted_proxies,
        secure_cookies: boolean("auth.secure_cookies", "REVENANT_SECURE_COOKIES", env, a.secure_cookies, false)?,
        allowed_origins: list(env("REVENANT_ALLOWED_ORIGINS")).or(a.allowed_origins).unwrap_or_default(),
        proxy_user_header: pick(env, "REVENANT_PROXY_USER_HEADER", a.proxy_user_header),
        session_ttl: Duration::from_secs(
            3600 * int("auth.session_ttl_hours", "REVENANT_SESSION_TTL_HOURS", env, a.session_ttl_hours, 12, 1..=720)?
                as u64,
        ),
    };
    if auth.proxy_user_header.is_some() && auth.trusted_proxies.is_empty() {
        return Err(SettingsError::Invalid {
            key: "auth.proxy_user_header",
            env: "REVENANT_PROXY_USER_HEADER",
            reason: "is believed only from auth.trusted_proxies (REVENANT_TRUSTED_PROXIES): list the proxy".into(),
        });
    }
    let outbox_stuck_after = Duration::from_secs(int(
        "outbox.stuck_after_secs",
        "REVENANT_OUTBOX_STUCK_AFTER_SECS",
        env,
        raw.outbox.stuck_after_secs,
        300,
        1..=30 * 86_400,
    )? as u64);
    sources::validate(&raw.outbox.sources)?;
    let public_url = match pick(env, "REVENANT_PUBLIC_URL", raw.public_url) {
        Some(v) => Some(
            url("public_url", "REVENANT_PUBLIC_URL", Some(v), &["http", "https"])?.trim_end_matches('/').to_string(),
        ),
        None => None,
    };
    let alerts_tick = Duration::from_millis(int(
        "alerts.tick_ms",
        "REVENANT_ALERTS_TICK_MS",
        env,
        raw.alerts.tick_ms,
        15_000,
        100..=3_600_000,
    )? as u64);
    for c in &raw.contracts {
        if !matches!(c.level.as_str(), "critical" | "standard" | "disposable") || c.pattern.trim().is_empty() {
            return Err(SettingsError::Invalid {
                key: "contracts",
                env: "-",
                reason: format!(
                    "contract `{}` = `{}`: needs a pattern and a level of critical, standard or disposable",
                    c.pattern, c.level
                ),
            });
        }
    }
    let topology_vhost =
        pick(env, "REVENANT_TOPOLOGY_VHOST", raw.topology_vhost).unwrap_or_else(|| vhost_of(&amqp_url));
    let metrics_token = pick(env, "REVENANT_METRICS_TOKEN", raw.metrics_token).filter(|t| !t.trim().is_empty());
    let metrics_public = boolean("metrics_public", "REVENANT_METRICS_PUBLIC", env, raw.metrics_public, false)?;
    let allow_private_webhooks = boolean(
        "alerts.allow_private_webhooks",
        "REVENANT_ALLOW_PRIVATE_WEBHOOKS",
        env,
        raw.alerts.allow_private_webhooks,
        false,
    )?;
    let downloads = downloads::build(raw.downloads, env)?;
    let replay = replay::build(raw.replay, env)?;
    Ok(Settings {
        downloads,
        replay,
        metrics_token: metrics_token.map(SecretString::from),
        metrics_public,
        allow_private_webhooks,
        public_url,
        alerts_tick,
        contracts: raw.contracts,
        topology_vhost,
        database_url: database_url.into(),
        amqp_url: amqp_url.into(),
        bind,
        log_format,
        site_root,
        roles,
        relay,
        ingest,
        auth,
        outbox_stuck_after,
        mapped_outboxes: raw.outbox.sources,
        management_url: management_url.map(SecretString::from),
        overrides: parse::take_overrides(),
    })
}

/// The vhost an AMQP URL names ("/" when none), percent-decoded; of a list, the first's
/// (settings check that all name the same).
pub fn vhost_of(amqp_url: &str) -> String {
    let amqp_url = crate::amqp::url::first_url(amqp_url);
    let rest = amqp_url.split_once("://").map(|(_, r)| r).unwrap_or(amqp_url);
    let path = rest.split_once('/').map(|(_, p)| p).unwrap_or("");
    let path = path.split('?').next().unwrap_or("");
    if path.is_empty() {
        return "/".into();
    }
    let bytes = path.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&path[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

mod capture;
mod downloads;
mod parse;
mod replay;
mod sources;
#[cfg(test)]
mod tests;

use parse::{boolean, int, list, pick, synchronous_commit, toml_reason, url};
