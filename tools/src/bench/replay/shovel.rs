//! RabbitMQ's own shovel as the replay bench's ceiling: what the management UI's "Move
//! messages" does (a dynamic shovel, `rabbitmq_shovel`, which `scripts/setup` enables).
//!
//! Policy: the shovel is declared through the management API, `ack-mode` `on-confirm` (a
//! message leaves the source only once the destination confirmed it, as a replay item is
//! marked sent only after its confirm), direct connections to the local node, deleting
//! itself once it moved what the source held when it started. It is timed from its creation
//! until the destination holds every message.

use std::time::{Duration, Instant};

use anyhow::Context;
use engine::settings::{ExposeSecret, Settings};
use serde_json::json;

/// Moves the `n` messages of `src` to `dest` with a shovel; how long until `dest` held them.
pub async fn shovel(
    settings: &Settings,
    conn: &lapin::Connection,
    src: &str,
    dest: &str,
    n: u32,
) -> anyhow::Result<Duration> {
    let management = settings
        .management_url
        .as_ref()
        .context("the shovel ceiling needs the management API (REVENANT_MANAGEMENT_URL is off)")?;
    let (base, user, pass) = engine::management::split_credentials(management.expose_secret());
    let vhost = vhost_of(engine::amqp::first_url(settings.amqp_url.expose_secret()));
    // A direct connection to the node's own vhost: `amqp://` is `/`, `amqp:///name` another.
    let uri = if vhost == "/" { "amqp://".to_string() } else { format!("amqp:///{}", encode(&vhost)) };
    let name = format!("revenant-bench-{}", uuid::Uuid::new_v4().simple());
    let url = format!("{base}/api/parameters/shovel/{}/{name}", encode(&vhost));
    let body = json!({ "value": {
        "src-protocol": "amqp091", "src-uri": uri, "src-queue": src,
        "dest-protocol": "amqp091", "dest-uri": uri, "dest-queue": dest,
        "ack-mode": "on-confirm", "src-delete-after": "queue-length",
    }});
    let client = reqwest::Client::new();
    let started = Instant::now();
    let resp = client.put(&url).basic_auth(&user, Some(&pass)).json(&body).send().await.context("management API")?;
    if !resp.status().is_success() {
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        anyhow::bail!(
            "cannot create the shovel ({status}: {text}); is rabbitmq_shovel enabled? (`rabbitmq-plugins enable rabbitmq_shovel`, scripts/setup does it)"
        );
    }
    let held = super::super::wait_for_ready(conn, dest, n, Duration::from_secs(300)).await;
    let took = started.elapsed();
    // Gone by itself once done; removed here too when it was not (a failed run).
    let _ = client.delete(&url).basic_auth(&user, Some(&pass)).send().await;
    held.context("the shovel did not move every message")?;
    Ok(took)
}

/// The vhost an AMQP URL names (`/` when it names none).
fn vhost_of(amqp_url: &str) -> String {
    let path = url::Url::parse(amqp_url).map(|u| u.path().trim_start_matches('/').to_string()).unwrap_or_default();
    match percent_encoding::percent_decode_str(&path).decode_utf8_lossy().into_owned() {
        v if v.is_empty() => "/".to_string(),
        v => v,
    }
}

fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vhost_comes_from_the_url_path() {
        assert_eq!(vhost_of("amqp://guest:guest@127.0.0.1:5672/%2f"), "/");
        assert_eq!(vhost_of("amqp://guest:guest@127.0.0.1:5672"), "/");
        assert_eq!(vhost_of("amqp://127.0.0.1:5672/revenant-e2e"), "revenant-e2e");
        assert_eq!(encode("/"), "%2F");
    }
}
