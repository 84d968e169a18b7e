//! Replay plans: the list, one plan's live progress, and the panel that plans a replay.

pub mod api;
pub mod panel;
pub mod plan;

use leptos::prelude::*;

use crate::layout::{ErrorBox, PageTitle};
use crate::widgets::{Pill, Time};
use api::{PlanView, replay_list};

/// Sent / failed / cancelled / left as one bar.
#[component]
pub fn Progress(p: PlanView) -> impl IntoView {
    // SVG, not styled divs: the CSP allows no inline styles, and widths are data.
    let total = p.total.max(1) as f64;
    let w = |n: i64| n as f64 * 192.0 / total;
    let died_again: i64 = p.died_again.iter().map(|(_, n)| n).sum();
    let died = died_again > 0;
    let (sent, failed, cancelled) = (w(p.sent), w(p.failed), w(p.cancelled));
    view! {
        <svg viewBox="0 0 192 8" class="w-48 h-2 rounded" role="img"
            aria-label=format!("{} sent, {} failed, {} left", p.sent, p.failed, p.left)>
            <rect x="0" y="0" width="192" height="8" class="fill-slate-200 dark:fill-slate-800" />
            <rect x="0" y="0" width=format!("{sent:.1}") height="8" class="fill-emerald-500" />
            <rect x=format!("{sent:.1}") y="0" width=format!("{failed:.1}") height="8" class="fill-red-500" />
            <rect x=format!("{:.1}", sent + failed) y="0" width=format!("{cancelled:.1}") height="8" class="fill-slate-400" />
        </svg>
        <div class="text-xs tabular-nums muted" data-testid="progress">
            {format!("{} sent · {} failed · {} cancelled · {} left of {}", p.sent, p.failed, p.cancelled, p.left, p.total)}
            {died.then(|| view! { <span class="text-red-700 dark:text-red-400">{format!(" · died again {died_again}")}</span> })}
        </div>
    }
}

#[component]
pub fn ReplaysPage() -> impl IntoView {
    let tick = crate::widgets::use_tick(std::time::Duration::from_secs(3));
    let plans = Resource::new(move || tick.get(), |_| replay_list());
    view! {
        <PageTitle title="Replays" />
        <p class="text-sm muted mb-3">"Plan a replay from the Dead letters page: pick messages, a failure group, or everything matching a filter."</p>
        <Transition fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match plans.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(list) => {
                        let empty = list.is_empty();
                        view! {
                            <div tabindex="0" class="card overflow-x-auto">
                                <table class="tbl" data-testid="plans">
                                    <thead><tr><th>"Plan"</th><th>"Status"</th><th>"Progress"</th><th>"Target"</th><th>"Rate"</th><th>"Starts"</th><th>"By"</th></tr></thead>
                                    <tbody>
                                        {list.into_iter().map(|p| view! {
                                            <tr>
                                                <td><a class="underline" href=types::routes::replay_plan(p.id)>{format!("#{}", p.id)}</a></td>
                                                <td><Pill text=p.status />{p.paused_reason.clone().map(|r| view! { <div class="text-xs muted">{r}</div> })}</td>
                                                <td><Progress p=p.clone() /></td>
                                                <td class="text-xs">{p.target.clone()}</td>
                                                <td class="tabular-nums">{p.rate_per_sec.map(|r| format!("{r}/s")).unwrap_or_else(|| "max".into())}</td>
                                                <td class="text-xs"><Time at=p.start_at /></td>
                                                <td>{p.created_by.clone()}</td>
                                            </tr>
                                        }).collect_view()}
                                    </tbody>
                                </table>
                                {empty.then(|| view! { <p class="p-3 text-sm muted">"No replay plans yet."</p> })}
                            </div>
                        }.into_any()
                    }
                }
            })}
        </Transition>
    }
}
