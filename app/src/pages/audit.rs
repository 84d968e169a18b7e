//! The audit log: every operator and admin action, newest first. Read-only by design.

use crate::layout::{ErrorBox, PageTitle};
use crate::widgets::{Pager, Time};
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

pub mod api;
use api::*;

#[component]
pub fn AuditLogPage() -> impl IntoView {
    let query = use_query_map();
    let q = move |k: &str| query.with(|m| m.get(k));
    let id = move |k: &str| q(k).and_then(|v| v.parse::<i64>().ok());
    let page = Resource::new(
        move || (q("actor"), q("action"), q("text"), id("before"), id("after")),
        |(actor, action, text, before, after)| audit_list(actor, action, text, before, after),
    );
    // The log's link with the current filter and one cursor (`before=ID` older, `after=ID` newer).
    let link = move |cursor: Option<String>| {
        let mut params: Vec<String> = cursor.into_iter().collect();
        for k in ["actor", "action", "text"] {
            if let Some(v) = q(k) {
                params.push(format!("{k}={}", crate::format::urlencode(&v)));
            }
        }
        if params.is_empty() { "/audit".to_string() } else { format!("/audit?{}", params.join("&")) }
    };
    view! {
        <PageTitle title="Audit log" />
        <form method="get" class="flex flex-wrap gap-2 mb-3 items-end text-sm">
            <label class="flex flex-col gap-0.5">"Actor"<input class="input" name="actor" prop:value=move || q("actor").unwrap_or_default() /></label>
            <label class="flex flex-col gap-0.5">"Action"<input class="input" name="action" placeholder="e.g. outbox.retry" prop:value=move || q("action").unwrap_or_default() /></label>
            <label class="flex flex-col gap-0.5">"Text"<input class="input" name="text" placeholder="target or detail" prop:value=move || q("text").unwrap_or_default() /></label>
            <button class="btn" type="submit">"Filter"</button>
            <a class="btn" href="/audit">"Clear"</a>
        </form>
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(p) => {
                        let empty = p.rows.is_empty();
                        let next = p.next_before.map(|b| link(Some(format!("before={b}"))));
                        let prev = p.prev_after.map(|a| link(Some(format!("after={a}"))));
                        let paged = id("before").is_some() || id("after").is_some();
                        let first = (paged && (prev.is_some() || empty)).then(|| link(None));
                        view! {
                            <div tabindex="0" class="card overflow-x-auto">
                                <table class="tbl" data-testid="audit-table">
                                    <thead><tr><th>"When"</th><th>"Who"</th><th>"From"</th><th>"Action"</th><th>"Target"</th><th>"Items"</th><th>"Outcome"</th><th>"Filter / detail"</th></tr></thead>
                                    <tbody>
                                        {p.rows.into_iter().map(|r| view! {
                                            <tr>
                                                <td class="whitespace-nowrap font-mono text-xs"><Time at=r.at /></td>
                                                <td>{r.actor}<span class="muted text-xs">" ("{r.actor_role}")"</span></td>
                                                <td class="font-mono text-xs">{r.source_ip}</td>
                                                <td class="font-mono text-xs">{r.action}</td>
                                                <td class="font-mono text-xs break-all">{r.target}</td>
                                                <td class="text-right tabular-nums">{r.item_count}</td>
                                                <td>{r.outcome}</td>
                                                <td class="font-mono text-xs break-all max-w-md">{r.filter}" "{r.detail}</td>
                                            </tr>
                                        }).collect_view()}
                                    </tbody>
                                </table>
                                {empty.then(|| view! { <p class="p-3 muted text-sm">"No audit entries match."</p> })}
                            </div>
                            <Pager first prev next next_label="Older entries →" />
                        }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}
