//! Dead letters: queue depths, messages awaiting triage, failure groups, and the triage
//! actions.

pub mod api;
mod breakdown;
mod bulk;
pub mod detail;
mod edit;
pub mod group_replay;
pub mod groups;
pub mod inflow_chart;
pub mod watch;

use std::collections::BTreeSet;

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::auth::whoami;
use crate::format;
use crate::layout::{ErrorBox, PageTitle};
use crate::pages::replays::{api::SelectionInput, panel::ReplayPanel};
use crate::widgets::{BrokerLink, FilterField, Pager, Pill, Tabs, query_string};
use api::{DlQuery, dl_discovered, dl_list, dl_queues};
use watch::{Discovered, Manage, WatchButton};

fn read_query(m: &leptos_router::params::ParamsMap) -> DlQuery {
    DlQuery {
        queue: m.get("queue"),
        origin: m.get("origin"),
        msg_type: m.get("type"),
        shape: m.get("shape"),
        reason: m.get("reason"),
        status: m.get("status"),
        error: m.get("error"),
        body: m.get("body"),
        message_id: m.get("message_id"),
        group: m.get("group"),
        newer_than_mins: m.get("newer_than_mins"),
        older_than_mins: m.get("older_than_mins"),
    }
}

/// The filter's fields as they travel in the URL (`read_query` reads them back).
fn pairs(q: &DlQuery) -> Vec<(&'static str, Option<String>)> {
    vec![
        ("queue", q.queue.clone()),
        ("origin", q.origin.clone()),
        ("type", q.msg_type.clone()),
        ("shape", q.shape.clone()),
        ("reason", q.reason.clone()),
        ("status", q.status.clone()),
        ("error", q.error.clone()),
        ("body", q.body.clone()),
        ("message_id", q.message_id.clone()),
        ("group", q.group.clone()),
        ("newer_than_mins", q.newer_than_mins.clone()),
        ("older_than_mins", q.older_than_mins.clone()),
    ]
}

pub fn href(q: &DlQuery, after: Option<String>) -> String {
    href_at(q, ("after", after))
}

/// The list's link with one page cursor: `("after", …)` or `("before", …)`.
fn href_at(q: &DlQuery, cursor: (&str, Option<String>)) -> String {
    let mut pairs: Vec<(&str, Option<String>)> = pairs(q);
    pairs.push(cursor);
    format!("/dead-letters{}", query_string(&pairs))
}

/// The NDJSON download of everything `q` selects (every page, not only this one).
pub fn export_href(q: &DlQuery) -> String {
    types::routes::dead_letters_export(&query_string(&pairs(q)))
}

/// An inline SVG polyline of a series (no script, so it passes the CSP).
#[component]
pub fn Sparkline(series: Vec<i64>) -> impl IntoView {
    let max = series.iter().copied().max().unwrap_or(0).max(1) as f64;
    let n = series.len().max(2) as f64 - 1.0;
    let points = series
        .iter()
        .enumerate()
        .map(|(i, v)| format!("{:.1},{:.1}", i as f64 * 120.0 / n, 28.0 - (*v as f64 / max) * 26.0))
        .collect::<Vec<_>>()
        .join(" ");
    view! {
        <svg viewBox="0 0 120 30" class="w-32 h-8 text-violet-500" aria-label="depth over the last hour" role="img">
            <polyline points=points fill="none" stroke="currentColor" stroke-width="1.5" />
        </svg>
    }
}

/// A broker sample older than this (six sampling rounds) is said to be old rather than shown
/// as the queue's depth beside counts that are fresh.
const STALE_SAMPLE_SECS: i64 = 60;

