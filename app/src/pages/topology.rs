//! Topology: does each queue keep the promises its reliability contract asks for? The live
//! broker checked through the management API — pass / warn / fail per queue, exchange and
//! node, with the reason and the fix — and the contracts that set each queue's level.

pub mod api;
mod contracts;
mod report;
#[cfg(test)]
mod tests;

use leptos::prelude::*;

use crate::auth::whoami;
use crate::layout::{ErrorBox, PageTitle};
use crate::pages::dead_letters::watch::Manage;
use crate::widgets::Time;
use api::{topology_contracts, topology_report};

#[component]
pub fn TopologyPage() -> impl IntoView {
    // Bumped by a contract change: both the contracts and the verdicts they set refetch.
    let acted = RwSignal::new(0u32);
    let report = Resource::new(move || acted.get(), |_| topology_report());
    let contracts = Resource::new(move || acted.get(), |_| topology_contracts());
    let caller = Resource::new(|| (), |_| whoami());
    // Outside the Suspense blocks, so it survives the refetch a change causes.
    let notice = RwSignal::new(None::<String>);
    // Its own line above the queues, for a "Start ingesting" from the queue table.
    let ingest_notice = RwSignal::new(None::<String>);
    let manage = Manage { acted, notice: ingest_notice };
    view! {
        <PageTitle title="Topology" />
        <Suspense fallback=|| view! { <p class="muted text-sm">"Reading the broker…"</p> }>
            {move || Suspend::new(async move {
                let admin = matches!(caller.await, Ok(Some(ref c)) if c.is_admin());
                let manage = admin.then_some(manage);
                match report.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(r) => view! {
                        <p class="muted text-xs mb-2" data-testid="topology-source">
                            "vhost "<span class="font-mono">{r.vhost.clone()}</span>
                            {r.rabbitmq_version.clone().map(|v| view! { " · RabbitMQ "{v} })}
                            {if r.reachable { " · checked " } else { " · tried " }}<Time at=r.taken_at />
                        </p>
                        {move || ingest_notice.get().map(|m| view! { <p class="mb-2 text-sm text-emerald-700 dark:text-emerald-400" role="status" data-testid="topology-notice">{m}</p> })}
                        <report::ReportBody r manage />
                    }.into_any(),
                }
            })}
        </Suspense>
        <h2 class="text-base font-semibold mt-6 mb-1">"Contracts"</h2>
        <p class="muted text-xs mb-2">
            "A contract sets how much a queue's messages matter. The most specific pattern wins; "
            "a console contract beats a revenant.toml one with the same pattern; unmatched queues are standard."
        </p>
        {move || notice.get().map(|m| view! { <p class="mb-2 text-sm text-emerald-700 dark:text-emerald-400" role="status">{m}</p> })}
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let can_operate = matches!(caller.await, Ok(Some(ref c)) if c.can_operate());
                match contracts.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(list) => view! { <contracts::Contracts list can_operate acted notice /> }.into_any(),
                }
            })}
        </Suspense>
    }
}
