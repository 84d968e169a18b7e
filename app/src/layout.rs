//! The frame around every page: navigation, and shared bits of page furniture.

use leptos::prelude::*;
use leptos_router::hooks::use_location;

use crate::auth::{Logout, whoami};
use crate::error::AppError;
use crate::shortcuts::Shortcuts;
use crate::theme::ThemeToggle;

const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/outbox", "Outbox"),
    ("/dead-letters", "Dead letters"),
    ("/replays", "Replays"),
    ("/topology", "Topology"),
    ("/alerts", "Alerts"),
    ("/audit", "Audit"),
    ("/users", "Users"),
];

#[component]
pub fn Frame(children: Children) -> impl IntoView {
    let location = use_location();
    let link = move |href: &'static str, label: &'static str| {
        let active = move || {
            let p = location.pathname.get();
            if href == "/" { p == "/" } else { p.starts_with(href) }
        };
        view! {
            <a
                href=href
                class="px-3 py-1.5 rounded text-sm font-medium hover:bg-slate-200 dark:hover:bg-slate-800"
                class=("bg-slate-200", active)
                class=("dark:bg-slate-800", active)
                aria-current=move || if active() { Some("page") } else { None }
            >
                {label}
            </a>
        }
    };
    let signing_in = move || location.pathname.get() == "/login";
    view! {
        <a href="#main" class="sr-only focus:not-sr-only focus:absolute focus:top-2 focus:left-2 focus:z-30 btn">"Skip to content"</a>
        <header class="border-b border-slate-200 dark:border-slate-800 bg-white dark:bg-slate-900">
            <nav class="max-w-7xl mx-auto flex items-center gap-1 px-4 h-12" aria-label="Main">
                <a href="/" class="font-semibold tracking-tight mr-4 text-violet-700 dark:text-violet-400">
                    "Revenant"
                </a>
                // No navigation on the sign-in page: none of it opens before signing in.
                {move || (!signing_in()).then(|| view! {
                    <div class="hidden lg:flex items-center gap-1">
                        {NAV.iter().map(|(href, label)| link(href, label)).collect_view()}
                    </div>
                    // Below 1024 px the links fold into a menu (a <details>: no script needed).
                    // Re-rendered on each navigation, so it closes once a link is followed.
                    {move || {
                        location.pathname.track();
                        view! {
                            <details class="lg:hidden relative" data-testid="nav-menu">
                                <summary class="btn cursor-pointer select-none">"Menu"</summary>
                                <div class="absolute left-0 top-full mt-1 z-20 card flex flex-col p-1 w-48 shadow-lg">
                                    {NAV.iter().map(|(href, label)| link(href, label)).collect_view()}
                                    <div class="border-t border-slate-200 dark:border-slate-800 mt-1 pt-1">
                                        <ThemeToggle testid="theme-toggle-menu" />
                                    </div>
                                </div>
                            </details>
                        }
                    }}
                    <div class="ml-auto flex items-center gap-2">
                        <span class="hidden lg:inline-flex"><ThemeToggle /></span>
                        <UserBox />
                    </div>
                })}
                {move || signing_in().then(|| view! { <div class="ml-auto"><ThemeToggle /></div> })}
            </nav>
        </header>
        {move || (!signing_in()).then(|| view! { <crate::banner::FiringBanner /> })}
        <main id="main" tabindex="-1" class="max-w-7xl mx-auto px-4 py-5">{children()}</main>
        <Shortcuts />
    }
}

#[component]
pub fn PageTitle(#[prop(into)] title: String) -> impl IntoView {
    view! {
        <leptos_meta::Title text=title.clone() />
        <h1 class="text-xl font-semibold mb-4">{title}</h1>
    }
}

/// A server function's error, as the on-call engineer should read it.
#[component]
pub fn ErrorBox(err: AppError) -> impl IntoView {
    view! {
        <div role="alert" class="rounded border border-red-300 bg-red-50 text-red-800 dark:border-red-800 dark:bg-red-950 dark:text-red-200 px-3 py-2 text-sm">
            {err.to_string()}
        </div>
    }
}

/// A green / red dot with a label, for health at a glance.
#[component]
pub fn StatusDot(ok: bool) -> impl IntoView {
    let class = if ok {
        "inline-block w-2.5 h-2.5 rounded-full bg-emerald-500"
    } else {
        "inline-block w-2.5 h-2.5 rounded-full bg-red-500"
    };
    view! { <span class=class role="img" aria-label=if ok { "ok" } else { "down" }></span> }
}

/// The signed-in user and a sign-out button (a POST form: sign-out is a mutation).
#[component]
fn UserBox() -> impl IntoView {
    // Keyed on the path: signing in or out navigates, and the box must follow.
    let location = use_location();
    let who = Resource::new(move || location.pathname.get(), |_| whoami());
    let logout = ServerAction::<Logout>::new();
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                match who.await {
                    Ok(Some(m)) => view! {
                        <div class="flex items-center gap-2 text-sm whitespace-nowrap">
                            <span data-testid="whoami">{m.username.clone()}<span class="muted">" · "{m.role.as_str()}</span></span>
                            <ActionForm action=logout><button class="btn" type="submit">"Sign out"</button></ActionForm>
                        </div>
                    }.into_any(),
                    _ => view! { <a class="btn" href="/login">"Sign in"</a> }.into_any(),
                }
            })}
        </Suspense>
    }
}
