//! Small pieces of page furniture shared by several pages.

mod pager;
mod time;

use leptos::prelude::*;

pub use pager::Pager;
pub use time::Time;

/// A status word as a coloured pill.
#[component]
pub fn Pill(#[prop(into)] text: String) -> impl IntoView {
    let class = match text.as_str() {
        "pending" | "awaiting" | "scheduled" | "unconfirmed" => {
            "pill bg-amber-100 text-amber-900 dark:bg-amber-900/40 dark:text-amber-200"
        }
        "stuck" | "failed" | "firing" | "fail" | "critical" => {
            "pill bg-red-100 text-red-800 dark:bg-red-900/40 dark:text-red-200"
        }
        "published" | "replayed" | "done" | "ok" | "pass" | "resolved" | "sent" => {
            "pill bg-emerald-100 text-emerald-800 dark:bg-emerald-900/40 dark:text-emerald-200"
        }
        "warn" | "warning" | "paused" | "replaying" | "running" => {
            "pill bg-sky-100 text-sky-800 dark:bg-sky-900/40 dark:text-sky-200"
        }
        _ => "pill bg-slate-200 text-slate-700 dark:bg-slate-800 dark:text-slate-300",
    };
    view! { <span class=class>{text}</span> }
}

/// A row of links, the current one highlighted.
#[component]
pub fn Tabs(items: Vec<(String, String, bool)>) -> impl IntoView {
    view! {
        <div class="flex flex-wrap gap-1 border-b border-slate-200 dark:border-slate-800 mb-3">
            {items.into_iter().map(|(href, label, active)| {
                let class = if active {
                    "px-3 py-1.5 text-sm -mb-px border-b-2 border-violet-600 font-medium"
                } else {
                    "px-3 py-1.5 text-sm -mb-px border-b-2 border-transparent muted hover:text-slate-900 dark:hover:text-white"
                };
                view! { <a class=class href=href aria-current=active.then_some("page")>{label}</a> }
            }).collect_view()}
        </div>
    }
}

/// Builds a query string from pairs, skipping empty values.
pub fn query_string(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| {
            v.as_ref().filter(|v| !v.is_empty()).map(|v| format!("{k}={}", crate::format::urlencode(v)))
        })
        .collect();
    if parts.is_empty() { String::new() } else { format!("?{}", parts.join("&")) }
}

/// A counter that goes up every `every` in the browser (never on the server): resources keyed
/// on it refetch, which is how live pages refresh. A tab in the background does not poll; when
/// it is shown again it goes up at once, so what the engineer comes back to is current. The
/// interval and the listener stop with the component.
pub fn use_tick(every: std::time::Duration) -> RwSignal<u32> {
    let tick = RwSignal::new(0u32);
    Effect::new(move |_| {
        let handle = set_interval_with_handle(
            move || {
                if !document().hidden() {
                    tick.update(|t| *t += 1);
                }
            },
            every,
        );
        // `visibilitychange` is fired at the document and bubbles to the window.
        let shown = window_event_listener_untyped("visibilitychange", move |_| {
            if !document().hidden() {
                tick.update(|t| *t += 1);
            }
        });
        on_cleanup(move || {
            if let Ok(h) = handle {
                h.clear();
            }
            shown.remove();
        });
    });
    tick
}

/// One labelled text input of a GET filter form, showing the current value.
#[component]
pub fn FilterField(
    name: &'static str,
    label: &'static str,
    value: Option<String>,
    #[prop(default = "")] placeholder: &'static str,
) -> impl IntoView {
    view! {
        <label class="flex flex-col gap-0.5">
            {label}
            <input class="input w-36" name=name value=value.unwrap_or_default() placeholder=placeholder />
        </label>
    }
}

/// A queue's page in the RabbitMQ management UI (`types::routes::management_queue`), in a
/// new tab; nothing when there is no link (the management API is off).
#[component]
pub fn BrokerLink(href: Option<String>) -> impl IntoView {
    href.map(|href| {
        view! {
            <a class="underline text-xs muted whitespace-nowrap hover:text-violet-700 dark:hover:text-violet-300" data-testid="broker-link"
                href=href target="_blank" rel="noopener" title="this queue in the RabbitMQ management UI">"RabbitMQ ↗"</a>
        }
    })
}