#[component]
pub fn QueueCards(list: Vec<api::QueueView>, manage: Option<Manage>) -> impl IntoView {
    let empty = list.is_empty();
    view! {
        <div class="grid sm:grid-cols-2 lg:grid-cols-3 gap-3 mb-4" data-testid="dlq-cards">
            {list.into_iter().map(|q| {
                let href = types::routes::dead_letters_in(&q.queue);
                let state = match (q.watching, q.ingested) {
                    (true, true) => None,
                    (true, false) => Some("watched, but no live ingester consumes it"),
                    (false, true) => Some("stopped: an ingester is closing its consumer"),
                    (false, false) => Some("not ingested"),
                };
                // A queue the broker no longer has can be stopped, not started.
                let gone = q.missing_secs.is_some();
                let button = manage
                    .filter(|_| q.watching || !gone)
                    .map(|m| view! { <WatchButton queue=q.queue.clone() start=!q.watching manage=m /> });
                let stale = q.sampled_secs_ago.filter(|s| *s > STALE_SAMPLE_SECS);
                view! {
                    <div class="card px-3 py-2" data-testid="dlq-card">
                        <a href=href class="block hover:text-violet-700 dark:hover:text-violet-300">
                            <div class="flex items-center gap-2">
                                <span class="font-medium font-mono text-sm break-all">{q.queue.clone()}</span>
                                <span class="ml-auto flex items-center gap-1 text-xs muted" title="broker depth over the last hour">"depth"<Sparkline series=q.series.clone() /></span>
                            </div>
                            <div class="flex gap-4 text-sm mt-1">
                                <span><span class="text-xl font-semibold tabular-nums" data-testid="awaiting">{q.awaiting}</span>" awaiting triage"</span>
                                {match (q.missing_secs, stale) {
                                    (Some(_), _) => view! {
                                        <span class="text-red-700 dark:text-red-300" data-testid="queue-missing">"no longer exists on the broker"</span>
                                    }.into_any(),
                                    (None, Some(age)) => view! {
                                        <span class="text-amber-700 dark:text-amber-300" data-testid="stale-sample"
                                            title="the depth sampler runs with the ingest role, every 10 s">
                                            {format!("broker: not sampled for {} (then {} ready)", format::age_secs(age),
                                                q.ready.map(|r| r.to_string()).unwrap_or_else(|| "?".into()))}
                                        </span>
                                    }.into_any(),
                                    (None, None) => view! {
                                        <span class="muted">"broker: "{q.ready.map(|r| r.to_string()).unwrap_or_else(|| "?".into())}" ready · "
                                            {q.unacked.map(|r| r.to_string()).unwrap_or_else(|| "?".into())}" unacked · "
                                            {q.consumers.map(|r| r.to_string()).unwrap_or_else(|| "?".into())}" consumers"</span>
                                    }.into_any(),
                                }}
                            </div>
                            <inflow_chart::InflowChart per_minute=q.inflow.clone() />
                        </a>
                        {q.missing_secs.map(|secs| view! {
                            <p class="text-xs text-red-700 dark:text-red-300 mt-1" data-testid="queue-missing-note">
                                {format!("The broker has no queue by this name (for {}): its dead letters stay here to triage. ", format::age_secs(secs))}
                                {if q.watching { "Stop ingesting it, or declare it again." } else { "Declare it again to ingest it." }}
                            </p>
                        })}
                        {q.stuck.clone().map(|why| view! {
                            <p class="text-xs text-red-700 dark:text-red-300 mt-1 break-words" data-testid="stuck">"Not moving: "{why}</p>
                        })}
                        {(q.unreadable > 0).then(|| view! {
                            <p class="text-xs text-amber-700 dark:text-amber-300 mt-1 break-words" data-testid="unreadable-count"
                                title=q.unreadable_note.clone().unwrap_or_default()>
                                {format!("{} unreadable {}: ", q.unreadable, if q.unreadable == 1 { "message" } else { "messages" })}
                                {q.unreadable_note.clone().unwrap_or_default()}
                            </p>
                        })}
                        <div class="flex flex-wrap items-center gap-2 text-xs muted mt-1">
                            <span>{q.sampled_secs_ago.map(|s| format!("sampled {} ago", format::age_secs(s))).unwrap_or_else(|| "not sampled yet".into())}</span>
                            {state.map(|s| view! { <span class="text-amber-700 dark:text-amber-300" data-testid="ingest-state">{s}</span> })}
                            <BrokerLink href=q.broker_link.clone() />
                            <span class="ml-auto">{button}</span>
                        </div>
                    </div>
                }
            }).collect_view()}
            {empty.then(|| view! { <p class="muted text-sm">"No dead-letter queues are watched yet: start one below, with `revenant dlq add QUEUE`, or list them in ingest.queues."</p> })}
        </div>
    }
}

