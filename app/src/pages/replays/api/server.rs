//! The server side of the replay server functions.

use engine::auth::Principal;
use engine::replay::{self, CreatePlan, Selection, Target, TargetMode, lineage::Event};
use engine::settings::ExposeSecret;

use super::*;

fn replay_error(e: replay::ReplayError) -> AppError {
    use replay::ReplayError as E;
    match e {
        E::NotFound(_) | E::DeadLetterNotFound(_) => AppError::NotFound(e.to_string()),
        E::Conflict(m) => AppError::Conflict(m),
        E::Invalid(m) => AppError::Invalid(m),
        E::Db(e) => AppError::from(e),
    }
}

fn selection(s: SelectionInput) -> Result<Selection, AppError> {
    match s {
        SelectionInput::Ids(ids) if ids.is_empty() => Err(AppError::Invalid("pick at least one message".into())),
        SelectionInput::Ids(ids) => Ok(Selection::Ids(ids)),
        SelectionInput::Filter(q) => Ok(Selection::Filter(crate::pages::dead_letters::api::filter_for(&q)?)),
    }
}

fn target(t: TargetInput) -> Result<Target, AppError> {
    let need = |v: &str, what: &str| {
        let v = v.trim();
        if v.is_empty() {
            Err(AppError::Invalid(format!("{what} is required for this target")))
        } else {
            Ok(v.to_string())
        }
    };
    match t.mode.as_str() {
        "" | "origin" => Ok(Target::Origin),
        "original" => Ok(Target::Original),
        "exchange" => Ok(Target::Exchange {
            exchange: need(&t.exchange, "the exchange")?,
            routing_key: t.routing_key.trim().to_string(),
        }),
        "queue" => Ok(Target::Queue { queue: need(&t.queue, "the queue")? }),
        other => Err(AppError::Invalid(format!("unknown target `{other}`"))),
    }
}

fn number<T: std::str::FromStr>(field: &str, v: &str) -> Result<Option<T>, AppError> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    v.parse::<T>().map(Some).map_err(|_| AppError::Invalid(format!("{field}: `{v}` is not a number")))
}

pub fn plan_view(p: replay::Plan) -> PlanView {
    let target = match p.target_mode {
        TargetMode::Origin => "each message's origin queue".to_string(),
        TargetMode::Original => "original exchange and routing key".to_string(),
        TargetMode::Queue => format!("queue {}", p.target_routing_key.clone().unwrap_or_default()),
        TargetMode::Exchange => format!(
            "exchange `{}` key `{}`",
            p.target_exchange.clone().unwrap_or_default(),
            p.target_routing_key.clone().unwrap_or_default()
        ),
    };
    let selection = serde_json::from_value::<replay::Selection>(p.source.clone())
        .map(|s| s.words())
        .unwrap_or_else(|_| "not readable (a plan from an older version)".into());
    PlanView {
        selection,
        left: p.left(),
        order: p.order(),
        id: p.id,
        created_by: p.created_by,
        created_at: p.created_at,
        target,
        rate_per_sec: p.rate_per_sec,
        start_at: p.start_at,
        status: p.status,
        paused_reason: p.paused_reason,
        total: p.total,
        sent: p.sent,
        failed: p.failed,
        cancelled: p.cancelled,
        waiting: None,
        died_again: Vec::new(),
        held_keys: Vec::new(),
        unconfirmed: 0,
    }
}

pub async fn preview(s: SelectionInput, t: TargetInput) -> Result<PreviewView, AppError> {
    let state = crate::state::app_state()?;
    let chosen = selection(s)?;
    let mut p = replay::preview::preview(&state.pool, state.settings.amqp_url.expose_secret(), &chosen, &target(t)?)
        .await
        .map_err(replay_error)?;
    // Through an exchange, name every queue it reaches (a fan-out copies to siblings).
    let mut reach_error = None;
    if let Some(url) = state.settings.management_url.as_ref().map(|u| u.expose_secret()) {
        let http = engine::topology::http_client().map_err(AppError::internal)?;
        let vhost = engine::settings::vhost_of(state.settings.amqp_url.expose_secret());
        if let Err(e) = replay::preview::reaches(&http, url, &vhost, &mut p.targets).await {
            reach_error = Some(format!("cannot tell which queues the exchanges route to: {e}"));
        }
    }
    Ok(PreviewView {
        selection: chosen.words(),
        count: p.count,
        targets: p
            .targets
            .into_iter()
            .map(|t| TargetView {
                exchange: t.exchange,
                routing_key: t.routing_key,
                count: t.count,
                exists: t.exists,
                queue: t.queue,
                consumers: t.consumers,
                reaches: t.reaches,
            })
            .collect(),
        more_targets: p.more_targets,
        without_destination: p.without_destination,
        origin_queues: p.origin_queues,
        already_replayed: p.already_replayed,
        kinds: p.kinds,
        needs_typed_confirmation: p.needs_typed_confirmation,
        broker_error: match (p.broker_error, reach_error) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        },
    })
}

