//! One alert rule: its state and settings, (admins) edit / silence / delete, the history of
//! its transitions (newest first, keyset "older" link) and its webhook delivery attempts.

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use super::admin::{DeleteBox, SilenceBox, TestBox};
use super::api::{
    DeliveryView, HistoryPage, RuleDetailView, alerts_deliveries, alerts_get, alerts_history, alerts_targets,
};
use super::{form, num, thresholds};
use crate::auth::whoami;
use crate::error::AppError;
use crate::format;
use crate::layout::{ErrorBox, PageTitle};
use crate::widgets::{Pill, Time};

fn parse_id(id: &str) -> Result<i64, AppError> {
    id.parse::<i64>().map_err(|_| AppError::NotFound(format!("no alert rule {id}")))
}

#[component]
pub fn AlertRulePage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let before = move || query.with(|q| q.get("before").and_then(|b| b.parse::<i64>().ok()));
    let changed = RwSignal::new(0u32);
    let detail =
        Resource::new(move || (id(), changed.get()), |(id, _)| async move { alerts_get(parse_id(&id)?).await });
    let history = Resource::new(
        move || (id(), before(), changed.get()),
        |(id, before, _)| async move { alerts_history(parse_id(&id)?, before).await },
    );
    let deliveries =
        Resource::new(move || (id(), changed.get()), |(id, _)| async move { alerts_deliveries(parse_id(&id)?).await });
    let caller = Resource::new(|| (), |_| whoami());
    let options = Resource::new(|| (), |_| alerts_targets());
    // Outside the Suspense, so it survives the refetch a change causes.
    let notice = RwSignal::new(None::<String>);
    view! {
        <PageTitle title="Alert rule" />
        <a class="text-sm underline" href="/alerts">"← alerts"</a>
        {move || notice.get().map(|m| view! { <p class="my-2 text-sm text-emerald-700 dark:text-emerald-400" role="status">{m}</p> })}
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let d = match detail.await {
                    Err(e) => return view! { <div class="mt-2"><ErrorBox err=e /></div> }.into_any(),
                    Ok(d) => d,
                };
                let admin = matches!(caller.await, Ok(Some(ref c)) if c.is_admin());
                let editor = if admin {
                    match options.await {
                        Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                        Ok(options) => {
                            let on_saved = Callback::new(move |(_, name): (i64, String)| {
                                notice.set(Some(format!("Rule “{name}” saved.")));
                                changed.update(|n| *n += 1);
                            });
                            view! { <form::RuleEditor id=Some(d.row.id) initial=d.form.clone() options on_saved /> }.into_any()
                        }
                    }
                } else {
                    ().into_any()
                };
                view! { <Summary d=d.clone() admin changed notice /> {editor} }.into_any()
            })}
        </Suspense>
        <h2 class="text-sm font-semibold mt-4 mb-1">"History"</h2>
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match history.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(page) => view! { <History page id=id() paged=before().is_some() /> }.into_any(),
                }
            })}
        </Suspense>
        <h2 class="text-sm font-semibold mt-4 mb-1">"Webhook deliveries"</h2>
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match deliveries.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(rows) => view! { <Deliveries rows /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Summary(d: RuleDetailView, admin: bool, changed: RwSignal<u32>, notice: RwSignal<Option<String>>) -> impl IntoView {
    let r = d.row.clone();
    let kv = |k: &'static str, v: String| view! { <tr><th class="w-40">{k}</th><td class="break-all">{v}</td></tr> };
    let when = |k: &'static str, at: Option<chrono::DateTime<chrono::Utc>>, then: String| {
        view! {
            <tr><th class="w-40">{k}</th><td>{at.map(|at| view! { <Time at /> })}{then}</td></tr>
        }
    };
    let window = d.window_mins.map(|w| format!("{w} min")).unwrap_or_else(|| "—".into());
    view! {
        <div class="flex flex-wrap items-center gap-2 mt-2 mb-3">
            <h2 class="text-lg font-semibold" data-testid="rule-name">{r.name.clone()}</h2>
            <Pill text=r.state />
            {r.severity.map(|s| view! { <Pill text=s /> })}
            {(!r.enabled).then(|| view! { <Pill text="disabled" /> })}
            {r.silenced_until.map(|at| view! { <span class="pill bg-slate-200 dark:bg-slate-800">"silenced until "<Time at /></span> })}
        </div>
        <div class="grid lg:grid-cols-2 gap-4 mb-4">
            <div class="card">
                <table class="tbl" data-testid="rule-details"><tbody>
                    <tr><th class="w-40">"Value"</th><td class="tabular-nums">
                        <b>{r.value.map(num).unwrap_or_else(|| "not measured yet".into())}</b>
                        <span class="muted">" ("{r.kind.label()}")"</span>
                    </td></tr>
                    {kv("Thresholds", thresholds(&r))}
                    {when("State since", Some(r.since), format!(" ({} ago)", format::age_secs(r.since_secs)))}
                    {when("Last evaluated", d.last_eval_at, if d.last_eval_at.is_none() { "never".into() } else { String::new() })}
                    {kv("Kind", r.kind.as_str().to_string())}
                    <tr><th class="w-40">"Target"</th><td class="font-mono text-xs">
                        <a class="underline" href=r.link.clone()>{r.target.clone().unwrap_or_else(|| "any queue".into())}</a>
                    </td></tr>
                    {kv("For", format!("{} s", d.for_secs))}
                    {kv("Window", window)}
                    {kv("Webhook", format!("{} ({})", r.webhook_host.clone().unwrap_or_else(|| "none".into()), d.webhook_format))}
                    {kv("Silence reason", d.silence_reason.clone().unwrap_or_else(|| "—".into()))}
                    {when("Created", Some(d.created_at), format!(" by {}", d.created_by))}
                    {when("Updated", Some(d.updated_at), String::new())}
                </tbody></table>
            </div>
            {admin.then(|| view! {
                <div class="flex flex-col gap-3">
                    {r.webhook_host.is_some().then(|| view! { <TestBox id=r.id /> })}
                    <SilenceBox id=r.id silenced=r.silenced_until.is_some() changed notice />
                    <DeleteBox id=r.id name=r.name.clone() />
                </div>
            })}
        </div>
    }
}

