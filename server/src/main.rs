//! `revenant`: one binary, several roles. `serve` runs the web console and, unless switched
//! off, the relay, ingester and alert evaluator in the same process; each role can also run
//! alone, and several copies of each can run against the same databases and broker.

use engine::settings::ExposeSecret;
use server::{dlq_cmd, roles, telemetry, user_cmd, web};

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use engine::settings::Settings;

#[derive(Parser)]
#[command(name = "revenant", version, about = "Console for transactional outboxes and RabbitMQ dead-letter queues")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the web console (and the background roles that are switched on).
    Serve {
        #[arg(long)]
        no_relay: bool,
        #[arg(long)]
        no_ingest: bool,
        #[arg(long)]
        no_alerts: bool,
        #[arg(long)]
        no_replay: bool,
    },
    /// Create the schema and apply migrations, then exit.
    Migrate,
    /// Run only the outbox relay (several may run at once).
    Relay,
    /// Run only the dead-letter ingester and depth sampler for the watched DLQs (`revenant dlq`).
    Ingest,
    /// Run only the alert evaluator (and webhook delivery).
    Alerts,
    /// Run only the replay publisher (sends replay plans).
    Replay,
    #[cfg(feature = "tools")]
    /// Demo traffic on the local broker: a demo topology, an orders service writing outbox
    /// events, and consumers that fail in realistic ways. Ctrl-C stops it.
    Demo {
        /// Remove what the demo created (queues, exchanges, demo rows) and exit.
        #[arg(long)]
        reset: bool,
        /// Events per second.
        #[arg(long, default_value_t = tools::demo::DEFAULT_RATE_PER_SEC)]
        rate: f64,
    },
    /// Revenant's outbox schema in a service's database.
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// Manage local users.
    #[command(subcommand)]
    User(user_cmd::UserCommand),
    /// Choose the dead-letter queues to ingest (live: running ingesters follow within seconds).
    #[command(subcommand)]
    Dlq(dlq_cmd::DlqCommand),
    /// Measure the relay, the ingester and the outbox lists in a throwaway database and queues.
    #[cfg(feature = "tools")]
    #[command(subcommand)]
    Bench(tools::bench::BenchCommand),
}

#[derive(Subcommand)]
enum OutboxCommand {
    /// Create revenant.outbox and its NOTIFY trigger in a service's database, for a source
    /// with `native = true` (docs/OUTBOX.md). Idempotent.
    Install {
        /// The service's database (its outbox lives beside its business tables).
        #[arg(long, env = "REVENANT_INSTALL_DATABASE_URL")]
        database_url: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Needs only the service's database, not Revenant's settings.
    if let Command::Outbox(OutboxCommand::Install { database_url }) = &cli.command {
        return outbox_install(database_url);
    }
    let settings = match engine::settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("revenant: {e}");
            return ExitCode::from(2);
        }
    };
    telemetry::init(settings.log_format);
    for var in &settings.overrides {
        tracing::warn!(variable = %var, "the environment overrides a value set in the config file");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("revenant: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli, settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("revenant: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli, mut settings: Settings) -> anyhow::Result<()> {
    match cli.command {
        Command::Migrate => {
            let pool = engine::db::connect(settings.database_url.expose_secret(), 2).await?;
            engine::db::migrate(&pool).await?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Relay => run_roles(settings, roles::Which { relay: true, ..Default::default() }).await,
        Command::Ingest => run_roles(settings, roles::Which { ingest: true, ..Default::default() }).await,
        Command::Alerts => run_roles(settings, roles::Which { alerts: true, ..Default::default() }).await,
        Command::Replay => run_roles(settings, roles::Which { replay: true, ..Default::default() }).await,
        #[cfg(feature = "tools")]
        Command::Demo { reset, rate } => {
            let shutdown = tokio_util::sync::CancellationToken::new();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                shutdown_signal().await;
                stop.cancel();
            });
            tools::demo::command(&settings, reset, rate, shutdown).await
        }
        Command::Outbox(OutboxCommand::Install { .. }) => anyhow::bail!("outbox install runs before the settings load"),
        #[cfg(feature = "tools")]
        Command::Bench(cmd) => tools::bench::run(cmd, &settings).await,
        Command::Dlq(cmd) => {
            let pool = engine::db::connect(settings.database_url.expose_secret(), 2).await?;
            engine::db::migrate(&pool).await?;
            dlq_cmd::run(cmd, &pool, &settings).await
        }
        Command::User(cmd) => {
            let pool = engine::db::connect(settings.database_url.expose_secret(), 2).await?;
            engine::db::migrate(&pool).await?;
            user_cmd::run(cmd, &pool).await
        }
        Command::Serve { no_relay, no_ingest, no_alerts, no_replay } => {
            settings.roles.relay &= !no_relay;
            settings.roles.ingest &= !no_ingest;
            settings.roles.alerts &= !no_alerts;
            settings.roles.replay &= !no_replay;
            serve(settings).await
        }
    }
}

fn outbox_install(url: &str) -> ExitCode {
    let run = async {
        let pool = engine::db::connect(url, 2).await?;
        engine::outbox::install::install(&pool).await
    };
    let res = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(anyhow::Error::from);
    match res.and_then(|rt| rt.block_on(run)) {
        Ok(engine::outbox::install::Installed::Created) => {
            println!("revenant.outbox created; declare the database as a source with native = true and relay = true");
            ExitCode::SUCCESS
        }
        Ok(engine::outbox::install::Installed::AlreadyThere) => {
            println!("revenant.outbox is already installed there; nothing changed");
            ExitCode::SUCCESS
        }
        Ok(engine::outbox::install::Installed::Upgraded) => {
            println!(
                "revenant.outbox was already installed; upgraded: no insert NOTIFY trigger (it serialised the service's commits), the commit-stream relay's column added"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("revenant: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run_roles(settings: Settings, which: roles::Which) -> anyhow::Result<()> {
    let pool = engine::db::connect(settings.database_url.expose_secret(), 10).await?;
    engine::db::migrate(&pool).await?;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut set = tokio::task::JoinSet::new();
    let sources =
        if which.alerts || which.relay { engine::sources::open_all(&settings, &pool).await? } else { Vec::new() };
    roles::spawn(&mut set, &settings, &pool, &sources, &roles::Stats::default(), which, &shutdown);
    let stop = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        stop.cancel();
    });
    roles::join(set).await
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    let pool = engine::db::connect(settings.database_url.expose_secret(), 20).await?;
    engine::db::migrate(&pool).await?;
    let sources = engine::sources::open_all(&settings, &pool).await?;
    let listener = tokio::net::TcpListener::bind(settings.bind)
        .await
        .with_context(|| format!("cannot listen on {} (REVENANT_BIND)", settings.bind))?;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stats = roles::Stats::default();
    let mut set = tokio::task::JoinSet::new();
    let which = roles::Which::from_settings(&settings);
    roles::spawn(&mut set, &settings, &pool, &sources, &stats, which, &shutdown);
    let purge = engine::auth::run_purge(pool.clone(), std::time::Duration::from_secs(600), shutdown.clone());
    set.spawn(async move { ("sign-in purge", purge.await) });
    let state = web::app_state(pool, settings, sources, stats);
    let stop = shutdown.clone();
    let web_result = web::serve(state, listener, async move {
        shutdown_signal().await;
        stop.cancel();
    })
    .await;
    shutdown.cancel();
    let roles_result = roles::join(set).await;
    web_result.and(roles_result)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutting down");
}
