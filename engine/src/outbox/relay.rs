//! The outbox relay: leases due rows, publishes them with confirms, marks each after its own.
//!
//! Policy:
//! - it publishes through the shared pipeline ([`crate::publish`]): `channels` confirm
//!   channels, a routing key always on the same one so its rows reach the broker in claim order;
//! - up to `window` publishes (over all channels) await their confirm at once; a confirmed row's mark joins a
//!   group committed within `mark_flush_ms` or at `mark_batch` marks (never "the whole claim
//!   at the end"), and confirms wait while `mark_batch` marks are unflushed, so a crash
//!   re-sends at most `window + mark_batch - 1` events and never loses one;
//! - the next claim runs while the current rows are still being sent, so the window is not
//!   left empty while PostgreSQL commits a claim;
//! - `Ack` with a returned message (unroutable under `mandatory`) and `Nack` are failed
//!   attempts, recorded with the broker's reason; no confirm within `confirm_timeout` (of
//!   unblocked time) is *unknown*, not an attempt: the row is re-sent when its lease ends;
//! - no database transaction is ever open while the broker is awaited: the lease is what
//!   keeps a row ours, and a row is not published once its lease is too close to expiry;
//! - a missing exchange is checked with a passive declare on a side channel, because
//!   publishing to it would close the publishing channel and every confirm in flight;
//! - a lost broker connection ends the session: rows whose confirm never came keep their
//!   lease (they may have reached the broker) and are re-sent when it expires; rows not yet
//!   sent are released at once; the relay reconnects with backoff and carries on;
//! - on shutdown it stops claiming, waits for the confirms in flight, releases the rest;
//! - one relay process publishes every relayed source: Revenant's own outbox, Revenant's
//!   schema installed in a service's database (`native = true`), and mapped tables
//!   (`relay = true`, one relay at a time per table: see [`super::mapped`]), each with its
//!   own broker connection, counters and reconnect loop; a source with `capture = "logical"`
//!   (native or mapped) is read from the commit stream instead ([`super::streamed`]).

use std::{
    sync::{Arc, atomic::Ordering::Relaxed},
    time::Instant,
};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use super::stats::RelayStats;
use super::{
    driver::Driver,
    mapped::Mapped,
    marks,
    native::Native,
    session::Session,
    streamed::{MappedTable, Own, Streamed},
};
use crate::{
    settings::{Capture, ExposeSecret, RelaySettings},
    sources::Source,
};

pub use super::store::NOTIFY_CHANNEL;

/// A declared source this relay publishes besides Revenant's own outbox, with its counters.
#[derive(Clone)]
pub struct Relayed {
    pub source: Source,
    pub stats: Arc<RelayStats>,
}

/// The sources of `open_all` that are relayed, besides Revenant's own (which `run_all`
/// always relays), each with fresh counters.
pub fn relayed(sources: &[Source]) -> Vec<Relayed> {
    sources
        .iter()
        .filter(|s| s.relay && s.name != crate::sources::NATIVE)
        .map(|s| Relayed { source: s.clone(), stats: Arc::default() })
        .collect()
}

/// Relays Revenant's own outbox only (see [`run_all`]).
pub async fn run(
    pool: PgPool,
    amqp_url: String,
    cfg: RelaySettings,
    stats: Arc<RelayStats>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run_all(pool, amqp_url, cfg, stats, Vec::new(), shutdown).await
}

