//! Failure groups: messages that failed the same way, one line each (for one DLQ when a DLQ
//! alert or the queue filter names it), and each group's own page with its primary action,
//! "Replay N to <origin queue>", opening the plan preview already filled in.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use super::api::{GroupTypeView, GroupsQuery, dl_group, dl_group_types, dl_groups, dl_management_ui};
use crate::auth::whoami;
use crate::format;
use crate::layout::{ErrorBox, PageTitle};
use crate::pages::replays::{api::SelectionInput, panel::ReplayPanel};
use crate::widgets::{BrokerLink, Pill, Time};

#[component]
pub fn GroupsPage() -> impl IntoView {
    let params = use_query_map();
    let query = Memo::new(move |_| {
        params.with(|m| GroupsQuery {
            queue: m.get("queue"),
            dlq: m.get("dlq"),
            only_awaiting: m.get("all").is_none(),
            msg_type: m.get("type").filter(|t| !t.is_empty()),
        })
    });
    let groups = Resource::new(move || query.get(), dl_groups);
    // The facet ignores the type narrowed to, so every type stays one click away.
    let types = Resource::new(move || GroupsQuery { msg_type: None, ..query.get() }, dl_group_types);
    let dlq = move || params.with(|m| m.get("dlq").filter(|d| !d.is_empty()));
    let broker = Resource::new(|| (), |_| dl_management_ui());
    view! {
        <PageTitle title="Failure groups" />
        {move || dlq().map(|d| {
            let queue = d.clone();
            let link = move || {
                let queue = queue.clone();
                Suspend::new(async move {
                    let href = broker.await.ok().flatten().map(|b| b.queue(&queue));
                    view! { <BrokerLink href /> }
                })
            };
            view! {
            <p class="text-sm mb-1" data-testid="groups-dlq">"Groups with messages in "<span class="font-mono">{d.clone()}</span>
                " "<Suspense fallback=|| ()>{link}</Suspense>
                ", most awaiting first · "<a class="underline" href="/dead-letters/groups">"all DLQs"</a>
                " · "<a class="underline" href=types::routes::dead_letters_in(&d)>"its messages"</a></p>
            }
        })}
        <p class="text-sm mb-3">
            <a class="underline" href="/dead-letters">"← dead letters"</a>
            " · grouped by original queue, reason, error type and normalised message, message type and, when no error is known, body shape: two kinds of message are never one group. "
            <a class="underline" href=move || groups_href(&GroupsQuery { only_awaiting: false, ..query.get() })>"include groups with nothing awaiting"</a>
        </p>
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                let list = types.await.unwrap_or_default();
                view! { <TypeFacet list q=query.get_untracked() /> }
            })}
        </Suspense>
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match groups.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(list) => {
                        let empty = list.is_empty();
                        view! {
                            <div tabindex="0" class="card overflow-x-auto">
                                <table class="tbl" data-testid="groups-table">
                                    <thead><tr><th>"Group"</th><th>"Queue"</th><th>"Reason"</th><th>"Error"</th><th>"Kind"</th><th>"Awaiting"</th><th>"Total"</th><th>"Last seen"</th><th>"First seen"</th></tr></thead>
                                    <tbody>
                                        {list.into_iter().map(|g| view! {
                                            <tr data-row="failure-group" tabindex="-1">
                                                <td><a class="underline" data-testid="group-link" href=types::routes::failure_group(g.id)>{format!("#{}", g.id)}</a></td>
                                                <td class="font-mono text-xs">{g.original_queue.unwrap_or_else(|| "—".into())}</td>
                                                <td><Pill text=g.reason /></td>
                                                <td class="text-xs max-w-md break-words">
                                                    <b>{g.error_type.unwrap_or_else(|| "no error header".into())}</b>
                                                    <div class="muted">{g.error_sample.map(|s| format::clip(&s, 160))}</div>
                                                </td>
                                                <td class="text-xs max-w-xs break-words" data-testid="group-kind">{kind_text(g.msg_type.as_deref(), g.body_shape.as_deref())}</td>
                                                <td class="text-right tabular-nums font-semibold">
                                                    <a class="underline" href=types::routes::group_awaiting(g.id)>{g.awaiting}</a>
                                                </td>
                                                <td class="text-right tabular-nums">{g.count}</td>
                                                <td class="whitespace-nowrap">{format::age_secs(g.last_seen_secs)}" ago"</td>
                                                <td class="whitespace-nowrap text-xs muted"><Time at=g.first_seen /></td>
                                            </tr>
                                        }).collect_view()}
                                    </tbody>
                                </table>
                                {empty.then(|| view! { <p class="p-3 muted text-sm">"No failure groups."</p> })}
                            </div>
                        }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}