#[component]
fn History(page: HistoryPage, id: String, paged: bool) -> impl IntoView {
    let empty = page.events.is_empty();
    let older = page.older.map(|b| format!("/alerts/{id}?before={b}"));
    view! {
        <div tabindex="0" class="card overflow-x-auto">
            <table class="tbl" data-testid="rule-history">
                <thead><tr>
                    <th>"At"</th><th>"Transition"</th><th>"Severity"</th><th class="text-right">"Value"</th>
                    <th class="text-right">"Threshold"</th><th>"Message"</th>
                </tr></thead>
                <tbody>
                    {page.events.into_iter().map(|e| view! {
                        <tr>
                            <td class="text-xs whitespace-nowrap"><Time at=e.at /></td>
                            <td class="whitespace-nowrap"><Pill text=e.from_state />" → "<Pill text=e.to_state /></td>
                            <td>{e.severity.map(|s| view! { <Pill text=s /> })}</td>
                            <td class="text-right tabular-nums">{num(e.value)}</td>
                            <td class="text-right tabular-nums">{num(e.threshold)}</td>
                            <td class="text-xs">
                                {e.message}
                                {e.link.map(|l| view! { " " <a class="underline" href=l>"cause"</a> })}
                            </td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            {empty.then(|| view! { <p class="p-3 muted text-sm">"No transitions yet."</p> })}
        </div>
        <div class="flex gap-2 mt-2">
            {paged.then(|| view! { <a class="btn" href=format!("/alerts/{id}")>"← Newest"</a> })}
            {older.map(|h| view! { <a class="btn" href=h>"Older →"</a> })}
        </div>
    }
}

#[component]
fn Deliveries(rows: Vec<DeliveryView>) -> impl IntoView {
    let empty = rows.is_empty();
    view! {
        <div tabindex="0" class="card overflow-x-auto">
            <table class="tbl" data-testid="rule-deliveries">
                <thead><tr>
                    <th>"Attempted"</th><th>"Alert"</th><th class="text-right">"Attempt"</th><th>"Outcome"</th>
                    <th class="text-right">"HTTP"</th><th>"Error"</th><th>"Due"</th>
                </tr></thead>
                <tbody>
                    {rows.into_iter().map(|d| {
                        let outcome = match (d.delivered, d.at.is_some()) {
                            (true, _) => "sent",
                            (false, false) => "scheduled",
                            (false, true) => "failed",
                        };
                        // Only a waiting attempt has a meaningful due time; a made one queued its successor.
                        let next = d.at.is_none().then_some(d.next_attempt_at);
                        view! {
                            <tr>
                                <td class="text-xs whitespace-nowrap">{match d.at { Some(at) => view! { <Time at /> }.into_any(), None => "—".into_any() }}</td>
                                <td><Pill text=d.to_state /></td>
                                <td class="text-right tabular-nums">{d.attempt}</td>
                                <td><Pill text=outcome /></td>
                                <td class="text-right tabular-nums">{d.status_code.map(|c| c.to_string()).unwrap_or_else(|| "—".into())}</td>
                                <td class="text-xs text-red-700 dark:text-red-300 max-w-md break-words">{d.error.map(|e| format::clip(&e, 200))}</td>
                                <td class="text-xs whitespace-nowrap">{next.map(|at| view! { <Time at /> })}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            {empty.then(|| view! { <p class="p-3 muted text-sm">"No webhook deliveries yet."</p> })}
        </div>
    }
}
