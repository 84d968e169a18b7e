//! `revenant dlq …`: choose the dead-letter queues Revenant ingests, from the command line.
//! The same store and audit entries as the console's buttons (`engine::dead_letter::watch`);
//! every running ingester picks a change up within a few seconds, no restart.

use clap::Subcommand;
use engine::dead_letter::watch::{self, Origin};

#[derive(Subcommand)]
pub enum DlqCommand {
    /// Start ingesting these queues.
    Add {
        #[arg(required = true)]
        queues: Vec<String>,
    },
    /// Stop ingesting these queues (what they hold stays in RabbitMQ; nothing is dropped).
    Remove {
        #[arg(required = true)]
        queues: Vec<String>,
    },
    /// The watched set, with which queues a live ingester consumes now.
    List,
}

pub async fn run(cmd: DlqCommand, pool: &sqlx::PgPool) -> anyhow::Result<()> {
    let actor = engine::audit::cli_principal();
    let (queues, on) = match cmd {
        DlqCommand::Add { queues } => (queues, true),
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
