//! The banner of firing alerts on every page, each linking to the page that shows its cause.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FiringView {
    pub rule_id: i64,
    pub name: String,
    pub severity: String,
    pub target: Option<String>,
    pub value: Option<f64>,
    pub since_secs: i64,
    pub link: String,
    pub message: Option<String>,
}

#[server(prefix = "/api", endpoint = "alerts/firing")]
pub async fn firing_alerts() -> Result<Vec<FiringView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let now = chrono::Utc::now();
    Ok(engine::alerts::firing(&state.pool)
        .await?
        .into_iter()
        .filter(|a| !a.silenced)
        .map(|a| FiringView {
            rule_id: a.rule_id,
            name: a.name,
            severity: a.severity.as_str().to_string(),
            target: a.target,
            value: a.value,
            since_secs: (now - a.since).num_seconds(),
            link: a.link,
            message: a.message,
        })
        .collect())
}

/// Shown only to signed-in users; refreshed every 15 s and on every navigation.
#[component]
pub fn FiringBanner() -> impl IntoView {
    let location = leptos_router::hooks::use_location();
    let tick = crate::widgets::use_tick(std::time::Duration::from_secs(15));
    let firing = Resource::new(move || (location.pathname.get(), tick.get()), |_| firing_alerts());
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                let list = firing.await.unwrap_or_default();
                (!list.is_empty()).then(|| view! {
                    <div role="alert" data-testid="firing-banner" class="bg-red-700 text-white text-sm">
                        <div class="max-w-7xl mx-auto px-4 py-1.5 flex flex-wrap gap-x-4 gap-y-1 items-center">
                            <span class="font-semibold">{format!("{} firing", list.len())}</span>
                            {list.into_iter().map(|a| view! {
                                <a class="underline decoration-white/50 hover:decoration-white" href=a.link.clone()>
                                    <span class="uppercase text-xs font-bold mr-1">{a.severity.clone()}</span>
                                    {a.name.clone()}
                                    {a.value.map(|v| format!(" = {v}"))}
                                    <span class="opacity-80">{format!(" · {}", crate::format::age_secs(a.since_secs))}</span>
                                </a>
                                <a class="text-xs opacity-80 underline" href=format!("/alerts/{}", a.rule_id)>"rule"</a>
                            }).collect_view()}
                        </div>
                    </div>
                })
            })}
        </Transition>
    }
}
