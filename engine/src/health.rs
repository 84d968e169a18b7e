//! Reachability of the two engines Revenant depends on, for `/readyz` and the Overview.
//!
//! Policy: a web instance is ready when PostgreSQL answers; the console is most needed while
//! RabbitMQ is down, so the broker never takes it out of a load balancer. An instance that
//! runs a broker role (relay, ingest, replay) is ready only while those roles hold their
//! connections, read from the roles' own state ([`roles_broker`]), not from a new
//! connection per probe. The Overview's broker check ([`BrokerProbe`]) keeps one AMQP
//! connection and one HTTP client and reuses them; it reconnects only when the connection
//! is gone.

use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;

const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Dependency {
    pub name: &'static str,
    pub ok: bool,
    /// The version when reachable, the reason when not.
    pub detail: String,
}

pub async fn postgres(pool: &PgPool) -> Dependency {
    let res = tokio::time::timeout(PROBE_TIMEOUT, crate::db::server_version(pool)).await;
    match res {
        Ok(Ok(v)) => Dependency { name: "PostgreSQL", ok: true, detail: v },
        Ok(Err(e)) => Dependency { name: "PostgreSQL", ok: false, detail: e.to_string() },
        Err(_) => Dependency { name: "PostgreSQL", ok: false, detail: "no answer within 3 s".into() },
    }
}

/// The broker as the roles running in this process see it: each `(role, connected)`. None
/// when no broker role runs here (a web-only instance).
pub fn roles_broker(roles: &[(&str, bool)]) -> Option<Dependency> {
    if roles.is_empty() {
        return None;
    }
    let down: Vec<&str> = roles.iter().filter(|(_, up)| !up).map(|(r, _)| *r).collect();
    Some(if down.is_empty() {
        let names: Vec<&str> = roles.iter().map(|(r, _)| *r).collect();
        Dependency { name: "RabbitMQ", ok: true, detail: format!("connected ({})", names.join(", ")) }
    } else {
        Dependency { name: "RabbitMQ", ok: false, detail: format!("not connected: {}", down.join(", ")) }
    })
}

/// The Overview's broker check: one kept AMQP connection, one HTTP client for the
/// management API's version.
pub struct BrokerProbe {
    amqp_url: String,
    management_url: Option<String>,
    http: reqwest::Client,
    conn: tokio::sync::Mutex<Option<lapin::Connection>>,
}

impl BrokerProbe {
    pub fn new(amqp_url: &str, management_url: Option<&str>) -> Self {
        let http = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build().unwrap_or_else(|_| reqwest::Client::new());
        Self {
            amqp_url: amqp_url.to_string(),
            management_url: management_url.map(str::to_string),
            http,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    pub async fn check(&self) -> Dependency {
        if let Err(detail) = self.connected().await {
            return Dependency { name: "RabbitMQ", ok: false, detail };
        }
        let detail = match &self.management_url {
            Some(m) => crate::amqp::management_version(&self.http, m)
                .await
                .unwrap_or_else(|| "AMQP reachable; version unknown (management API not answering)".into()),
            None => "AMQP reachable; version unknown (no management_url set)".into(),
        };
        Dependency { name: "RabbitMQ", ok: true, detail }
    }

    /// The cluster's node alarms, from the management API ("memory alarm on rabbit@rvn1"):
    /// what blocks publishers. Empty when none, or when the API is not set or not answering.
    pub async fn alarms(&self) -> Vec<String> {
        #[derive(serde::Deserialize)]
        struct Node {
            name: String,
            #[serde(default)]
            mem_alarm: bool,
            #[serde(default)]
            disk_free_alarm: bool,
        }
        let Some(m) = &self.management_url else { return Vec::new() };
        let (base, user, pass) = crate::management::split_credentials(m);
        let url = format!("{}/api/nodes?columns=name,mem_alarm,disk_free_alarm", base.trim_end_matches('/'));
        let got = async {
            let resp = self.http.get(url).basic_auth(user, Some(pass)).send().await?;
            resp.error_for_status()?.json::<Vec<Node>>().await
        };
        let nodes = match got.await {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read node alarms");
                return Vec::new();
            }
        };
        nodes
            .iter()
            .flat_map(|n| {
                [(n.mem_alarm, "memory"), (n.disk_free_alarm, "disk")]
                    .into_iter()
                    .filter(|(on, _)| *on)
                    .map(move |(_, what)| format!("{what} alarm on {}", n.name))
            })
            .collect()
    }

    /// Reuses the kept connection while it is up; opens a new one (within 3 s) otherwise.
    async fn connected(&self) -> Result<(), String> {
        let mut kept = self.conn.lock().await;
        if kept.as_ref().is_some_and(|c| c.status().connected()) {
            return Ok(());
        }
        match tokio::time::timeout(PROBE_TIMEOUT, crate::amqp::connect(&self.amqp_url, "revenant-health")).await {
            Ok(Ok(c)) => {
                *kept = Some(c);
                Ok(())
            }
            Ok(Err(e)) => {
                *kept = None;
                Err(format!("{e:#}"))
            }
            Err(_) => {
                *kept = None;
                Err("no answer within 3 s".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_web_only_instance_has_no_broker_dependency() {
        assert_eq!(roles_broker(&[]), None);
    }

    #[test]
    fn the_broker_is_down_when_any_role_lost_its_connection() {
        let up = roles_broker(&[("relay", true), ("ingest", true)]).unwrap();
        assert!(up.ok, "{up:?}");
        let down = roles_broker(&[("relay", true), ("ingest", false)]).unwrap();
        assert!(!down.ok);
        assert_eq!(down.detail, "not connected: ingest");
    }
}