pub async fn create(who: &Principal, s: SelectionInput, t: TargetInput, o: PlanOptions) -> Result<i64, AppError> {
    let state = crate::state::app_state()?;
    let mut req = CreatePlan::new(selection(s)?, target(t)?);
    req.rate_per_sec = number::<f32>("rate", &o.rate_per_sec)?;
    if req.rate_per_sec.is_some_and(|r| !(0.1..=10_000.0).contains(&r)) {
        return Err(AppError::Invalid("rate: between 0.1 and 10000 messages per second".into()));
    }
    if let Some(m) = number::<i64>("start in", &o.start_in_mins)? {
        if !(0..=10_080).contains(&m) {
            return Err(AppError::Invalid("start in: between 0 and 10080 minutes (a week)".into()));
        }
        req.start_at = Some(chrono::Utc::now() + chrono::Duration::minutes(m));
    }
    req.order = o.order;
    if let Some(p) = number::<f32>("auto-pause share", &o.auto_pause_percent)? {
        if !(1.0..=100.0).contains(&p) {
            return Err(AppError::Invalid("auto-pause share: between 1 and 100 percent".into()));
        }
        req.auto_pause_share = Some(p / 100.0);
    }
    req.confirm_count = number::<i64>("typed confirmation", &o.confirm_count)?;
    let ip = crate::guard::client_ip();
    let plan = replay::plan::create(&state.pool, who, ip.as_deref(), &req).await.map_err(replay_error)?;
    Ok(plan.id)
}

pub async fn list() -> Result<Vec<PlanView>, AppError> {
    let state = crate::state::app_state()?;
    let mut plans: Vec<PlanView> = replay::progress::list(&state.pool, None, 100)
        .await
        .map_err(replay_error)?
        .into_iter()
        .map(plan_view)
        .collect();
    let ids: Vec<i64> = plans.iter().map(|p| p.id).collect();
    for (plan, group, n) in replay::progress::died_again_of(&state.pool, &ids).await.map_err(replay_error)? {
        if let Some(p) = plans.iter_mut().find(|p| p.id == plan) {
            p.died_again.push((group, n));
        }
    }
    Ok(plans)
}

pub async fn get(id: i64, after: Option<i64>, status: Option<ItemStatus>) -> Result<PlanPage, AppError> {
    let state = crate::state::app_state()?;
    let plan = replay::progress::get(&state.pool, id).await.map_err(replay_error)?;
    let status = status.map(|s| s.as_str());
    let mut items =
        replay::progress::items(&state.pool, id, status, after, ITEMS_PER_PAGE + 1).await.map_err(replay_error)?;
    let next_after = if items.len() as i64 > ITEMS_PER_PAGE {
        items.truncate(ITEMS_PER_PAGE as usize);
        items.last().map(|i| i.seq)
    } else {
        None
    };
    let mut view = plan_view(plan);
    view.died_again = replay::progress::died_again(&state.pool, id).await.map_err(replay_error)?;
    if view.order.keyed() {
        let mut held = replay::items::held_keys(&state.pool, id).await.map_err(AppError::internal)?;
        held.truncate(super::HELD_KEYS_SHOWN);
        view.held_keys = held;
    }
    view.unconfirmed = replay::progress::unconfirmed(&state.pool, id).await.map_err(replay_error)?;
    if matches!(view.status, PlanStatus::Scheduled | PlanStatus::Running) {
        // A publisher beats every 5 s; one seen in the last 30 s, connected, is sending.
        let beats = engine::heartbeats::recent(&state.pool).await?;
        let blocked = beats.iter().find_map(|h| {
            (h.role == "replay" && h.age_secs < 30.0 && h.detail["stopped"].as_bool() != Some(true))
                .then(|| h.detail["blocked"]["reason"].as_str().map(str::to_string))
                .flatten()
        });
        let sending = beats.iter().any(|h| {
            h.role == "replay"
                && h.age_secs < 30.0
                && h.detail["connected"].as_bool() == Some(true)
                && h.detail["stopped"].as_bool() != Some(true)
        });
        if let Some(reason) = blocked {
            view.waiting = Some(format!(
                "RabbitMQ blocks publishing ({reason}): this plan waits without timing out, and goes on by itself once the alarm clears."
            ));
        } else if !sending {
            view.waiting = Some(
                "No replay publisher is connected to RabbitMQ now: this plan waits, and goes on by itself once one is."
                    .into(),
            );
        }
    }
    Ok(PlanPage {
        plan: view,
        items: items
            .into_iter()
            .map(|i| ItemView {
                dead_letter_id: i.dead_letter_id,
                seq: i.seq,
                exchange: i.exchange,
                routing_key: i.routing_key,
                status: i.status,
                error: i.error,
            })
            .collect(),
        next_after,
    })
}

