//! Starting and stopping the ingest of a queue: a start that may drain a queue that is not
//! a dead-letter queue waits for the queue's name typed out (`watch::caution`).

use engine::auth::Principal;
use engine::dead_letter::watch::{self, Origin, WatchError, caution};
use engine::settings::ExposeSecret;

use super::super::WatchOutcome;
use crate::error::AppError;

pub async fn set(
    principal: &Principal,
    queue: &str,
    start: bool,
    confirm: Option<&str>,
) -> Result<WatchOutcome, AppError> {
    let state = crate::state::app_state()?;
    watch::check_name(queue).map_err(|e| AppError::Invalid(e.to_string()))?;
    let already = watch::watching(&state.pool).await?.iter().any(|q| q == queue);
    if start && !already {
        // The vhost the ingesters consume from, whatever the Topology page shows.
        let vhost = engine::settings::vhost_of(state.settings.amqp_url.expose_secret());
        let url = state.settings.management_url.as_ref().map(|u| u.expose_secret());
        let cautions = caution::check(url, &vhost, queue).await;
        if !caution::confirmed(queue, &cautions, confirm) {
            return Ok(WatchOutcome::Confirm {
                queue: queue.to_string(),
                reasons: cautions.iter().map(ToString::to_string).collect(),
                mismatch: confirm.is_some_and(|c| !c.trim().is_empty()),
            });
        }
    }
    let ip = crate::guard::client_ip();
    let done = watch::set(&state.pool, principal, ip.as_deref(), &[queue.to_string()], start, Origin::Console)
        .await
        .map_err(|e| match e {
            WatchError::BadName(_) => AppError::Invalid(e.to_string()),
            WatchError::Db(e) => AppError::from(e),
        })?;
    Ok(WatchOutcome::Done(match (start, done.changed.is_empty()) {
        (true, false) => format!("{queue}: ingesting starts within a few seconds."),
        (true, true) => format!("{queue} was already watched."),
        (false, false) => format!("{queue}: ingesting stops within a few seconds; its messages stay in RabbitMQ."),
        (false, true) => format!("{queue} was not being ingested."),
    }))
}
