//! Unit tests of the parent module.
use super::*;
use std::collections::HashMap;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k| m.get(k).cloned()
}

const BASE: &[(&str, &str)] = &[("DATABASE_URL", "postgres://localhost/x"), ("AMQP_URL", "amqp://localhost")];

#[test]
fn defaults_apply_when_only_urls_are_given() {
    let s = build(RawFile::default(), &env_of(BASE)).unwrap();
    assert_eq!(s.bind.to_string(), "127.0.0.1:3000");
    assert_eq!(s.relay.window, 64);
    assert!(s.roles.relay && s.roles.ingest && s.roles.alerts);
}

#[test]
fn a_missing_database_url_names_the_setting() {
    let err = build(RawFile::default(), &env_of(&[("AMQP_URL", "amqp://x")])).unwrap_err();
    assert_eq!(err.to_string(), "setting `database_url` (DATABASE_URL) is required");
}

#[test]
fn a_bad_bind_address_names_the_setting() {
    let mut e = BASE.to_vec();
    e.push(("REVENANT_BIND", "nowhere"));
    let err = build(RawFile::default(), &env_of(&e)).unwrap_err().to_string();
    assert!(err.contains("`bind` (REVENANT_BIND)"), "{err}");
}

#[test]
fn env_overrides_the_file() {
    let raw: RawFile = toml::from_str("bind = \"127.0.0.1:4000\"\n[relay]\nwindow = 8\n").unwrap();
    let mut e = BASE.to_vec();
    e.push(("REVENANT_RELAY_WINDOW", "1"));
    let s = build(raw, &env_of(&e)).unwrap();
    assert_eq!(s.bind.port(), 4000);
    assert_eq!(s.relay.window, 1);
    // Start-up names the variables that replaced a file value, and only those.
    assert_eq!(s.overrides, ["REVENANT_RELAY_WINDOW"]);
}

#[test]
fn an_env_queue_list_over_the_files_is_reported_and_auto_is_read() {
    let raw: RawFile = toml::from_str("[ingest]\nqueues = [\"a.dlq\"]\nauto = true\n").unwrap();
    let mut e = BASE.to_vec();
    e.push(("REVENANT_INGEST_QUEUES", "b.dlq, c.dlq"));
    let s = build(raw, &env_of(&e)).unwrap();
    assert_eq!(s.ingest.queues, ["b.dlq", "c.dlq"]);
    assert!(s.ingest.auto);
    assert_eq!(s.overrides, ["REVENANT_INGEST_QUEUES"]);
    // Without a file value, an environment variable overrides nothing.
    let s = build(RawFile::default(), &env_of(&e)).unwrap();
    assert!(s.overrides.is_empty() && !s.ingest.auto);
}

#[test]
fn an_unknown_key_in_the_file_is_refused() {
    let dir = std::env::temp_dir().join(format!("revenant-settings-{}", uuid::Uuid::new_v4()));
    std::fs::write(&dir, "bnid = \"x\"\n").unwrap();
    let err = load(Some(&dir), true, &env_of(BASE)).unwrap_err().to_string();
    std::fs::remove_file(&dir).ok();
    assert!(err.contains("unknown field `bnid`"), "{err}");
}

#[test]
fn a_window_of_zero_is_refused() {
    let mut e = BASE.to_vec();
    e.push(("REVENANT_RELAY_WINDOW", "0"));
    let err = build(RawFile::default(), &env_of(&e)).unwrap_err().to_string();
    assert!(err.contains("relay.window"), "{err}");
}

#[test]
fn the_vhost_is_read_from_the_amqp_url() {
    assert_eq!(vhost_of("amqp://guest:guest@127.0.0.1:5672/%2f"), "/");
    assert_eq!(vhost_of("amqp://h:5672/revenant-e2e"), "revenant-e2e");
    assert_eq!(vhost_of("amqp://h:5672"), "/");
}

#[test]
fn a_contract_with_an_unknown_level_is_refused() {
    let raw: RawFile = toml::from_str("[[contracts]]\npattern = \"orders.*\"\nlevel = \"vital\"\n").unwrap();
    let err = build(raw, &env_of(BASE)).unwrap_err().to_string();
    assert!(err.contains("contracts"), "{err}");
}

