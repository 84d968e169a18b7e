//! `revenant demo` as the command line runs it: what it sets up in Revenant itself (the
//! watched DLQs, two alert rules) around the demo's traffic.

use engine::settings::{ExposeSecret, Settings};
use tokio_util::sync::CancellationToken;

/// `revenant demo`: watches the demo's DLQs, adds two alert rules, then runs the demo until
/// `shutdown`; with `reset`, removes what it created instead.
pub async fn command(settings: &Settings, reset: bool, rate: f64, shutdown: CancellationToken) -> anyhow::Result<()> {
    let pool = engine::db::connect(settings.database_url.expose_secret(), 5).await?;
    engine::db::migrate(&pool).await?;
    if reset {
        let summary = super::reset(&pool, settings.amqp_url.expose_secret()).await?;
        println!("demo removed: {summary:?}");
        return Ok(());
    }
    let dlqs: Vec<String> = super::DEMO_DLQS.iter().map(|q| q.to_string()).collect();
    // The demo's DLQs are watched (once: a queue someone stopped stays stopped).
    engine::dead_letter::watch::seed(&pool, &dlqs, engine::dead_letter::watch::Origin::Cli).await?;
    println!("demo DLQs (watched; `revenant dlq list`): {}", dlqs.join(","));
    seed_demo_rules(&pool).await;
    super::run(pool, settings.amqp_url.expose_secret().to_string(), rate, shutdown).await
}

/// Two alert rules so the demo's outages page someone; kept if they already exist.
async fn seed_demo_rules(pool: &sqlx::PgPool) {
    let rules = [
        ("demo: shipping DLQ backlog", "dlq_awaiting", "demo.shipping.dlq", "25", "100", "10", "", "0"),
        ("demo: new dead letters in orders.created", "dlq_new", "demo.orders.created.dlq", "5", "20", "2", "5", "30"),
    ];
    let actor = engine::audit::cli_principal();
    for (name, kind, target, warn, crit, recover, window, for_secs) in rules {
        let input = engine::alerts::RuleInput {
            name: name.into(),
            kind: kind.into(),
            target: target.into(),
            warn_threshold: warn.into(),
            crit_threshold: crit.into(),
            recover_threshold: recover.into(),
            for_secs: for_secs.into(),
            window_mins: window.into(),
            webhook_url: String::new(),
            webhook_format: String::new(),
            enabled: true,
        };
        match engine::alerts::create(pool, &actor, &engine::auth::ClientIp(None), &input, false).await {
            Ok(_) => println!("demo alert rule added: {name}"),
            Err(engine::alerts::RuleError::Conflict(_)) => {}
            Err(e) => eprintln!("demo alert rule {name} not added: {e}"),
        }
    }
}