/// How often the list, its counts and the queue cards refresh in the browser. A refresh
/// keeps the selection and the scroll: the rows are patched in place, the panels stay open.
const REFRESH: std::time::Duration = std::time::Duration::from_secs(10);

#[component]
pub fn DeadLettersPage() -> impl IntoView {
    let params = use_query_map();
    let query = Memo::new(move |_| params.with(read_query));
    let after = Memo::new(move |_| params.with(|m| m.get("after")));
    let before = Memo::new(move |_| params.with(|m| m.get("before")));
    let acted = RwSignal::new(0u32);
    let tick = crate::widgets::use_tick(REFRESH);
    let queues = Resource::new(move || (acted.get(), tick.get()), |_| dl_queues());
    let page = Resource::new(
        move || (query.get(), after.get(), before.get(), acted.get(), tick.get()),
        |(q, a, b, _, _)| dl_list(q, a, b),
    );
    let caller = Resource::new(|| (), |_| whoami());
    let discovered = Resource::new(move || acted.get(), |_| dl_discovered());
    // Outside the list's Suspense, so it survives the refetch an action causes.
    let notice = RwSignal::new(None::<String>);
    let manage = Manage { acted, notice };
    // The picked rows outlive a refresh; another filter or page starts with none.
    let selected = RwSignal::new(BTreeSet::<i64>::new());
    Effect::new(move |_| {
        query.track();
        after.track();
        before.track();
        selected.set(BTreeSet::new());
    });
    view! {
        <PageTitle title="Dead letters" />
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                let admin = matches!(caller.await, Ok(Some(c)) if c.is_admin());
                match queues.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(list) => view! { <QueueCards list manage=admin.then_some(manage) /> }.into_any(),
                }
            })}
        </Transition>
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                let found = discovered.await.unwrap_or_default();
                let admin = matches!(caller.await, Ok(Some(c)) if c.is_admin());
                (!found.is_empty()).then(|| view! { <Discovered found manage=admin.then_some(manage) /> })
            })}
        </Suspense>
        {move || {
            let q = query.get();
            let current = q.status.clone().unwrap_or_else(|| "awaiting".into());
            let mut tabs: Vec<(String, String, bool)> = ["awaiting", "replaying", "replayed", "archived", "all"].iter().map(|s| {
                let mut t = q.clone();
                t.status = Some(s.to_string());
                (href(&t, None), s.to_string(), current == *s)
            }).collect();
            // The groups of the queue being looked at, when one is.
            let groups = types::routes::failure_groups(q.queue.as_deref());
            tabs.push((groups, "failure groups".into(), false));
            view! { <Tabs items=tabs /> <FilterForm q /> }
        }}
        {move || notice.get().map(|m| view! { <p class="mb-2 text-sm text-emerald-700 dark:text-emerald-400" role="status">{m}</p> })}
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match page.await {
                    Err(_) => ().into_any(),
                    Ok(p) => view! { <Summary p q=query.get_untracked() /> }.into_any(),
                }
            })}
        </Transition>
        // Not refreshed by the tick: an open preview or confirmation stays as it is.
        <Suspense fallback=|| ()>
            {move || {
                let q = query.get();
                Suspend::new(async move {
                    let (can_operate, is_admin) = match caller.await {
                        Ok(Some(c)) => (c.can_operate(), c.is_admin()),
                        _ => (false, false),
                    };
                    can_operate.then(|| view! { <Actions q selected is_admin acted notice /> })
                })
            }}
        </Suspense>
        <Transition fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let can_operate = matches!(caller.await, Ok(Some(c)) if c.can_operate());
                match page.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(p) => {
                        let paged = after.get_untracked().is_some() || before.get_untracked().is_some();
                        view! { <Rows p q=query.get_untracked() paged can_operate selected /> }.into_any()
                    }
                }
            })}
        </Transition>
    }
}