#[test]
fn a_named_config_file_that_is_missing_is_an_error() {
    let err = load(Some(Path::new("/nonexistent/revenant.toml")), true, &env_of(BASE)).unwrap_err();
    assert!(err.to_string().contains("no such file"));
}

#[test]
fn group_commit_settings_have_defaults_and_are_checked() {
    let s = build(RawFile::default(), &env_of(BASE)).unwrap();
    assert_eq!((s.relay.mark_batch, s.relay.mark_flush.as_millis()), (256, 5));
    assert_eq!(
        (s.relay.poll_min.as_millis(), s.relay.poll.as_millis()),
        (5, 250),
        "adaptive polling: 5 ms doubling to 250 ms"
    );
    assert!(s.relay.synchronous_commit);
    assert_eq!((s.ingest.batch, s.ingest.linger.as_millis(), s.ingest.prefetch), (250, 5, 500));
    let raw: RawFile =
        toml::from_str("[relay]\nmark_batch = 1\nsynchronous_commit = \"off\"\n[ingest]\nbatch = 10\n").unwrap();
    let s = build(raw, &env_of(BASE)).unwrap();
    assert_eq!((s.relay.mark_batch, s.relay.synchronous_commit, s.ingest.batch), (1, false, 10));
    let mut e = BASE.to_vec();
    e.push(("REVENANT_RELAY_SYNCHRONOUS_COMMIT", "sometimes"));
    let err = build(RawFile::default(), &env_of(&e)).unwrap_err().to_string();
    assert!(err.contains("`relay.synchronous_commit` (REVENANT_RELAY_SYNCHRONOUS_COMMIT)"), "{err}");
    let raw: RawFile = toml::from_str("[ingest]\nbatch = 0\n").unwrap();
    let err = build(raw, &env_of(BASE)).unwrap_err().to_string();
    assert!(err.contains("`ingest.batch`"), "{err}");
}

#[test]
fn trusted_proxies_are_parsed_and_a_bad_one_is_named() {
    let raw: RawFile = toml::from_str("[auth]\ntrusted_proxies = [\"10.0.0.0/8\", \"192.0.2.1\"]\n").unwrap();
    let s = build(raw, &env_of(BASE)).unwrap();
    assert!(s.auth.trusted_proxies.trusts("10.9.9.9".parse().unwrap()));
    assert!(!s.auth.trusted_proxies.trusts("192.0.2.2".parse().unwrap()));
    let mut e = BASE.to_vec();
    e.push(("REVENANT_TRUSTED_PROXIES", "10.0.0.1,not-an-ip"));
    let err = build(RawFile::default(), &env_of(&e)).unwrap_err().to_string();
    assert!(err.contains("auth.trusted_proxies") && err.contains("not-an-ip"), "{err}");
}

#[test]
fn private_webhooks_and_an_open_metrics_endpoint_are_off_by_default() {
    let s = build(RawFile::default(), &env_of(BASE)).unwrap();
    assert!(!s.allow_private_webhooks && !s.metrics_public && s.auth.trusted_proxies.is_empty());
    let raw: RawFile = toml::from_str("metrics_public = true\n[alerts]\nallow_private_webhooks = true\n").unwrap();
    let s = build(raw, &env_of(BASE)).unwrap();
    assert!(s.allow_private_webhooks && s.metrics_public);
}

#[test]
fn a_proxy_user_header_needs_trusted_proxies() {
    let mut e = BASE.to_vec();
    e.push(("REVENANT_PROXY_USER_HEADER", "X-Remote-User"));
    let err = build(RawFile::default(), &env_of(&e)).unwrap_err().to_string();
    assert!(err.contains("auth.trusted_proxies"), "{err}");
    e.push(("REVENANT_TRUSTED_PROXIES", "127.0.0.1"));
    assert!(build(RawFile::default(), &env_of(&e)).is_ok());
}

fn sources_error(toml_text: &str) -> String {
    let raw: RawFile = toml::from_str(toml_text).unwrap();
    build(raw, &env_of(BASE)).unwrap_err().to_string()
}

