//! Failure groups: messages that failed the same way, one line each.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use super::api::dl_groups;
use crate::format;
use crate::layout::{ErrorBox, PageTitle};
use crate::widgets::Pill;

#[component]
pub fn GroupsPage() -> impl IntoView {
    let params = use_query_map();
    let key = move || params.with(|m| (m.get("queue"), m.get("all").is_none()));
    let groups = Resource::new(key, |(queue, only_awaiting)| dl_groups(queue, only_awaiting));
    view! {
        <PageTitle title="Failure groups" />
        <p class="text-sm mb-3">
            <a class="underline" href="/dead-letters">"← dead letters"</a>
            " · grouped by original queue, reason, error type and normalised message. "
            <a class="underline" href="/dead-letters/groups?all=1">"include groups with nothing awaiting"</a>
        </p>
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match groups.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(list) => {
                        let empty = list.is_empty();
                        view! {
                            <div class="card overflow-x-auto">
                                <table class="tbl" data-testid="groups-table">
                                    <thead><tr><th>"Group"</th><th>"Queue"</th><th>"Reason"</th><th>"Error"</th><th>"Awaiting"</th><th>"Total"</th><th>"Last seen"</th><th>"First seen"</th></tr></thead>
                                    <tbody>
                                        {list.into_iter().map(|g| view! {
                                            <tr>
                                                <td><a class="underline" href=format!("/dead-letters?group={}&status=all", g.id)>{format!("#{}", g.id)}</a></td>
                                                <td class="font-mono text-xs">{g.original_queue.unwrap_or_else(|| "—".into())}</td>
                                                <td><Pill text=g.reason /></td>
                                                <td class="text-xs max-w-md break-words">
                                                    <b>{g.error_type.unwrap_or_else(|| "no error header".into())}</b>
                                                    <div class="muted">{g.error_sample.map(|s| format::clip(&s, 160))}</div>
                                                </td>
                                                <td class="text-right tabular-nums font-semibold">
                                                    <a class="underline" href=format!("/dead-letters?group={}", g.id)>{g.awaiting}</a>
                                                </td>
                                                <td class="text-right tabular-nums">{g.count}</td>
                                                <td class="whitespace-nowrap">{format::age_secs(g.last_seen_secs)}" ago"</td>
                                                <td class="whitespace-nowrap text-xs muted">{g.first_seen}</td>
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
