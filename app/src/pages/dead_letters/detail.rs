//! One dead letter: every property and header, its x-death history, its body, and its
//! edits before replay.

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use super::api::{DeadLetterStatus, dl_detail};
use super::edit::EditPanel;
use crate::auth::whoami;
use crate::body_view::Body;
use crate::layout::{ErrorBox, PageTitle};
use crate::pages::replays::{
    api::{SelectionInput, dl_story},
    panel::ReplayPanel,
};
use crate::widgets::{Pill, Time};

#[component]
pub fn DeadLetterPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let key = move || (params.with(|p| p.get("id").unwrap_or_default()), query.with(|q| q.get("full").is_some()));
    let detail = Resource::new(key, |(id, full)| async move {
        let id = id.parse::<i64>().map_err(|_| crate::error::AppError::NotFound(format!("no dead letter {id}")))?;
        dl_detail(id, full).await
    });
    let story = Resource::new(key, |(id, _)| async move { dl_story(id.parse::<i64>().unwrap_or(0)).await });
    view! {
        <PageTitle title="Dead letter" />
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(d) => view! {
                        {d.outbox.clone().map(|o| view! {
                            <div class="card px-3 py-2 mb-3 text-sm" data-testid="outbox-origin">
                                <span class="muted">"Published from the outbox: "</span>
                                <a class="underline font-mono text-xs" href=types::routes::outbox_row(&o.source, &o.row_id)>
                                    {format!("{} row {}", o.source, o.row_id)}
                                </a>
                                {format!(" · {} · created ", o.event_type)}<Time at=o.created_at />{format!(" · {} attempt(s) · ", o.attempts)}
                                <Pill text=o.status.clone() />
                                {o.published_at.map(|at| view! { " published "<Time at /> })}
                            </div>
                        })}
                        <div class="flex items-center gap-3 mb-3 text-sm">
                            <a class="underline" href="/dead-letters">"← dead letters"</a>
                            <span class="font-mono">{format!("#{}", d.id)}</span>
                            <Pill text=d.status />
                            {d.archived_reason.clone().map(|r| view! { <span class="muted">"archived: "{r}</span> })}
                            {d.group_id.map(|g| view! { <a class="underline" href=types::routes::group_messages(g)>{format!("failure group #{g}")}</a> })}
                            {d.replay_of.map(|r| view! { <a class="underline" href=types::routes::dead_letter(r)>{format!("replay of #{r}")}</a> })}
                        </div>
                        <div class="grid lg:grid-cols-2 gap-4">
                            <div class="flex flex-col gap-4">
                                <div class="card">
                                    <table class="tbl" data-testid="properties"><tbody>
                                        {d.properties.iter().map(|(k, v)| view! {
                                            <tr><th class="w-44">{k.clone()}</th><td class="font-mono text-xs break-all">{v.clone()}</td></tr>
                                        }).collect_view()}
                                        {d.times.iter().map(|(k, at)| view! {
                                            <tr><th class="w-44">{k.clone()}</th><td class="font-mono text-xs"><Time at=*at /></td></tr>
                                        }).collect_view()}
                                    </tbody></table>
                                </div>
                                {d.convention.clone().map(|c| view! {
                                    <div class="card" data-testid="convention">
                                        <h2 class="text-sm font-semibold px-2 pt-2">"Failure headers recognised: "{c.name}</h2>
                                        <table class="tbl"><tbody>
                                            {c.facts.into_iter().map(|(k, v)| view! {
                                                <tr><th class="w-44">{k}</th><td class="font-mono text-xs break-all">{v}</td></tr>
                                            }).collect_view()}
                                        </tbody></table>
                                    </div>
                                })}
                                <div class="card">
                                    <h2 class="text-sm font-semibold px-2 pt-2">"x-death history"</h2>
                                    <table class="tbl" data-testid="deaths">
                                        <thead><tr><th>"Count"</th><th>"Reason"</th><th>"Queue"</th><th>"Exchange"</th><th>"Keys"</th><th>"Time"</th></tr></thead>
                                        <tbody>
                                            {d.deaths.iter().map(|x| view! {
                                                <tr><td>{x.count}</td><td>{x.reason.clone()}</td><td class="font-mono text-xs">{x.queue.clone()}</td>
                                                <td class="font-mono text-xs">{x.exchange.clone()}</td><td class="font-mono text-xs">{x.routing_keys.clone()}</td>
                                                <td class="text-xs">{x.time.map(|at| view! { <Time at /> })}</td></tr>
                                            }).collect_view()}
                                        </tbody>
                                    </table>
                                    {d.deaths.is_empty().then(|| view! { <p class="p-2 text-sm muted">"No x-death header: this message was published to the queue directly (by an application, or a framework's recoverer)."</p> })}
                                </div>
                                <div class="card">
                                    <h2 class="text-sm font-semibold px-2 pt-2">"Headers"</h2>
                                    <table class="tbl" data-testid="headers"><tbody>
                                        {d.headers.iter().map(|h| view! {
                                            <tr><th class="w-44 font-mono text-xs">{h.name.clone()}</th><td class="text-xs muted">{h.kind.clone()}</td>
                                            <td class="font-mono text-xs break-all">{h.value.clone()}</td></tr>
                                        }).collect_view()}
                                    </tbody></table>
                                </div>
                            </div>
                            <div class="flex flex-col gap-4">
                                <ReplayThis id=d.id replayable=d.status != DeadLetterStatus::Replaying origin=d.origin_queue.clone() />
                                <EditPanel id=d.id />
                                <div class="card">
                                    <h2 class="text-sm font-semibold px-2 pt-2">"Story"</h2>
                                    <Suspense fallback=|| ()>
                                        {move || Suspend::new(async move {
                                            match story.await {
                                                Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                                                Ok(events) => view! {
                                                    <ol class="p-2 text-sm flex flex-col gap-1" data-testid="story">
                                                        {events.into_iter().map(|e| view! {
                                                            <li class="flex gap-2">
                                                                <span class="text-xs muted whitespace-nowrap"><Time at=e.at /></span>
                                                                <Pill text=e.kind />
                                                                <a class="underline font-mono text-xs" href=types::routes::dead_letter(e.dead_letter_id)>{format!("#{}", e.dead_letter_id)}</a>
                                                                <span>{e.text}</span>
                                                            </li>
                                                        }).collect_view()}
                                                    </ol>
                                                }.into_any(),
                                            }
                                        })}
                                    </Suspense>
                                </div>
                                <h2 class="text-sm font-semibold mb-1">"Body"</h2>
                                <Body body=d.body.clone() full_href=format!("{}?full=1", types::routes::dead_letter(d.id)) />
                            </div>
                        </div>
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// "Replay this message…", for operators, when the message can be replayed.
#[component]
fn ReplayThis(id: i64, replayable: bool, origin: Option<String>) -> impl IntoView {
    let caller = Resource::new(|| (), |_| whoami());
    view! {
        <Suspense fallback=|| ()>
            {move || {
                let origin = origin.clone();
                Suspend::new(async move {
                let can = matches!(caller.await, Ok(Some(ref c)) if c.can_operate());
                (can && replayable).then(|| view! {
                    <div><ReplayPanel selection=Signal::derive(move || SelectionInput::Ids(vec![id])) label="Replay this message…" origin=origin.unwrap_or_default() /></div>
                })
            })}}
        </Suspense>
    }
}
