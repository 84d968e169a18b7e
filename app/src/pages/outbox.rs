//! Outbox: what has not been published, why, and the retry / archive actions.

pub mod api;
mod bulk;
pub mod detail;
pub mod slots;

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::auth::whoami;
use crate::format;
use crate::layout::{ErrorBox, PageTitle};
use crate::widgets::{FilterField, Pager, Pill, Tabs, query_string};
use api::{Bucket, OutboxQuery, outbox_health, outbox_list};

/// The tab a bucket is listed under.
fn tab_label(b: Bucket) -> &'static str {
    match b {
        Bucket::Pending => "Pending",
        Bucket::Stuck => "Stuck",
        Bucket::Failed => "Failed",
        Bucket::Published => "Published",
        Bucket::Archived => "Archived",
    }
}

fn read_query(m: &leptos_router::params::ParamsMap) -> OutboxQuery {
    OutboxQuery {
        source: m.get("source"),
        bucket: m.get("bucket"),
        event_type: m.get("event_type"),
        routing_key: m.get("routing_key"),
        error: m.get("error"),
        payload: m.get("payload"),
        event_id: m.get("event_id"),
        older_than_mins: m.get("older_than_mins"),
        newer_than_mins: m.get("newer_than_mins"),
    }
}

pub fn href(q: &OutboxQuery, after: Option<String>) -> String {
    href_at(q, ("after", after))
}

/// The list's link with one page cursor: `("after", …)` or `("before", …)`.
fn href_at(q: &OutboxQuery, cursor: (&str, Option<String>)) -> String {
    format!(
        "/outbox{}",
        query_string(&[
            ("source", q.source.clone()),
            ("bucket", q.bucket.clone()),
            ("event_type", q.event_type.clone()),
            ("routing_key", q.routing_key.clone()),
            ("error", q.error.clone()),
            ("payload", q.payload.clone()),
            ("event_id", q.event_id.clone()),
            ("older_than_mins", q.older_than_mins.clone()),
            ("newer_than_mins", q.newer_than_mins.clone()),
            cursor,
        ])
    )
}

#[component]
pub fn OutboxPage() -> impl IntoView {
    let params = use_query_map();
    let query = Memo::new(move |_| params.with(read_query));
    let after = Memo::new(move |_| params.with(|m| m.get("after")));
    let before = Memo::new(move |_| params.with(|m| m.get("before")));
    let acted = RwSignal::new(0u32);
    let health = Resource::new(move || acted.get(), |_| outbox_health());
    let page = Resource::new(
        move || (query.get(), after.get(), before.get(), acted.get()),
        |(q, a, b, _)| outbox_list(q, a, b),
    );
    let caller = Resource::new(|| (), |_| whoami());
    // Outside the list's Suspense, so it survives the refetch an action causes.
    let notice = RwSignal::new(None::<String>);
    view! {
        <PageTitle title="Outbox" />
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                match health.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(list) => view! { <SourceCards list selected=query.get_untracked().source /> }.into_any(),
                }
            })}
        </Suspense>
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                let is_admin = matches!(caller.await, Ok(Some(ref c)) if c.is_admin());
                view! { <slots::Slots is_admin /> }
            })}
        </Suspense>
        {move || {
            let q = query.get();
            let current = q.bucket.as_deref().and_then(Bucket::parse).unwrap_or_default();
            let tabs = Bucket::ALL.into_iter().map(|b| {
                let mut t = q.clone();
                t.bucket = Some(b.to_string());
                (href(&t, None), tab_label(b).to_string(), current == b)
            }).collect();
            view! { <Tabs items=tabs /> <FilterForm q /> }
        }}
        {move || notice.get().map(|m| view! { <p class="mb-2 text-sm text-emerald-700 dark:text-emerald-400" role="status">{m}</p> })}
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let can_operate = matches!(caller.await, Ok(Some(ref c)) if c.can_operate());
                match page.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(p) => {
                        let paged = after.get_untracked().is_some() || before.get_untracked().is_some();
                        view! { <RowsTable p q=query.get_untracked() paged can_operate acted notice /> }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}