const MAPPED: &str = "[[outbox.sources]]\nname = \"orders\"\ntable = \"outbox_events\"\nid_column = \"id\"\n\
    event_id_column = \"evento_id\"\ntype_column = \"tipo\"\nrouting_key_column = \"rk\"\npayload_column = \"payload\"\n\
    created_at_column = \"criado_em\"\npublished_flag_column = \"publicado\"\nrelay = true\n";

#[test]
fn a_relayed_mapped_source_with_its_publish_keys_is_accepted() {
    let raw: RawFile =
        toml::from_str(&format!("{MAPPED}exchange = \"orders\"\ncontent_type = \"text/plain\"\n")).unwrap();
    let s = build(raw, &env_of(BASE)).unwrap();
    let m = &s.mapped_outboxes[0];
    assert!(m.relay && !m.native);
    assert_eq!((m.exchange.as_deref(), m.poll_ms), (Some("orders"), 250));
}

#[test]
fn a_mapped_source_streams_from_the_commit_stream_but_is_never_deleted_from() {
    let raw: RawFile =
        toml::from_str(&format!("{MAPPED}capture = \"logical\"\norder_key = \"header:order_id\"\n")).unwrap();
    let s = build(raw, &env_of(BASE)).unwrap();
    let c = crate::settings::capture_of(&s.mapped_outboxes[0]);
    assert_eq!(c, Capture::Logical { order: OrderKey::Header("order_id".into()), delete: false });
    let delete = sources_error(&format!("{MAPPED}capture = \"logical\"\nafter_publish = \"delete\"\n"));
    assert!(
        delete.contains("source `orders`") && delete.contains("`after_publish = \"delete\"` needs `native = true`"),
        "{delete}"
    );
}

#[test]
fn bad_source_keys_are_named_in_one_line() {
    let both = sources_error(&format!("{MAPPED}exchange = \"x\"\nexchange_column = \"ex\"\n"));
    assert!(both.contains("source `orders`") && both.contains("`exchange` or `exchange_column`"), "{both}");
    let poll = sources_error(&format!("{MAPPED}poll_ms = 1\n"));
    assert!(poll.contains("`poll_ms` = 1"), "{poll}");
    let missing = sources_error("[[outbox.sources]]\nname = \"orders\"\ntable = \"t\"\n");
    assert!(missing.contains("`id_column` is required"), "{missing}");
    let native = sources_error("[[outbox.sources]]\nname = \"billing\"\nnative = true\n");
    assert!(native.contains("`native = true` needs `database_url`"), "{native}");
    let mixed = sources_error(
        "[[outbox.sources]]\nname = \"billing\"\nnative = true\ndatabase_url = \"postgres://x/y\"\ntable = \"t\"\n",
    );
    assert!(mixed.contains("`table` does not apply to `native = true`"), "{mixed}");
    assert!(!mixed.contains('\n'), "one line: {mixed}");
}

#[test]
fn printing_the_settings_never_shows_a_password_or_token() {
    let e = [
        ("DATABASE_URL", "postgres://revenant:pg-hunter2@db/revenant"),
        ("AMQP_URL", "amqp://revenant:mq-hunter2@mq/%2f"),
        ("REVENANT_MANAGEMENT_URL", "http://admin:mgmt-hunter2@mq:15672"),
        ("REVENANT_METRICS_TOKEN", "tok-hunter2"),
    ];
    let s = build(RawFile::default(), &env_of(&e)).unwrap();
    let printed = format!("{s:?}");
    assert!(!printed.contains("hunter2"), "{printed}");
    assert_eq!(s.amqp_url.expose_secret(), "amqp://revenant:mq-hunter2@mq/%2f", "the value is kept for use");
}

const DB: (&str, &str) = ("DATABASE_URL", "postgres://localhost/x");

#[test]
fn several_amqp_urls_are_kept_in_order_for_failover() {
    let e = [DB, ("AMQP_URLS", "amqp://g:p@n1:5681/%2f, amqp://g:p@n2:5682/%2f,amqp://g:p@n3:5683/%2f")];
    let s = build(RawFile::default(), &env_of(&e)).unwrap();
    let list = s.amqp_url.expose_secret();
    assert_eq!(crate::amqp::urls(list), ["amqp://g:p@n1:5681/%2f", "amqp://g:p@n2:5682/%2f", "amqp://g:p@n3:5683/%2f"]);
    assert_eq!(vhost_of(list), "/");
    assert_eq!(crate::amqp::node_of(crate::amqp::urls(list)[1]), "n2:5682");

    let raw: RawFile = toml::from_str("amqp_urls = [\"amqp://a/v\", \"amqp://b/v\"]\n").unwrap();
    let s = build(raw, &env_of(&[DB])).unwrap();
    assert_eq!(s.amqp_url.expose_secret(), "amqp://a/v,amqp://b/v");
    assert_eq!(s.topology_vhost, "v");
}