/// The groups page's address for `q`.
fn groups_href(q: &GroupsQuery) -> String {
    let pairs = [
        ("queue", q.queue.clone()),
        ("dlq", q.dlq.clone()),
        ("all", (!q.only_awaiting).then(|| "1".to_string())),
        ("type", q.msg_type.clone()),
    ];
    format!("/dead-letters/groups{}", crate::widgets::query_string(&pairs))
}

/// The message types among the listed groups, each narrowing the list to it: how many groups
/// and how many messages awaiting triage.
#[component]
fn TypeFacet(list: Vec<GroupTypeView>, q: GroupsQuery) -> impl IntoView {
    let narrowed = q.msg_type.clone();
    (list.len() > 1 || narrowed.is_some()).then(|| view! {
        <p class="text-xs mb-2 flex flex-wrap gap-x-3 gap-y-1 items-baseline" data-testid="group-types">
            <span class="muted">"Types:"</span>
            {list.into_iter().map(|t| {
                let counts = format!(" · {} {}, {} awaiting", t.groups, if t.groups == 1 { "group" } else { "groups" }, t.awaiting);
                let name = t.msg_type.clone().unwrap_or_else(|| "no type".into());
                match t.msg_type {
                    Some(ty) if narrowed.as_deref() != Some(ty.as_str()) => view! {
                        <a class="underline" href=groups_href(&GroupsQuery { msg_type: Some(ty.clone()), ..q.clone() })>
                            <span class="font-mono">{name}</span>{counts}
                        </a>
                    }.into_any(),
                    Some(_) => view! { <b aria-current="true"><span class="font-mono">{name}</span>{counts}</b> }.into_any(),
                    None => view! { <span class="muted">{name}{counts}</span> }.into_any(),
                }
            }).collect_view()}
            {narrowed.is_some().then(|| view! {
                <a class="underline" href=groups_href(&GroupsQuery { msg_type: None, ..q.clone() })>"all types"</a>
            })}
        </p>
    })
}

