//! RabbitMQ connections.
//!
//! lapin 4 recovers connections on its own; the roles here still treat a dead channel as
//! a reason to reconnect from scratch with backoff, because a recovered connection does
//! not replay their consumer and confirm state in a way they could rely on. With several
//! URLs (`amqp_urls`, the nodes of a cluster) a reconnect moves on to the next node.

pub mod blocked;
pub mod confirm;
pub mod reconnect;
pub mod url;

pub use url::{first_url, node_of, urls};

use std::{
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
    time::Duration,
};

use anyhow::Context;
use lapin::{Connection, ConnectionProperties};

/// How long one node of a list may take to accept a connection before the next is tried.
const NODE_TIMEOUT: Duration = Duration::from_secs(10);

/// Which node of the list the next connection tries first: the one that last accepted a
/// connection in this process, so that after a node goes away every role moves on to the
/// same live node instead of each retrying the dead one first.
static PREFERRED: AtomicUsize = AtomicUsize::new(0);

/// Whether a broker error is a 404 (a passive declare or a delete of something missing).
pub fn is_not_found(e: &lapin::Error) -> bool {
    use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
    matches!(e.kind(), lapin::ErrorKind::ProtocolError(p) if matches!(p.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)))
}

/// Connects to the broker. With several URLs (the nodes of a cluster) it starts at the node
/// that last accepted a connection and tries each in turn until one accepts; the error then
/// names every node and why it refused.
pub async fn connect(list: &str, name: &str) -> anyhow::Result<Connection> {
    let all = urls(list);
    if all.len() <= 1 {
        let props = ConnectionProperties::default().with_connection_name(name.into());
        return Connection::connect(first_url(list), props)
            .await
            .with_context(|| format!("cannot connect to RabbitMQ (AMQP_URL) as {name}"));
    }
    let start = PREFERRED.load(Relaxed) % all.len();
    let mut refused = Vec::new();
    for k in 0..all.len() {
        let i = (start + k) % all.len();
        let props = ConnectionProperties::default().with_connection_name(name.into());
        let attempt = tokio::time::timeout(NODE_TIMEOUT, Connection::connect(all[i], props)).await;
        match attempt {
            Ok(Ok(conn)) => {
                if PREFERRED.swap(i, Relaxed) != i || k > 0 {
                    tracing::info!(node = %node_of(all[i]), connection = name, "connected to RabbitMQ node {} of {}", i + 1, all.len());
                }
                return Ok(conn);
            }
            Ok(Err(e)) => refused.push(format!("{}: {e}", node_of(all[i]))),
            Err(_) => refused.push(format!("{}: no answer in {}s", node_of(all[i]), NODE_TIMEOUT.as_secs())),
        }
    }
    anyhow::bail!(
        "cannot connect to any of the {} RabbitMQ nodes (AMQP_URLS) as {name}: {}",
        all.len(),
        refused.join("; ")
    )
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
