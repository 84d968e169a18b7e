//! Background roles: the outbox relay, the dead-letter ingester and its depth sampler. Each
//! runs inside `serve` unless switched off, or alone as its own subcommand.

use engine::settings::ExposeSecret;
use std::{sync::Arc, time::Duration};

use engine::{
    dead_letter::ingest::IngestStats, outbox::stats::RelayStats, replay::ReplayStats, settings::Settings,
    sources::Source,
};
use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Default)]
pub struct Stats {
    pub relay: Arc<RelayStats>,
    pub ingest: Arc<IngestStats>,
    pub replay: Arc<ReplayStats>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Which {
    pub relay: bool,
    pub ingest: bool,
    pub alerts: bool,
    pub replay: bool,
}

impl Which {
    pub fn from_settings(s: &Settings) -> Which {
        Which { relay: s.roles.relay, ingest: s.roles.ingest, alerts: s.roles.alerts, replay: s.roles.replay }
    }
}

pub fn alert_settings(s: &Settings) -> engine::alerts::AlertSettings {
    let topology = s.management_url.as_ref().map(|u| u.expose_secret().to_string()).map(|management_url| {
        engine::alerts::TopologyProbe {
            management_url,
            vhost: s.topology_vhost.clone(),
            config_contracts: s
                .contracts
                .iter()
                .filter_map(|c| engine::topology::contract::Level::parse(&c.level).map(|l| (c.pattern.clone(), l)))
                .collect(),
        }
    });
    engine::alerts::AlertSettings {
        tick: s.alerts_tick,
        public_url: s.public_url.clone(),
        topology,
        allow_private_webhooks: s.allow_private_webhooks,
        ..Default::default()
    }
}

pub fn spawn(
    set: &mut JoinSet<(&'static str, anyhow::Result<()>)>,
    settings: &Settings,
    pool: &PgPool,
    sources: &[Source],
    stats: &Stats,
    which: Which,
    shutdown: &CancellationToken,
) {
    if which.alerts {
        let fut = engine::alerts::run(pool.clone(), sources.to_vec(), alert_settings(settings), shutdown.clone());
        set.spawn(async move { ("alerts", fut.await) });
    }
    if which.replay {
        let fut = engine::replay::publisher::run_with(
            pool.clone(),
            settings.amqp_url.expose_secret().to_string(),
            settings.replay.clone(),
            stats.replay.clone(),
            shutdown.clone(),
        );
        set.spawn(async move { ("replay", fut.await) });
    }
    if which.relay {
        let fut = engine::outbox::relay::run_all(
            pool.clone(),
            settings.amqp_url.expose_secret().to_string(),
            settings.relay.clone(),
            stats.relay.clone(),
            engine::outbox::relay::relayed(sources),
            shutdown.clone(),
        );
        set.spawn(async move { ("relay", fut.await) });
    }
    if which.ingest {
        if settings.ingest.queues.is_empty() && !settings.ingest.auto {
            tracing::info!(
                "ingest role is on with no queues configured: it ingests what `revenant dlq add` or the console starts"
            );
        }
        let management_url = settings.management_url.as_ref().map(|u| u.expose_secret().to_string());
        let discovery = management_url.clone().map(|management_url| engine::dead_letter::ingest::Discovery {
            management_url,
            vhost: settings.topology_vhost.clone(),
        });
        if settings.ingest.auto && discovery.is_none() {
            tracing::warn!(
                "ingest.auto needs the management API (management_url); it is off, so nothing is discovered"
            );
        }
        let fut = engine::dead_letter::ingest::run(
            pool.clone(),
            settings.amqp_url.expose_secret().to_string(),
            settings.ingest.clone(),
            discovery,
            stats.ingest.clone(),
            shutdown.clone(),
        );
        set.spawn(async move { ("ingest", fut.await) });
        let sampler = engine::dead_letter::depth::run_sampler(
            pool.clone(),
            settings.amqp_url.expose_secret().to_string(),
            management_url,
            Duration::from_secs(10),
            shutdown.clone(),
        );
        set.spawn(async move { ("depth sampler", sampler.await) });
    }
}

/// Waits for every role to stop, logging how each ended.
pub async fn join(mut set: JoinSet<(&'static str, anyhow::Result<()>)>) -> anyhow::Result<()> {
    let mut failed = None;
    while let Some(res) = set.join_next().await {
        match res {
            Ok((name, Ok(()))) => tracing::info!(role = name, "stopped"),
            Ok((name, Err(e))) => {
                tracing::error!(role = name, error = %format!("{e:#}"), "role failed");
                failed = Some(e.context(format!("{name} failed")));
            }
            Err(e) => {
                tracing::error!(error = %e, "role panicked");
                failed = Some(anyhow::anyhow!("a role panicked: {e}"));
            }
        }
    }
    failed.map_or(Ok(()), Err)
}