/// Runs the relay for Revenant's own outbox and every source in `others` until `shutdown` is
/// cancelled. Broker and database outages are logged and retried, not returned: the relay
/// is meant to outlive them.
pub async fn run_all(
    pool: PgPool,
    amqp_url: String,
    cfg: RelaySettings,
    stats: Arc<RelayStats>,
    others: Vec<Relayed>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let owner = Uuid::now_v7();
    if cfg.lease <= cfg.confirm_timeout {
        tracing::warn!(
            lease_ms = cfg.lease.as_millis() as u64,
            confirm_timeout_ms = cfg.confirm_timeout.as_millis() as u64,
            "relay.lease_secs should exceed relay.confirm_timeout_ms, or rows are re-sent while their confirm is awaited"
        );
    }
    tracing::info!(
        instance = %owner,
        window = cfg.window,
        batch = cfg.batch,
        mark_batch = cfg.mark_batch,
        mark_flush_ms = cfg.mark_flush.as_millis() as u64,
        synchronous_commit = cfg.synchronous_commit,
        duplicate_bound = marks::duplicate_bound(&cfg),
        sources = others.len() + 1,
        "relay starting"
    );
    let mut all = vec![(crate::sources::NATIVE.to_string(), stats.clone())];
    all.extend(others.iter().map(|r| (r.source.name.clone(), r.stats.clone())));
    let hb_stop = CancellationToken::new();
    let hb = tokio::spawn(super::heartbeat::run(pool.clone(), owner, cfg.clone(), all, hb_stop.clone()));
    let mut tasks = tokio::task::JoinSet::new();
    let name = crate::sources::NATIVE.to_string();
    let own_url = cfg.database_url.as_ref().map(|u| u.expose_secret().to_string());
    if let Capture::Logical { order, delete } = &cfg.capture {
        let own = Arc::new(Streamed::new(&name, pool.clone(), Own, order.clone(), *delete, own_url.clone()));
        tasks.spawn(relay_table(own, name, cfg.clone(), stats, owner, amqp_url.clone(), shutdown.clone()));
    } else {
        let own = Arc::new(Native::new(pool.clone(), marks::mark_pool(&pool, &cfg)));
        tasks.spawn(relay_table(own, name, cfg.clone(), stats, owner, amqp_url.clone(), shutdown.clone()));
    }
    for r in others {
        let src = &r.source;
        let marks_pool = marks::mark_pool(&src.pool, &cfg);
        let (name, url, stop) = (src.name.clone(), amqp_url.clone(), shutdown.clone());
        let db_url = src.database_url.clone().or_else(|| own_url.clone());
        if let (true, Capture::Logical { order, delete }) = (src.native(), &src.capture) {
            let table = Arc::new(Streamed::new(&name, src.pool.clone(), Own, order.clone(), *delete, db_url));
            tasks.spawn(relay_table(table, name, cfg.clone(), r.stats, owner, url, stop));
        } else if let Capture::Logical { order, .. } = &src.capture {
            // A service's table is never deleted from: `after_publish` is refused for it.
            let tab = MappedTable::new(src);
            let table = Arc::new(Streamed::new(&name, src.pool.clone(), tab, order.clone(), false, db_url));
            tasks.spawn(relay_table(table, name, cfg.clone(), r.stats, owner, url, stop));
        } else if src.native() {
            let table = Arc::new(Native::new(src.pool.clone(), marks_pool));
            tasks.spawn(relay_table(table, name, cfg.clone(), r.stats, owner, url, stop));
        } else {
            // A service's table has its own longest poll wait (`poll_ms` of its source).
            let cfg = RelaySettings { poll: src.poll, ..cfg.clone() };
            let table = Arc::new(Mapped::new(src, marks_pool));
            tasks.spawn(relay_table(table, name, cfg, r.stats, owner, url, stop));
        }
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            tracing::error!(instance = %owner, error = %e, "a source's relay task panicked");
        }
    }
    hb_stop.cancel();
    let _ = hb.await;
    tracing::info!(instance = %owner, "relay stopped");
    Ok(())
}

/// One source's relay: once its driver lets it publish (a mapped table: once it holds the
/// table's lock) connect, publish until the connection or the lock is lost, reconnect with
/// backoff.
async fn relay_table<D: Driver>(
    table: Arc<D>,
    source: String,
    cfg: RelaySettings,
    stats: Arc<RelayStats>,
    owner: Uuid,
    amqp_url: String,
    shutdown: CancellationToken,
) {
    let mut listener = table.listen().await;
    let mut reconnect = crate::amqp::reconnect::Reconnect::new(format!("relay {owner} source {source}"));
    // The instance id in the connection name lets an operator match a broker connection to
    // its heartbeat row.
    let conn_name = if source == crate::sources::NATIVE {
        format!("revenant-relay {owner}")
    } else {
        format!("revenant-relay {owner} source={source}")
    };
    while !shutdown.is_cancelled() {
        stats.active.store(false, Relaxed);
        if !table.acquire(&shutdown).await {
            break;
        }
        // Nothing of an earlier session is in flight any more (it drained before ending).
        table.reset();
        stats.active.store(true, Relaxed);
        let started = Instant::now();
        let outcome = match crate::amqp::connect(&amqp_url, &conn_name).await {
            Ok(conn) => {
                let follow = crate::amqp::blocked::follow(&conn, stats.blocks.clone(), &conn_name);
                let res = match Session::open(&table, &conn, &cfg, &stats, owner).await {
                    Ok(mut s) => s.run(&mut listener, &shutdown).await,
                    Err(e) => Err(e),
                };
                stats.connected.store(false, Relaxed);
                crate::amqp::blocked::close(&conn, follow, "relay stopping").await;
                res
            }
            Err(e) => Err(e),
        };
        let Err(e) = outcome else { break };
        if !reconnect.wait(started, &e, &shutdown).await {
            break;
        }
    }
    table.unlock().await;
    stats.active.store(false, Relaxed);
}