#[test]
fn amqp_url_and_amqp_urls_together_or_mixed_vhosts_are_refused() {
    let both = [DB, ("AMQP_URL", "amqp://a"), ("AMQP_URLS", "amqp://a,amqp://b")];
    let err = build(RawFile::default(), &env_of(&both)).unwrap_err().to_string();
    assert!(err.contains("not both"), "{err}");

    let mixed = [DB, ("AMQP_URLS", "amqp://a/one,amqp://b/two")];
    let err = build(RawFile::default(), &env_of(&mixed)).unwrap_err().to_string();
    assert!(err.contains("`amqp_urls` (AMQP_URLS)") && err.contains("vhost `two`"), "{err}");

    let bad = [DB, ("AMQP_URLS", "amqp://a,http://b")];
    let err = build(RawFile::default(), &env_of(&bad)).unwrap_err().to_string();
    assert!(err.contains("must start with amqp://"), "{err}");

    let empty = [DB, ("AMQP_URLS", " , ")];
    let err = build(RawFile::default(), &env_of(&empty)).unwrap_err().to_string();
    assert!(err.contains("lists no URL"), "{err}");
}

#[test]
fn download_limits_default_to_ten_minutes_and_thirty_seconds_and_are_read_from_the_file_and_env() {
    let s = build(RawFile::default(), &env_of(BASE)).unwrap();
    assert_eq!((s.downloads.deadline.as_secs(), s.downloads.stall.as_secs()), (600, 30));
    let raw: RawFile = toml::from_str("[downloads]\ndeadline_secs = 60\nstall_secs = 5\n").unwrap();
    let mut e = BASE.to_vec();
    e.push(("REVENANT_DOWNLOAD_STALL_SECS", "2"));
    let s = build(raw, &env_of(&e)).unwrap();
    assert_eq!((s.downloads.deadline.as_secs(), s.downloads.stall.as_secs()), (60, 2));
    e.push(("REVENANT_DOWNLOAD_DEADLINE_SECS", "0"));
    let err = build(RawFile::default(), &env_of(&e)).unwrap_err().to_string();
    assert!(err.contains("downloads.deadline_secs"), "{err}");
}

#[test]
fn the_replay_publisher_is_configured_like_the_relay_from_the_file_and_env() {
    let s = build(RawFile::default(), &env_of(BASE)).unwrap();
    let d = crate::replay::config::PublisherConfig::default();
    assert_eq!(
        (s.replay.window, s.replay.mark_batch, s.replay.confirm_timeout),
        (d.window, d.mark_batch, d.confirm_timeout)
    );
    let raw: RawFile = toml::from_str("[replay]\nwindow = 8\nmark_batch = 32\nconfirm_timeout_ms = 2000\n").unwrap();
    let mut e = BASE.to_vec();
    e.push(("REVENANT_REPLAY_MAX_PLANS", "2"));
    let s = build(raw, &env_of(&e)).unwrap();
    assert_eq!((s.replay.window, s.replay.mark_batch, s.replay.max_plans), (8, 32, 2));
    assert_eq!(s.replay.confirm_timeout, Duration::from_secs(2));
    // A lease no longer than the confirm timeout would let a plan be taken over mid-confirm.
    let raw: RawFile = toml::from_str("[replay]\nlease_secs = 5\nconfirm_timeout_ms = 5000\n").unwrap();
    let err = build(raw, &env_of(BASE)).unwrap_err().to_string();
    assert!(err.contains("replay.lease_secs") && err.contains("must exceed"), "{err}");
    let err = build(toml::from_str("[replay]\nwindow = 0\n").unwrap(), &env_of(BASE)).unwrap_err().to_string();
    assert!(err.contains("replay.window"), "{err}");
}
