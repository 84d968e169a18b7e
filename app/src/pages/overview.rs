//! Overview: what an on-call engineer checks first.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::layout::{ErrorBox, PageTitle, StatusDot};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DependencyView {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

#[server(prefix = "/api", endpoint = "dependencies")]
pub async fn dependency_status() -> Result<Vec<DependencyView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let (pg, mq) = futures_join(
        engine::health::postgres(&state.pool),
        engine::health::rabbitmq(&state.settings.amqp_url, state.settings.management_url.as_deref()),
    )
    .await;
    Ok([pg, mq].into_iter().map(|d| DependencyView { name: d.name.to_string(), ok: d.ok, detail: d.detail }).collect())
}

#[cfg(feature = "ssr")]
async fn futures_join<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    tokio::join!(a, b)
}

#[component]
pub fn OverviewPage() -> impl IntoView {
    let deps = Resource::new(|| (), |_| dependency_status());
    Effect::new(move |_| {
        let handle = set_interval_with_handle(move || deps.refetch(), std::time::Duration::from_secs(5));
        on_cleanup(move || {
            if let Ok(h) = handle {
                h.clear();
            }
        });
    });
    view! {
        <PageTitle title="Overview" />
        <section aria-labelledby="health-h" class="mb-6">
            <h2 id="health-h" class="text-sm font-semibold uppercase tracking-wide text-slate-500 mb-2">"Dependencies"</h2>
            <Suspense fallback=|| view! { <p class="text-sm text-slate-500">"Checking…"</p> }>
                {move || Suspend::new(async move {
                    match deps.await {
                        Ok(list) => view! {
                            <div class="grid sm:grid-cols-2 gap-3" data-testid="dependencies">
                                {list.into_iter().map(|d| view! {
                                    <div class="rounded border border-slate-200 dark:border-slate-800 bg-white dark:bg-slate-900 px-3 py-2">
                                        <div class="flex items-center gap-2 font-medium">
                                            <StatusDot ok=d.ok />
                                            <span>{d.name.clone()}</span>
                                            <span class="ml-auto text-xs" class=("text-emerald-600", d.ok) class=("text-red-600", !d.ok)>
                                                {if d.ok { "reachable" } else { "unreachable" }}
                                            </span>
                                        </div>
                                        <div class="text-xs text-slate-500 mt-1 font-mono break-all">{d.detail.clone()}</div>
                                    </div>
                                }).collect_view()}
                            </div>
                        }.into_any(),
                        Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}