#[component]
fn FilterForm(q: DlQuery) -> impl IntoView {
    view! {
        <form method="get" action="/dead-letters" class="flex flex-wrap gap-2 mb-3 items-end text-sm" data-testid="dl-filter">
            <input type="hidden" name="status" value=q.status.clone().unwrap_or_default() />
            <input type="hidden" name="group" value=q.group.clone().unwrap_or_default() />
            <FilterField name="queue" label="DLQ" value=q.queue.clone() placeholder="orders.dlq" />
            <FilterField name="origin" label="Origin queue" value=q.origin.clone() placeholder="orders" />
            <FilterField name="type" label="Type" value=q.msg_type.clone() placeholder="order.created" />
            <FilterField name="shape" label="Body shape" value=q.shape.clone() placeholder="{id, total}" />
            <label class="flex flex-col gap-0.5">"Reason"
                <select class="input" name="reason">
                    {["", "rejected", "expired", "maxlen", "delivery_limit", "none", "unknown"].iter().map(|r| {
                        let selected = q.reason.as_deref().unwrap_or("") == *r;
                        view! { <option value=*r selected=selected>{if r.is_empty() { "any" } else { r }}</option> }
                    }).collect_view()}
                </select>
            </label>
            <FilterField name="error" label="Error contains" value=q.error.clone() placeholder="KeyError" />
            <FilterField name="body" label="Body contains" value=q.body.clone() placeholder="order 1234" />
            <FilterField name="message_id" label="Message id" value=q.message_id.clone() placeholder="" />
            <FilterField name="newer_than_mins" label="Newer than (min)" value=q.newer_than_mins.clone() placeholder="" />
            <button class="btn" type="submit">"Filter"</button>
            <a class="btn" href="/dead-letters">"Clear"</a>
        </form>
        {q.group.clone().filter(|g| !g.is_empty()).map(|g| view! {
            <p class="text-sm mb-2">"Showing failure group #"{g.clone()}". "<a class="underline" href=href(&DlQuery { group: None, ..q.clone() }, None)>"Show all groups"</a></p>
        })}
    }
}

/// What the filter matched: the count, the download, the type facet and the swap hint.
#[component]
fn Summary(p: api::DlPage, q: DlQuery) -> impl IntoView {
    view! {
        <div class="flex flex-wrap items-center gap-x-3 gap-y-1 mb-2 text-sm">
            <p data-testid="dl-count"><b>{p.count.clone()}</b>" messages match"</p>
            <a class="btn text-xs px-2 py-0.5" href=export_href(&q) download="" data-testid="download-ndjson"
                title="every message these filters select, one JSON line each, newest first">"Download NDJSON"</a>
            <span class="text-xs muted">{format!("newest {} at most", types::dead_letter::EXPORT_MAX_ROWS)}</span>
        </div>
        {p.search_note.clone().map(|n| view! { <p class="text-xs muted mb-2" data-testid="dl-search-note">{n}</p> })}
        {(!p.types.is_empty()).then(|| view! {
            <p class="text-xs mb-2 flex flex-wrap gap-x-3 gap-y-1 items-baseline" data-testid="dl-types">
                <span class="muted" title=format!("among the newest {} matching", types::dead_letter::FACET_ROWS)>"Types:"</span>
                {p.types.clone().into_iter().map(|(t, n)| match t {
                    Some(t) => view! {
                        <a class="underline font-mono" href=href(&DlQuery { msg_type: Some(t.clone()), ..q.clone() }, None)>{format!("{t} {n}")}</a>
                    }.into_any(),
                    None => view! { <span class="muted">{format!("no type {n}")}</span> }.into_any(),
                }).collect_view()}
            </p>
        })}
        {p.swap.clone().map(|s| {
            let (none, other) = if s.field == "queue" { ("DLQ", "origin queue") } else { ("origin queue", "DLQ") };
            view! {
                <p class="text-sm mb-2 text-amber-800 dark:text-amber-300" data-testid="dl-swap" role="status">
                    {format!("No message matches with {none} “{}”, but {} {} the {other}. ", s.value, s.count,
                        if s.count == "1" { "has it as" } else { "have it as" })}
                    <a class="underline" href=s.href.clone()>{format!("Filter by {other} instead")}</a>
                </p>
            }
        })}
    }
}

