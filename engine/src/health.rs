//! Reachability of the two engines Revenant depends on, for `/readyz` and the Overview.

use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;

#[derive(Debug, Clone, Serialize)]
pub struct Dependency {
    pub name: &'static str,
    pub ok: bool,
    /// The version when reachable, the reason when not.
    pub detail: String,
}

pub async fn postgres(pool: &PgPool) -> Dependency {
    let res = tokio::time::timeout(Duration::from_secs(3), crate::db::server_version(pool)).await;
    match res {
        Ok(Ok(v)) => Dependency { name: "PostgreSQL", ok: true, detail: v },
        Ok(Err(e)) => Dependency { name: "PostgreSQL", ok: false, detail: e.to_string() },
        Err(_) => Dependency { name: "PostgreSQL", ok: false, detail: "no answer within 3 s".into() },
    }
}

/// Opens a short-lived connection: it answers "can a new client connect now", which is
/// what a relay or ingester that is about to (re)connect needs.
pub async fn rabbitmq(url: &str, management_url: Option<&str>) -> Dependency {
    let res = tokio::time::timeout(Duration::from_secs(3), crate::amqp::connect(url, "revenant-health")).await;
    match res {
        Ok(Ok(conn)) => {
            let _ = conn.close(200, "health check done".into()).await;
            let v = match management_url {
                Some(m) => crate::amqp::management_version(m)
                    .await
                    .unwrap_or_else(|| "AMQP reachable; version unknown (management API not answering)".into()),
                None => "AMQP reachable; version unknown (no management_url set)".into(),
            };
            Dependency { name: "RabbitMQ", ok: true, detail: v }
        }
        Ok(Err(e)) => Dependency { name: "RabbitMQ", ok: false, detail: format!("{e:#}") },
        Err(_) => Dependency { name: "RabbitMQ", ok: false, detail: "no answer within 3 s".into() },
    }
}