pub async fn control(who: &Principal, id: i64, action: &str) -> Result<PlanView, AppError> {
    let state = crate::state::app_state()?;
    let ip = crate::guard::client_ip();
    let plan = match action {
        "pause" => replay::plan::pause(&state.pool, who, ip.as_deref(), id, Some("paused from the console")).await,
        "resume" => replay::plan::resume(&state.pool, who, ip.as_deref(), id).await,
        "cancel" => replay::plan::cancel(&state.pool, who, ip.as_deref(), id).await,
        other => return Err(AppError::Invalid(format!("unknown action `{other}`"))),
    }
    .map_err(replay_error)?;
    Ok(plan_view(plan))
}

pub async fn story(id: i64) -> Result<Vec<StoryView>, AppError> {
    let state = crate::state::app_state()?;
    let events = replay::lineage::story(&state.pool, id).await.map_err(replay_error)?;
    // Edits are part of the story too: who changed what before a replay.
    let edits = replay::edit_log::of(&state.pool, id).await?;
    let mut out: Vec<(chrono::DateTime<chrono::Utc>, StoryView)> = edits
        .into_iter()
        .map(|e| {
            let note = e.note.map(|n| format!(": {n}")).unwrap_or_default();
            let text = format!("edit #{} by {}{note}", e.id, e.edited_by);
            (e.edited_at, StoryView { at: e.edited_at, dead_letter_id: id, kind: "edited".into(), text })
        })
        .collect();
    out.extend(events.into_iter().map(|e| {
        let (kind, text) = match e.event {
            Event::DeadLettered { queue, reason, error_type, error_message, death_count, replay_of } => (
                "dead-lettered",
                format!(
                    "dead-lettered into {queue} ({reason}, {death_count} deaths){}{}",
                    error_type.map(|t| format!(": {t}")).unwrap_or_default(),
                    match (error_message, replay_of) {
                        (m, Some(r)) => format!(
                            "{} — died again after replay of #{r}",
                            m.map(|m| format!(" {m}")).unwrap_or_default()
                        ),
                        (Some(m), None) => format!(" {m}"),
                        (None, None) => String::new(),
                    }
                ),
            ),
            Event::ReplayPlanned { plan_id, by, exchange, routing_key } => {
                ("planned", format!("put in replay plan #{plan_id} by {by} → `{exchange}` / `{routing_key}`"))
            }
            Event::Replayed { plan_id, by, exchange, routing_key } => {
                ("replayed", format!("replayed by {by} (plan #{plan_id}) to `{exchange}` / `{routing_key}`, confirmed"))
            }
            Event::ReplayFailed { plan_id, by, error } => (
                "failed",
                format!("replay by {by} (plan #{plan_id}) failed: {}", error.unwrap_or_else(|| "no reason".into())),
            ),
            Event::ReplayCancelled { plan_id, by } => {
                ("cancelled", format!("plan #{plan_id} by {by} cancelled before sending"))
            }
        };
        (e.at, StoryView { at: e.at, dead_letter_id: e.dead_letter_id, kind: kind.into(), text })
    }));
    out.sort_by_key(|(at, _)| *at);
    Ok(out.into_iter().map(|(_, v)| v).collect())
}
