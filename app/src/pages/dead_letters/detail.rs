//! One dead letter: every property and header, its x-death history, its body, and its
//! edits before replay; its id, headers and body to copy, and the whole message to download.

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use super::api::{DeadLetterStatus, DeadLetterView, dl_detail, dl_edits};
use super::edit::EditPanel;
use crate::auth::{CallerAnswer, whoami};
use crate::body_view::Body;
use crate::copy::CopyButton;
use crate::layout::{ErrorBox, PageTitle};
use crate::pages::replays::{
    api::{SelectionInput, dl_story},
    panel::ReplayPanel,
};
use crate::widgets::{BrokerLink, Pill, Time};

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
    // Every resource of the page is made here, not in the components the detail's Suspense
    // renders: a resource made inside a Suspense's children is made again each time the
    // server walks them (docs/ARCHITECTURE.md, "Resources are made outside Suspense").
    let caller = Resource::new(|| (), |_| whoami());
    let saved = RwSignal::new(0u32);
    let edits = Resource::new(
        move || (key().0, saved.get()),
        |(id, _)| async move { dl_edits(id.parse::<i64>().unwrap_or(0)).await },
    );
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
                        <div class="flex items-center gap-3 mb-1 text-sm">
                            <a class="underline" href="/dead-letters">"← dead letters"</a>
                            <span class="font-mono">{format!("#{}", d.id)}</span>
                            <Pill text=d.status />
                            {d.archived_reason.clone().map(|r| view! { <span class="muted">"archived: "{r}</span> })}
                            {d.group_id.map(|g| view! { <a class="underline" href=types::routes::group_messages(g)>{format!("failure group #{g}")}</a> })}
                            {d.replay_of.map(|r| view! { <a class="underline" href=types::routes::dead_letter(r)>{format!("replay of #{r}")}</a> })}
                        </div>
                        <MessageBar d=d.clone() />
                        {d.unreadable.clone().map(|note| view! {
                            <div class="card px-3 py-2 mb-3 text-sm border-amber-500" role="note" data-testid="unreadable">
                                <span class="font-semibold">"Not everything in this message could be read: "</span>{note}
                                <p class="muted text-xs mt-1">"The rest is stored as received. What could not be read is kept, as bytes, in the header "
                                    <code>"x-unreadable-amqp-field"</code>"; a replay sends that header in its place."</p>
                            </div>
                        })}
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
                                    <div class="flex items-center gap-2 px-2 pt-2">
                                        <h2 class="text-sm font-semibold">"Headers"</h2>
                                        {(!d.headers.is_empty()).then(|| view! { <CopyButton text=d.headers_text.clone() label="Copy headers" testid="copy-headers" /> })}
                                    </div>
                                    <table class="tbl" data-testid="headers"><tbody>
                                        {d.headers.iter().map(|h| view! {
                                            <tr><th class="w-44 font-mono text-xs">{h.name.clone()}</th><td class="text-xs muted">{h.kind.clone()}</td>
                                            <td class="font-mono text-xs break-all">{h.value.clone()}</td></tr>
                                        }).collect_view()}
                                    </tbody></table>
                                </div>
                            </div>
                            // On a narrow screen this column, the body first, comes before the properties.
                            <div class="flex flex-col gap-4 order-first lg:order-none">
                                <div data-testid="body-section">
                                    <div class="flex items-center gap-2 mb-1">
                                        <h2 class="text-sm font-semibold">"Body"</h2>
                                        <CopyButton text=d.body.text.clone() label=copy_body_label(&d.body) testid="copy-body" />
                                    </div>
                                    <Body body=d.body.clone() full_href=format!("{}?full=1", types::routes::dead_letter(d.id)) />
                                </div>
                                <ReplayThis id=d.id replayable=d.status != DeadLetterStatus::Replaying origin=d.origin_queue.clone() caller />
                                <EditPanel id=d.id edits caller saved />
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
                            </div>
                        </div>
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// A body cut for the page copies the part shown, and says so.
fn copy_body_label(b: &crate::body_view::BodyView) -> &'static str {
    if b.truncated { "Copy the part shown" } else { "Copy body" }
}

/// Where the message is (its DLQ and origin queue, each with its page in the RabbitMQ
/// management UI), its message id to copy, and the download of the whole message.
#[component]
fn MessageBar(d: DeadLetterView) -> impl IntoView {
    let link = |q: &str| d.broker.as_ref().map(|b| b.queue(q));
    view! {
        <div class="flex flex-wrap items-center gap-x-3 gap-y-1 mb-3 text-sm" data-testid="message-bar">
            <span class="flex items-center gap-1" data-testid="message-queue">
                <span class="muted">"in"</span><span class="font-mono text-xs">{d.queue.clone()}</span>
                <BrokerLink href=link(d.queue.as_str()) />
            </span>
            {d.origin_queue.clone().map(|o| view! {
                <span class="flex items-center gap-1" data-testid="message-origin">
                    <span class="muted">"died in"</span><span class="font-mono text-xs">{o.clone()}</span>
                    <BrokerLink href=link(o.as_str()) />
                </span>
            })}
            {d.message_id.clone().map(|m| view! {
                <span class="flex items-center gap-1">
                    <span class="muted">"message id"</span><span class="font-mono text-xs break-all">{m.clone()}</span>
                    <CopyButton text=m label="Copy" testid="copy-message-id" />
                </span>
            })}
            <a class="btn text-xs px-2 py-0.5 ml-auto" href=types::routes::dead_letter_export(d.id) download=""
                data-testid="download-one" title="this message as one JSON line: properties, typed headers, the whole body">"Download NDJSON"</a>
        </div>
    }
}

/// "Replay this message…", for operators, when the message can be replayed.
#[component]
fn ReplayThis(id: i64, replayable: bool, origin: Option<String>, caller: Resource<CallerAnswer>) -> impl IntoView {
    view! {
        <Suspense fallback=|| ()>
            {move || {
                let origin = origin.clone();
                Suspend::new(async move {
                let can = matches!(caller.await, Ok(Some(ref c)) if c.can_operate());
                (can && replayable).then(|| view! {
                    <div data-shortcut="replay"><ReplayPanel selection=Signal::derive(move || SelectionInput::Ids(vec![id])) label="Replay this message…" origin=origin.unwrap_or_default() /></div>
                })
            })}}
        </Suspense>
    }
}
