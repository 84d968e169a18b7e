//! `revenant dlq …`: choose the dead-letter queues Revenant ingests, from the command line.
//! The same store and audit entries as the console's buttons (`engine::dead_letter::watch`);
//! every running ingester picks a change up within a few seconds, no restart. `add` asks the
//! live topology first (`watch::caution`): a queue that may not be a dead-letter queue is
//! started only with `--force`, and without it nothing is started.

use clap::Subcommand;
use engine::dead_letter::watch::{self, Origin, caution};
use engine::settings::{ExposeSecret, Settings};

#[derive(Subcommand)]
pub enum DlqCommand {
    /// Start ingesting these queues.
    Add {
        #[arg(required = true)]
        queues: Vec<String>,
        /// Start them even when one may not be a dead-letter queue: it has consumers, no
        /// queue dead-letters into it, or the management API cannot tell.
        #[arg(long)]
        force: bool,
    },
    /// Stop ingesting these queues (what they hold stays in RabbitMQ; nothing is dropped).
    Remove {
        #[arg(required = true)]
        queues: Vec<String>,
    },
    /// The watched set, with which queues a live ingester consumes now.
    List,
}

pub async fn run(cmd: DlqCommand, pool: &sqlx::PgPool, settings: &Settings) -> anyhow::Result<()> {
    let actor = engine::audit::cli_principal();
    let (queues, on) = match cmd {
        DlqCommand::Add { queues, force } => {
            check(pool, settings, &queues, force).await?;
            (queues, true)
        }
        DlqCommand::Remove { queues } => (queues, false),
        DlqCommand::List => return list(pool).await,
    };
    let done = watch::set(pool, &actor, None, &queues, on, Origin::Cli).await?;
    let verb = if on { "now ingested" } else { "no longer ingested" };
    for q in &done.changed {
        println!("{q}: {verb}");
    }
    for q in &done.unchanged {
        println!("{q}: already {}", if on { "ingested" } else { "stopped" });
    }
    Ok(())
}

/// Refuses (starting nothing) when a queue not watched yet may not be a dead-letter queue
/// and `force` is not given; says why either way.
async fn check(pool: &sqlx::PgPool, settings: &Settings, queues: &[String], force: bool) -> anyhow::Result<()> {
    let watching = watch::watching(pool).await?;
    // The vhost the ingesters consume from.
    let vhost = engine::settings::vhost_of(settings.amqp_url.expose_secret());
    let url = settings.management_url.as_ref().map(|u| u.expose_secret());
    let mut held = 0;
    for q in queues.iter().filter(|q| !watching.contains(q)) {
        watch::check_name(q)?;
        let cautions = caution::check(url, &vhost, q).await;
        if cautions.is_empty() {
            continue;
        }
        held += 1;
        let why: Vec<String> = cautions.iter().map(ToString::to_string).collect();
        let verdict = if force { "started anyway (--force)" } else { "may not be a dead-letter queue" };
        eprintln!("{q}: {verdict}: {}", why.join("; "));
    }
    if held > 0 && !force {
        anyhow::bail!(
            "nothing started: ingesting takes a queue's messages; check {} and add --force to start {} anyway",
            if held == 1 { "the queue above" } else { "the queues above" },
            if held == 1 { "it" } else { "them" }
        );
    }
    Ok(())
}

async fn list(pool: &sqlx::PgPool) -> anyhow::Result<()> {
    let all = watch::list(pool).await?;
    let live = watch::ingesting(pool).await?;
    if all.is_empty() {
        println!("no dead-letter queue is watched: `revenant dlq add QUEUE` starts one");
    }
    for w in all {
        let state = match (w.watching, live.contains(&w.queue)) {
            (true, true) => "watched, consumed now",
            (true, false) => "watched, no live ingester consumes it",
            (false, true) => "stopped (an ingester is closing its consumer)",
            (false, false) => "stopped",
        };
        let by = w.changed_by.map(|b| format!(" by {b}")).unwrap_or_default();
        println!("{}\t{state}\t({} {}{by})", w.queue, w.origin, w.changed_at.format("%Y-%m-%d %H:%M:%S UTC"));
    }
    Ok(())
}