/// Archive or restore, and replay the picked rows or everything matching.
#[component]
fn Actions(
    q: DlQuery,
    selected: RwSignal<BTreeSet<i64>>,
    is_admin: bool,
    acted: RwSignal<u32>,
    notice: RwSignal<Option<String>>,
) -> impl IntoView {
    let picked = Signal::derive(move || SelectionInput::Ids(selected.get().into_iter().collect()));
    let q2 = q.clone();
    let matching = Signal::derive(move || SelectionInput::Filter(q2.clone()));
    let bar = if q.status.as_deref() == Some("archived") {
        view! { <bulk::RestoreBar q=q.clone() selected acted notice is_admin /> }.into_any()
    } else {
        view! { <bulk::ArchiveBar q=q.clone() selected acted notice /> }.into_any()
    };
    view! {
        {bar}
        <div class="flex flex-wrap gap-2 mb-3 items-start">
            // `r` presses it (app/src/shortcuts.rs).
            <div class="contents" data-shortcut="replay"><ReplayPanel selection=picked label="Replay selected…" /></div>
            <ReplayPanel selection=matching label="Replay all matching…" />
        </div>
    }
}

#[component]
fn Rows(
    p: api::DlPage,
    q: DlQuery,
    /// Reached through a page cursor (`after` or `before`).
    paged: bool,
    can_operate: bool,
    selected: RwSignal<BTreeSet<i64>>,
) -> impl IntoView {
    let next = p.next.clone().map(|n| href(&q, Some(n)));
    let prev = p.prev.clone().map(|c| href_at(&q, ("before", Some(c))));
    let empty = p.rows.is_empty();
    // A `before` page that reached the newest rows is the first page already.
    let first = (paged && (prev.is_some() || empty)).then(|| href(&q, None));
    view! {
        <div tabindex="0" class="card overflow-x-auto">
            <table class="tbl" data-testid="dl-table">
                <thead><tr>
                    <th></th><th>"#"</th><th>"DLQ"</th><th>"Origin"</th><th>"Kind"</th><th>"Reason"</th><th>"Error"</th><th>"Body"</th>
                    <th>"Deaths"</th><th>"Status"</th><th>"Age"</th>
                </tr></thead>
                <tbody>
                    {p.rows.into_iter().map(|r| {
                        let id = r.id;
                        view! {
                            <tr data-row="dead-letter" tabindex="-1">
                                <td>{can_operate.then(|| view! {
                                    <input type="checkbox" aria-label="select message"
                                        prop:checked=move || selected.with(|s| s.contains(&id))
                                        on:change=move |ev| {
                                            let on = event_target_checked(&ev);
                                            selected.update(|s| { if on { s.insert(id); } else { s.remove(&id); } });
                                        } />
                                })}</td>
                                <td><a class="underline font-mono text-xs" href=types::routes::dead_letter(id)>{format!("#{id}")}</a></td>
                                <td class="font-mono text-xs">{r.queue.clone()}</td>
                                <td class="font-mono text-xs">{r.original_queue.clone().unwrap_or_else(|| "—".into())}</td>
                                <td class="text-xs" data-testid="dl-kind">
                                    {r.msg_type.clone().map(|t| view! { <a class="underline font-mono" href=href(&DlQuery { msg_type: Some(t.clone()), ..q.clone() }, None)>{t.clone()}</a> })}
                                    {r.body_shape.clone().map(|s| view! { <a class="block font-mono muted break-all" href=href(&DlQuery { shape: Some(s.clone()), ..q.clone() }, None)>{s.clone()}</a> })}
                                </td>
                                <td><Pill text=r.reason /></td>
                                <td class="text-xs text-red-700 dark:text-red-300 max-w-xs break-words">{r.error.map(|e| format::clip(&e, 100))}</td>
                                <td class="font-mono text-xs max-w-sm break-all muted">{r.preview}</td>
                                <td class="text-right tabular-nums">{r.death_count}</td>
                                <td><Pill text=r.status /></td>
                                <td class="tabular-nums whitespace-nowrap">{format::age_secs(r.age_secs)}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            {empty.then(|| view! { <p class="p-3 muted text-sm">"No dead letters match."</p> })}
        </div>
        <Pager first prev next next_label="Older →" />
    }
}
