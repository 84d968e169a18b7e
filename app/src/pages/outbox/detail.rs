//! One outbox row: every column, its payload rendered safely, and what happened downstream.

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use super::api::{OutboxAct, outbox_detail};
use crate::auth::{CallerAnswer, whoami};
use crate::body_view::Body;
use crate::layout::{ErrorBox, PageTitle};
use crate::widgets::{Pill, Time};

#[component]
pub fn OutboxRowPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let key = move || {
        (
            params.with(|p| p.get("source").unwrap_or_default()),
            params.with(|p| p.get("id").unwrap_or_default()),
            query.with(|q| q.get("full").is_some()),
        )
    };
    let act = ServerAction::<OutboxAct>::new();
    let detail = Resource::new(move || (key(), act.version().get()), |((s, id, full), _)| outbox_detail(s, id, full));
    // Made here, not in RowActions inside the Suspense (see the dead letter page).
    let caller = Resource::new(|| (), |_| whoami());
    view! {
        <PageTitle title="Outbox row" />
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(d) => {
                        let full = format!("{}?full=1", types::routes::outbox_row(&d.source, &d.row.id));
                        let back = types::routes::outbox_source(&d.source);
                        let kv = |k: &'static str, v: Option<String>| view! {
                            <tr><th class="w-40">{k}</th><td class="font-mono text-xs break-all">{v.unwrap_or_else(|| "—".into())}</td></tr>
                        };
                        let when = |k: &'static str, t: Option<chrono::DateTime<chrono::Utc>>, ago: Option<String>| view! {
                            <tr><th class="w-40">{k}</th><td class="font-mono text-xs">
                                {match t { Some(at) => view! { <Time at /> }.into_any(), None => "—".into_any() }}
                                {ago.map(|a| format!(" ({a} ago)"))}
                            </td></tr>
                        };
                        view! {
                            <a class="text-sm underline" href=back>"← back to "{d.source.clone()}</a>
                            {matches!(d.row.status.as_str(), "pending" | "failed").then(|| view! {
                                <RowActions source=d.source.clone() id=d.row.id.clone() can_archive=d.can_archive act caller />
                            })}
                            {move || act.value().get().map(|r| match r {
                                Ok(n) => view! { <p role="status" class="text-sm text-emerald-700 dark:text-emerald-400 my-2">{format!("{n} row changed.")}</p> }.into_any(),
                                Err(err) => view! { <div class="my-2"><ErrorBox err /></div> }.into_any(),
                            })}
                            <div class="grid lg:grid-cols-2 gap-4 mt-2">
                                <div class="card">
                                    <table class="tbl">
                                        <tbody>
                                            <tr><th class="w-40">"Status"</th><td><Pill text=d.row.status.clone() /></td></tr>
                                            {kv("Event id", Some(d.row.event_id.clone()))}
                                            {kv("Row id", Some(d.row.id.clone()))}
                                            {kv("Type", Some(d.row.event_type.clone()))}
                                            {kv("Exchange", Some(d.row.exchange.clone()))}
                                            {kv("Routing key", Some(d.row.routing_key.clone()))}
                                            {when("Created", Some(d.row.created_at), Some(crate::format::age_secs(d.row.age_secs)))}
                                            {when("Published", d.published_at, None)}
                                            {kv("Attempts", Some(d.row.attempts.to_string()))}
                                            {when("Next attempt", d.next_attempt_at, None)}
                                            {kv("Last error", d.row.last_error.clone())}
                                            {kv("Archived because", d.archived_reason.clone())}
                                            {kv("Leased by", d.lease_owner.clone())}
                                            {kv("Content type", d.content_type.clone())}
                                        </tbody>
                                    </table>
                                    <h2 class="text-sm font-semibold px-2 pt-3">"Headers"</h2>
                                    <pre class="p-2 text-xs font-mono whitespace-pre-wrap break-all" data-testid="headers">{d.headers.clone().unwrap_or_else(|| "—".into())}</pre>
                                    <h2 class="text-sm font-semibold px-2 pt-3">"Downstream (dead letters with this message id)"</h2>
                                    <ul class="p-2 text-sm">
                                        {if d.downstream.is_empty() {
                                            view! { <li class="muted">"none seen"</li> }.into_any()
                                        } else {
                                            d.downstream.iter().map(|(id, queue, status)| view! {
                                                <li><a class="underline" href=types::routes::dead_letter(*id)>{format!("#{id} in {queue}")}</a>" "<Pill text=*status /></li>
                                            }).collect_view().into_any()
                                        }}
                                    </ul>
                                </div>
                                <div>
                                    <h2 class="text-sm font-semibold mb-1">"Payload"</h2>
                                    <Body body=d.payload.clone() full_href=full />
                                </div>
                            </div>
                        }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}

/// Retry now / archive for this one row (operators; the server checks again).
#[component]
fn RowActions(
    source: String,
    id: String,
    can_archive: bool,
    act: ServerAction<OutboxAct>,
    caller: Resource<CallerAnswer>,
) -> impl IntoView {
    let reason = RwSignal::new(String::new());
    let (s1, i1) = (source.clone(), id.clone());
    let retry = move |_| {
        act.dispatch(OutboxAct { source: s1.clone(), action: "retry".into(), ids: vec![i1.clone()], reason: None });
    };
    let archive = move |_| {
        act.dispatch(OutboxAct {
            source: source.clone(),
            action: "archive".into(),
            ids: vec![id.clone()],
            reason: Some(reason.get_untracked()),
        });
    };
    view! {
        <Suspense fallback=|| ()>
            {move || {
                let retry = retry.clone();
                let archive = archive.clone();
                Suspend::new(async move {
                    let can = matches!(caller.await, Ok(Some(ref c)) if c.can_operate());
                    can.then(|| view! {
                        <div class="card px-3 py-2 my-2 flex flex-wrap gap-2 items-center text-sm" data-testid="row-actions">
                            <button class="btn btn-primary" on:click=retry>"Retry now"</button>
                            {can_archive.then(|| view! {
                                <input class="input w-72" aria-label="archive reason" placeholder="reason (needed to archive)"
                                    prop:value=move || reason.get() on:input=move |ev| reason.set(event_target_value(&ev)) />
                                <button class="btn" on:click=archive.clone()>"Archive"</button>
                            })}
                        </div>
                    })
                })
            }}
        </Suspense>
    }
}
