//! Overview: what an on-call engineer checks first — what is firing, each outbox source's
//! oldest pending age, a replication slot nobody reads, each DLQ's depth, the newest failure groups awaiting triage, the roles'
//! heartbeats, and the two engines' health.
//! Refreshed every 5 seconds in the browser.

use crate::format;
use crate::layout::{ErrorBox, PageTitle, StatusDot};
use crate::pages::dead_letters::{
    QueueCards,
    api::{GroupsQuery, dl_groups, dl_queues},
};
use crate::pages::outbox::{
    api::outbox_health,
    slots::{AbandonedSlots, outbox_slots},
};
use leptos::prelude::*;

pub mod api;
use api::{dependency_status, heartbeats};

#[component]
pub fn OverviewPage() -> impl IntoView {
    let tick = crate::widgets::use_tick(std::time::Duration::from_secs(5));
    let deps = Resource::new(move || tick.get(), |_| dependency_status());
    let outbox = Resource::new(move || tick.get(), |_| outbox_health());
    let slots = Resource::new(move || tick.get(), |_| outbox_slots());
    let dlqs = Resource::new(move || tick.get(), |_| dl_queues());
    let beats = Resource::new(move || tick.get(), |_| heartbeats());
    let groups =
        Resource::new(move || tick.get(), |_| dl_groups(GroupsQuery { only_awaiting: true, ..Default::default() }));
    let section = |title: &'static str| {
        view! { <h2 class="text-sm font-semibold uppercase tracking-wide text-slate-600 dark:text-slate-400 mb-2 mt-5">{title}</h2> }
    };
    view! {
        <PageTitle title="Overview" />
        {section("Outbox: oldest pending")}
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match outbox.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(list) => view! {
                        <div class="grid sm:grid-cols-2 lg:grid-cols-3 gap-3" data-testid="overview-outbox">
                            {list.into_iter().map(|s| {
                                let late = s.oldest_pending_secs.is_some_and(|a| a > s.stuck_after_secs);
                                view! {
                                    <a class="card px-3 py-2 block hover:border-violet-400" href=types::routes::outbox_source(&s.source)>
                                        <div class="flex"><span class="font-medium">{s.source.clone()}</span>
                                        <span class="ml-auto text-xs muted">"pending "{s.pending.clone()}" · stuck "{s.stuck.clone()}" · failed "{s.failed.clone()}</span></div>
                                        <div class="text-2xl font-semibold tabular-nums" class=(["text-red-700", "dark:text-red-400"], late) data-testid="oldest-pending">
                                            {s.oldest_pending_secs.map(format::age_secs).unwrap_or_else(|| "none pending".into())}
                                        </div>
                        <div class="text-xs muted" data-testid="source-relay">{s.relay.clone()}</div>
                        {s.stream.clone().map(|st| view! {
                            <div class="text-xs muted" data-testid="source-stream">{st.line}</div>
                            {st.held.map(|h| view! { <div class="text-xs text-red-700 dark:text-red-300" data-testid="source-held">{h}</div> })}
                        })}
                                    </a>
                                }
                            }).collect_view()}
                        </div>
                    }.into_any(),
                }
            })}
        </Transition>
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match slots.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(slots) => view! { <AbandonedSlots slots /> }.into_any(),
                }
            })}
        </Transition>
        {section("Dead-letter queues")}
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match dlqs.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(list) => view! { <QueueCards list manage=None /> }.into_any(),
                }
            })}
        </Transition>
        {section("Newest failure groups awaiting triage")}
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match groups.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(list) if list.is_empty() => view! { <p class="muted text-sm" data-testid="overview-groups">"Nothing awaits triage."</p> }.into_any(),
                    Ok(list) => view! {
                        <div class="card" data-testid="overview-groups">
                            <table class="tbl"><tbody>
                                {list.into_iter().take(5).map(|g| view! {
                                    <tr>
                                        <td><a class="underline font-mono text-xs" href=types::routes::failure_group(g.id)>{format!("#{}", g.id)}</a></td>
                                        <td class="font-mono text-xs break-all">{g.original_queue.unwrap_or_else(|| "—".into())}</td>
                                        <td class="text-xs break-words"><b>{g.error_type.unwrap_or_else(|| g.reason.clone())}</b></td>
                                        <td class="text-right tabular-nums font-semibold">{g.awaiting}" awaiting"</td>
                                        <td class="whitespace-nowrap text-xs muted">{format::age_secs(g.last_seen_secs)}" ago"</td>
                                    </tr>
                                }).collect_view()}
                            </tbody></table>
                        </div>
                    }.into_any(),
                }
            })}
        </Transition>
        <div class="grid lg:grid-cols-2 gap-4">
            <section>
                {section("Roles")}
                <Transition fallback=|| ()>
                    {move || Suspend::new(async move {
                        match beats.await {
                            Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                            Ok(list) => {
                                let empty = list.is_empty();
                                view! {
                                    <div class="card">
                                        <table class="tbl" data-testid="heartbeats">
                                            <thead><tr><th>"Role"</th><th>"Host"</th><th>"Instance"</th><th>"Last seen"</th><th>"Detail"</th></tr></thead>
                                            <tbody>
                                                {list.into_iter().map(|h| {
                                                    let fresh = h.last_seen_secs < 30;
                                                    view! {
                                                        <tr>
                                                            <td class="flex items-center gap-2"><StatusDot ok=fresh />{h.role}</td>
                                                            <td>{h.host}</td>
                                                            <td class="font-mono text-xs">{format::clip(&h.instance, 13)}</td>
                                                            <td class="tabular-nums">{format::age_secs(h.last_seen_secs)}" ago"</td>
                                                            <td class="text-xs muted" data-testid="heartbeat-summary">{h.summary}</td>
                                                        </tr>
                                                    }
                                                }).collect_view()}
                                            </tbody>
                                        </table>
                                        {empty.then(|| view! { <p class="p-2 text-sm muted">"No relay or ingester has reported."</p> })}
                                    </div>
                                }.into_any()
                            }
                        }
                    })}
                </Transition>
            </section>
            <section>
                {section("Dependencies")}
                <Transition fallback=|| ()>
                    {move || Suspend::new(async move {
                        match deps.await {
                            Ok(list) => view! {
                                <div class="grid gap-3" data-testid="dependencies">
                                    {list.into_iter().map(|d| view! {
                                        <div class="card px-3 py-2">
                                            <div class="flex items-center gap-2 font-medium">
                                                <StatusDot ok=d.ok />
                                                <span>{d.name.clone()}</span>
                                                <span class="ml-auto text-xs" class=(["text-emerald-700", "dark:text-emerald-400"], d.ok) class=(["text-red-700", "dark:text-red-400"], !d.ok)>
                                                    {if d.ok { "reachable" } else { "unreachable" }}
                                                </span>
                                            </div>
                                            <div class="text-xs muted mt-1 font-mono break-all">{d.detail.clone()}</div>
                                        </div>
                                    }).collect_view()}
                                </div>
                            }.into_any(),
                            Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                        }
                    })}
                </Transition>
            </section>
        </div>
    }
}