/// One failure group: what its messages share, where they were read, a sample of bodies, and
/// (operators) the primary button that replays the awaiting ones to their origin queue.
#[component]
pub fn GroupPage() -> impl IntoView {
    let params = leptos_router::hooks::use_params_map();
    let id = move || params.with(|p| p.get("id").and_then(|v| v.parse::<i64>().ok()).unwrap_or(0));
    let group = Resource::new(id, dl_group);
    let caller = Resource::new(|| (), |_| whoami());
    view! {
        <PageTitle title="Failure group" />
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let can_operate = matches!(caller.await, Ok(Some(ref c)) if c.can_operate());
                match group.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(p) => {
                        let g = p.group.clone();
                        let ui = p.broker.clone();
                        let link = move |q: &str| ui.as_ref().map(|b| b.queue(q));
                        let gid = g.id;
                        let origin = g.original_queue.clone();
                        let label = match &origin {
                            Some(q) => format!("Replay {} to {q}", g.awaiting),
                            None => format!("Replay {}…", g.awaiting),
                        };
                        let selection = Signal::derive(move || SelectionInput::Filter(super::api::DlQuery {
                            group: Some(gid.to_string()),
                            ..Default::default()
                        }));
                        view! {
                            <p class="text-sm mb-3 flex gap-3">
                                <a class="underline" href="/dead-letters/groups">"← failure groups"</a>
                                <a class="underline" href=types::routes::group_awaiting(gid)>"its messages awaiting triage"</a>
                                <a class="underline" href=types::routes::group_messages(gid)>"all its messages"</a>
                            </p>
                            <div class="card mb-3">
                                <table class="tbl" data-testid="group-summary"><tbody>
                                    <tr><th class="w-44">"Group"</th><td class="font-mono text-xs">{format!("#{gid}")}</td></tr>
                                    <tr><th>"Origin queue"</th><td class="font-mono text-xs" data-testid="group-origin">
                                        {origin.clone().unwrap_or_else(|| "unknown (no x-death, no failure headers)".into())}
                                        " "<BrokerLink href=origin.as_deref().and_then(&link) />
                                    </td></tr>
                                    <tr><th>"Read from"</th><td class="font-mono text-xs" data-testid="group-dlqs">
                                        {p.dlqs.iter().map(|q| view! { <span class="mr-3">{q.clone()}" "<BrokerLink href=link(q.as_str()) /></span> }).collect_view()}
                                    </td></tr>
                                    <tr><th>"Reason"</th><td><Pill text=g.reason.clone() /></td></tr>
                                    <tr><th>"Error"</th><td class="text-xs break-words"><b>{g.error_type.clone().unwrap_or_else(|| "no error header".into())}</b>
                                        <div class="muted">{g.error_sample.clone()}</div></td></tr>
                                    <tr><th>"Kind"</th><td class="text-xs break-words" data-testid="group-kind">{kind_text(g.msg_type.as_deref(), g.body_shape.as_deref())}
                                        <div class="muted">"Messages of another type, or (with no error known) another body shape, are in groups of their own."</div></td></tr>
                                    <tr><th>"Messages"</th><td class="tabular-nums" data-testid="group-counts">{format!("{} awaiting triage of {} ever grouped here", g.awaiting, g.count)}</td></tr>
                                    <tr><th>"First seen"</th><td class="text-xs"><Time at=g.first_seen /></td></tr>
                                    <tr><th>"Last seen"</th><td class="text-xs"><Time at=p.last_seen />{format!(" ({} ago)", format::age_secs(g.last_seen_secs))}</td></tr>
                                </tbody></table>
                                <div class="px-2 pb-2"><super::inflow_chart::InflowChart per_minute=p.inflow.clone() /></div>
                            </div>
                            <super::breakdown::BreakdownCard b=p.breakdown.clone() no_error=g.error_type.is_none() group=g.id />
                            {(can_operate && g.awaiting > 0).then(|| view! {
                                <div class="mb-3" data-testid="group-replay" data-shortcut="replay">
                                    <ReplayPanel selection label=label origin=origin.clone().unwrap_or_default() preview_on_open=true
                                        href=types::routes::group_replay(gid) />
                                </div>
                            })}
                            <h2 class="text-sm font-semibold mb-1">"Newest bodies awaiting triage"</h2>
                            <div class="flex flex-col gap-2" data-testid="group-samples">
                                {p.samples.into_iter().map(|(id, b)| view! {
                                    <div class="card">
                                        <div class="text-xs muted px-2 pt-1"><a class="underline" href=types::routes::dead_letter(id)>{format!("#{id}")}</a>" · "{b.kind.as_str()}</div>
                                        <pre class="p-2 text-xs whitespace-pre-wrap break-all">{b.text.clone()}</pre>
                                    </div>
                                }).collect_view()}
                            </div>
                        }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}

/// What kind of message a group holds, in words: its type and body shape, when they are part of
/// its key.
fn kind_text(msg_type: Option<&str>, body_shape: Option<&str>) -> String {
    match (msg_type, body_shape) {
        (Some(t), Some(b)) => format!("type {t} · body {b}"),
        (Some(t), None) => format!("type {t}"),
        (None, Some(b)) => format!("no type · body {b}"),
        (None, None) => "any (no type; the error tells them apart)".into(),
    }
}
