//! RabbitMQ connections.
//!
//! lapin 4 recovers connections on its own; the roles here still treat a dead channel as
//! a reason to reconnect from scratch with backoff, because a recovered connection does
//! not replay their consumer and confirm state in a way they could rely on.

pub mod reconnect;

use anyhow::Context;
use lapin::{Connection, ConnectionProperties};

pub async fn connect(url: &str, name: &str) -> anyhow::Result<Connection> {
    let props = ConnectionProperties::default().with_connection_name(name.into());
    Connection::connect(url, props).await.with_context(|| format!("cannot connect to RabbitMQ (AMQP_URL) as {name}"))
}

/// The broker's version, from the management API (AMQP 0-9-1 server properties are not
/// exposed by lapin). None when the API is not configured or does not answer.
pub async fn management_version(client: &reqwest::Client, management_url: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Overview {
        rabbitmq_version: String,
    }
    let (base, user, pass) = crate::management::split_credentials(management_url);
    let resp = client.get(format!("{base}/api/overview")).basic_auth(user, Some(pass)).send().await.ok()?;
    let o: Overview = resp.error_for_status().ok()?.json().await.ok()?;
    Some(format!("RabbitMQ {}", o.rabbitmq_version))
}
