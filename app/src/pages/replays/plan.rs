//! One replay plan: live progress, its items, and pause / resume / cancel.

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use super::Progress;
use super::api::{ItemStatus, Order, PlanPage, PlanStatus, ReplayControl, replay_get};
use crate::auth::whoami;
use crate::layout::{ErrorBox, PageTitle};
use crate::widgets::{Pill, Time};

#[component]
pub fn PlanPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").and_then(|v| v.parse::<i64>().ok()).unwrap_or(0));
    let tick = crate::widgets::use_tick(std::time::Duration::from_secs(2));
    let control = ServerAction::<ReplayControl>::new();
    let query = use_query_map();
    let page = move || {
        query.with(|q| {
            (q.get("after").and_then(|v| v.parse::<i64>().ok()), q.get("status").and_then(|s| ItemStatus::parse(&s)))
        })
    };
    let plan = Resource::new(
        move || (id(), page(), tick.get(), control.version().get()),
        |(id, (after, status), _, _)| replay_get(id, after, status),
    );
    let caller = Resource::new(|| (), |_| whoami());
    view! {
        <PageTitle title="Replay plan" />
        <a class="text-sm underline" href="/replays">"← all replays"</a>
        {move || control.value().get().and_then(|r| r.err()).map(|err| view! { <div class="my-2"><ErrorBox err /></div> })}
        <Transition fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let can_operate = matches!(caller.await, Ok(Some(ref c)) if c.can_operate());
                match plan.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(PlanPage { plan: p, items, next_after }) => {
                        let (after, status) = page();
                        let base = types::routes::replay_plan(p.id);
                        let filtered = |s: Option<ItemStatus>| match s {
                            Some(s) => format!("{base}?status={s}"),
                            None => base.clone(),
                        };
                        let tabs: Vec<(String, String, bool)> = [None, Some(ItemStatus::Failed), Some(ItemStatus::Unconfirmed), Some(ItemStatus::Pending), Some(ItemStatus::Sent)]
                            .into_iter()
                            .map(|s| (filtered(s), s.map(|s| s.to_string()).unwrap_or_else(|| "all items".into()), s == status))
                            .collect();
                        let next = next_after.map(|n| match status {
                            Some(s) => format!("{base}?status={s}&after={n}"),
                            None => format!("{base}?after={n}"),
                        });
                        let first = after.is_some().then(|| filtered(status));
                        let pid = p.id;
                        let live = !p.status.finished();
                        view! {
                            <div class="card p-3 my-3 flex flex-wrap items-center gap-4" data-testid="plan">
                                <span class="text-lg font-semibold">{format!("Plan #{}", p.id)}</span>
                                <Pill text=p.status />
                                <div><Progress p=p.clone() /></div>
                                <div class="text-sm">
                                    <div>{p.target.clone()}</div>
                                    <div class="muted text-xs" data-testid="plan-selection">{format!("Frozen set: {}", p.selection)}</div>
                                    <div class="muted text-xs">{format!("by {} · created ", p.created_by)}<Time at=p.created_at />" · starts "<Time at=p.start_at />{format!(" · {}{}",
                                        p.rate_per_sec.map(|r| format!("{r} msg/s")).unwrap_or_else(|| "no rate limit".into()),
                                        if p.order == Order::None { String::new() } else { format!(" · {}", p.order.describe()) })}</div>
                                    {p.paused_reason.clone().map(|r| view! { <div class="text-amber-700 dark:text-amber-400 text-xs">{r}</div> })}
                                    {(p.died_again.is_empty()).then(|| view! {
                                        <div class="text-sm muted" data-testid="died-again">"died again 0: none of its messages came back to a dead-letter queue"</div>
                                    })}
                                    {(!p.died_again.is_empty()).then(|| {
                                        let total: i64 = p.died_again.iter().map(|(_, n)| n).sum();
                                        view! {
                                            <div class="text-red-700 dark:text-red-400 text-sm" data-testid="died-again">
                                                <b>{format!("died again {total}")}</b>
                                                {p.died_again.iter().map(|(g, n)| match g {
                                                    Some(g) => view! { " · "<a class="underline" href=types::routes::group_messages(*g)>{format!("{n} in group #{g}")}</a> }.into_any(),
                                                    None => view! { " · "{format!("{n} ungrouped")} }.into_any(),
                                                }).collect_view()}
                                            </div>
                                        }
                                    })}
                                    {(!p.held_keys.is_empty()).then(|| view! {
                                        <div class="text-amber-700 dark:text-amber-400 text-xs" data-testid="held-keys">
                                            "Held back after a failure (their later messages await triage again): "
                                            {p.held_keys.iter().map(|(k, first)| view! {
                                                <span class="font-mono">{k.clone()}</span>" (after "
                                                <a class="underline" href=types::routes::dead_letter(*first)>{format!("#{first}")}</a>") "
                                            }).collect_view()}
                                        </div>
                                    })}
                                    {(p.unconfirmed > 0).then(|| view! {
                                        <div class="text-amber-700 dark:text-amber-400 text-xs" data-testid="plan-unconfirmed">
                                            {format!("{} unconfirmed: no confirm came in time, so they may have been delivered. They stay out of triage and are sent again under the same message id.", p.unconfirmed)}
                                        </div>
                                    })}
                                    {p.waiting.clone().map(|w| view! { <div class="text-amber-700 dark:text-amber-400 text-xs" data-testid="plan-waiting">{w}</div> })}
                                </div>
                                {(can_operate && live).then(|| view! {
                                    <div class="ml-auto flex gap-2">
                                        {(p.status != PlanStatus::Paused).then(|| view! {
                                            <button class="btn" on:click=move |_| { control.dispatch(ReplayControl { id: pid, action: "pause".into() }); }>"Pause"</button>
                                        })}
                                        {(p.status == PlanStatus::Paused).then(|| view! {
                                            <button class="btn" on:click=move |_| { control.dispatch(ReplayControl { id: pid, action: "resume".into() }); }>"Resume"</button>
                                        })}
                                        <button class="btn btn-danger" on:click=move |_| { control.dispatch(ReplayControl { id: pid, action: "cancel".into() }); }>"Cancel"</button>
                                    </div>
                                })}
                            </div>
                            <crate::widgets::Tabs items=tabs />
                            <div tabindex="0" class="card overflow-x-auto">
                                <table class="tbl" data-testid="plan-items">
                                    <thead><tr><th>"#"</th><th>"Dead letter"</th><th>"To"</th><th>"Status"</th><th>"Error"</th></tr></thead>
                                    <tbody>
                                        {items.into_iter().map(|i| view! {
                                            <tr>
                                                <td class="tabular-nums">{i.seq}</td>
                                                <td><a class="underline" href=types::routes::dead_letter(i.dead_letter_id)>{format!("#{}", i.dead_letter_id)}</a></td>
                                                <td class="font-mono text-xs">{format!("{} / {}", i.exchange, i.routing_key)}</td>
                                                <td><Pill text=i.status /></td>
                                                <td class="text-xs text-red-700 dark:text-red-300">{i.error}</td>
                                            </tr>
                                        }).collect_view()}
                                    </tbody>
                                </table>
                            </div>
                            <p class="flex gap-3 text-sm mt-2" data-testid="plan-items-pages">
                                {first.map(|h| view! { <a class="btn" href=h>"← First items"</a> })}
                                {next.map(|h| view! { <a class="btn" href=h data-testid="plan-items-next">"Next items →"</a> })}
                            </p>
                        }.into_any()
                    }
                }
            })}
        </Transition>
    }
}