#[component]
fn SourceCards(list: Vec<api::SourceHealthView>, selected: Option<String>) -> impl IntoView {
    let selected = selected.unwrap_or_else(|| engine_native().into());
    view! {
        <div class="grid sm:grid-cols-2 lg:grid-cols-3 gap-3 mb-4" data-testid="outbox-sources">
            {list.into_iter().map(|s| {
                let late = s.oldest_pending_secs.is_some_and(|a| a > s.stuck_after_secs);
                let href = types::routes::outbox_source(&s.source);
                let active = s.source == selected;
                view! {
                    <a href=href class="card px-3 py-2 block hover:border-violet-400" class=("ring-2", active) class=("ring-violet-500", active)>
                        <div class="flex items-center gap-2">
                            <span class="font-medium">{s.source.clone()}</span>
                            <span class="ml-auto text-xs muted">"pending "{s.pending.clone()}" · stuck "{s.stuck.clone()}" · failed "{s.failed.clone()}</span>
                        </div>
                        <div class="mt-1 text-xs muted">"oldest pending"</div>
                        <div class="text-2xl font-semibold tabular-nums" class=(["text-red-700", "dark:text-red-400"], late) data-testid="oldest-pending">
                            {s.oldest_pending_secs.map(format::age_secs).unwrap_or_else(|| "none".into())}
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
    }
}

fn engine_native() -> &'static str {
    "revenant"
}

#[component]
fn FilterForm(q: OutboxQuery) -> impl IntoView {
    view! {
        <form method="get" action="/outbox" class="flex flex-wrap gap-2 mb-3 items-end text-sm" data-testid="outbox-filter">
            <input type="hidden" name="source" value=q.source.clone().unwrap_or_default() />
            <input type="hidden" name="bucket" value=q.bucket.clone().unwrap_or_default() />
            <FilterField name="event_type" label="Type" value=q.event_type.clone() placeholder="order.created" />
            <FilterField name="routing_key" label="Routing key" value=q.routing_key.clone() placeholder="" />
            <FilterField name="error" label="Error contains" value=q.error.clone() placeholder="NO_ROUTE" />
            <FilterField name="payload" label="Payload contains" value=q.payload.clone() placeholder="" />
            <FilterField name="older_than_mins" label="Older than (min)" value=q.older_than_mins.clone() placeholder="" />
            <FilterField name="newer_than_mins" label="Newer than (min)" value=q.newer_than_mins.clone() placeholder="" />
            <button class="btn" type="submit">"Filter"</button>
            <a class="btn" href=href(&OutboxQuery { source: q.source.clone(), bucket: q.bucket.clone(), ..Default::default() }, None)>"Clear"</a>
        </form>
    }
}

#[component]
fn RowsTable(
    p: api::OutboxPage,
    q: OutboxQuery,
    /// Reached through a page cursor (`after` or `before`).
    paged: bool,
    can_operate: bool,
    acted: RwSignal<u32>,
    notice: RwSignal<Option<String>>,
) -> impl IntoView {
    let selected = RwSignal::new(std::collections::BTreeSet::<String>::new());
    let source = p.source.clone();
    let next = p.next.clone().map(|n| href(&q, Some(n)));
    let prev = p.prev.clone().map(|c| href_at(&q, ("before", Some(c))));
    // A `before` page that reached the start of the list is the first page already.
    let first = (paged && (prev.is_some() || p.rows.is_empty())).then(|| href(&q, None));
    let actionable = matches!(p.bucket, Bucket::Pending | Bucket::Stuck | Bucket::Failed);
    let empty = p.rows.is_empty();
    view! {
        {p.scan_warning.clone().map(|w| view! {
            <div class="card border-amber-400 px-3 py-2 mb-2 text-sm" data-testid="scan-warning">{w}</div>
        })}
        <div class="flex items-center gap-3 mb-2 text-sm">
            <span data-testid="outbox-count"><b>{p.count.clone()}</b>" rows match"</span>
        </div>
        {(can_operate && actionable).then(|| view! {
            <bulk::ActionBar source=source.clone() q=q.clone() selected acted can_archive=p.can_archive notice />
        })}
        <div tabindex="0" class="card overflow-x-auto">
            <table class="tbl" data-testid="outbox-table">
                <thead><tr>
                    <th></th><th>"Event id"</th><th>"Type"</th><th>"Routing key"</th><th>"Age"</th>
                    <th>"Status"</th><th>"Attempts"</th><th>"Last error"</th><th>"Size"</th>
                </tr></thead>
                <tbody>
                    {p.rows.into_iter().map(|r| {
                        let id = r.id.clone();
                        let id2 = r.id.clone();
                        let detail = types::routes::outbox_row(&source, &r.id);
                        view! {
                            <tr data-row="outbox-row" tabindex="-1">
                                <td>{(can_operate && actionable).then(|| view! {
                                    <input type="checkbox" aria-label="select row"
                                        prop:checked=move || selected.with(|s| s.contains(&id))
                                        on:change=move |ev| {
                                            let on = event_target_checked(&ev);
                                            selected.update(|s| { if on { s.insert(id2.clone()); } else { s.remove(&id2); } });
                                        } />
                                })}</td>
                                <td class="font-mono text-xs"><a class="underline" href=detail>{format::clip(&r.event_id, 36)}</a></td>
                                <td>{r.event_type}</td>
                                <td class="font-mono text-xs">{r.exchange}" "{r.routing_key}</td>
                                <td class="tabular-nums whitespace-nowrap" title=format::time(r.created_at)>{format::age_secs(r.age_secs)}</td>
                                <td><Pill text=r.status /></td>
                                <td class="text-right tabular-nums">{r.attempts}</td>
                                <td class="text-xs text-red-700 dark:text-red-300 max-w-xs break-words">{r.last_error.map(|e| format::clip(&e, 120))}</td>
                                <td class="text-right tabular-nums whitespace-nowrap">{format::bytes(r.payload_size)}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            {empty.then(|| view! { <p class="p-3 muted text-sm">"No rows match."</p> })}
        </div>
        <Pager first prev next next_label="Next page →" />
    }
}
