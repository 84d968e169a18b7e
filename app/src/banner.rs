//! The banner on every page: RabbitMQ blocking publishers (roles wait, nothing is lost), and
//! firing alerts, each linking to the page that shows its cause.

use leptos::prelude::*;

pub mod api;
use api::*;

/// Shown only to signed-in users; refreshed every 15 s and on every navigation.
#[component]
pub fn FiringBanner() -> impl IntoView {
    let location = leptos_router::hooks::use_location();
    let tick = crate::widgets::use_tick(std::time::Duration::from_secs(15));
    let firing = Resource::new(move || (location.pathname.get(), tick.get()), |_| firing_alerts());
    let blocked = Resource::new(move || (location.pathname.get(), tick.get()), |_| broker_blocked());
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                blocked.await.ok().flatten().map(|b| view! {
                    <div role="alert" data-testid="broker-blocked" class="bg-amber-800 text-white text-sm">
                        <div class="max-w-7xl mx-auto px-4 py-1.5 flex flex-wrap gap-x-4 gap-y-1 items-center">
                            <span class="font-semibold">{b.line()}</span>
                            <span>{format!("{} waiting, not timing out; nothing is lost", b.roles.join(", "))}</span>
                            <a class="underline text-xs" href=format!("/{}", types::routes::seg::TOPOLOGY)>"topology"</a>
                        </div>
                    </div>
                })
            })}
        </Transition>
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
                                    <span class="font-normal">{format!(" · {}", crate::format::age_secs(a.since_secs))}</span>
                                </a>
                                <a class="text-xs underline" href=types::routes::alert_rule(a.rule_id)>"rule"</a>
                            }).collect_view()}
                        </div>
                    </div>
                })
            })}
        </Transition>
    }
}
