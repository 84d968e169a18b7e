//! Revenant's console: the page shell, routes, and (per page module) the components with
//! the server functions they call. Built twice: `ssr` for the server, `hydrate` for wasm.
#![recursion_limit = "256"]

pub mod auth;
pub mod banner;
pub mod body_view;
pub mod copy;
pub mod error;
pub mod format;
#[cfg(feature = "ssr")]
pub mod guard;
pub mod layout;
pub mod pages;
pub mod policy;
pub mod shortcuts;
#[cfg(feature = "ssr")]
pub mod state;
pub mod theme;
pub mod widgets;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::{
    ParamSegment, SsrMode, StaticSegment,
    components::{Route, Router, Routes},
};

use types::routes::seg;

use crate::layout::Frame;
use crate::pages::{
    alerts::{AlertsPage, rule::AlertRulePage},
    audit::AuditLogPage,
    dead_letters::{
        DeadLettersPage,
        detail::DeadLetterPage,
        group_replay::GroupReplayPage,
        groups::{GroupPage, GroupsPage},
    },
    login::LoginPage,
    not_found::NotFound,
    outbox::{OutboxPage, detail::OutboxRowPage},
    overview::OverviewPage,
    replays::{ReplaysPage, plan::PlanPage},
    topology::TopologyPage,
    users::UsersPage,
};

/// The HTML document around every page; the server renders it per request.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    #[cfg(feature = "ssr")]
    set_content_security_policy();
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                // Before any stylesheet or paint: dark or light, with no flash of the other.
                <script nonce=leptos::nonce::use_nonce() inner_html=theme::HEAD_SCRIPT></script>
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body class="bg-slate-50 text-slate-900 dark:bg-slate-950 dark:text-slate-100 antialiased">
                <App />
            </body>
        </html>
    }
}

/// Scripts only from our origin or carrying this response's nonce (the hydration
/// bootstrap); no inline scripts otherwise, no framing, forms post only to us.
#[cfg(feature = "ssr")]
fn set_content_security_policy() {
    let (Some(resp), Some(nonce)) = (use_context::<leptos_axum::ResponseOptions>(), leptos::nonce::use_nonce()) else {
        return;
    };
    let csp = format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; style-src 'self'; \
         img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
         frame-ancestors 'none'; form-action 'self'"
    );
    if let Ok(v) = http::HeaderValue::from_str(&csp) {
        resp.insert_header(http::header::CONTENT_SECURITY_POLICY, v);
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Stylesheet id="leptos" href="/pkg/revenant.css" />
        <Title formatter=|t: String| if t.is_empty() { "Revenant".to_string() } else { format!("{t} · Revenant") } />
        <Router>
            <Frame>
                <Routes fallback=NotFound>
                    <Route path=StaticSegment("") view=OverviewPage ssr=SsrMode::Async />
                    <Route path=StaticSegment(seg::LOGIN) view=LoginPage ssr=SsrMode::Async />
                    <Route path=StaticSegment(seg::AUDIT) view=AuditLogPage ssr=SsrMode::Async />
                    <Route path=StaticSegment(seg::ALERTS) view=AlertsPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment(seg::ALERTS), ParamSegment("id")) view=AlertRulePage ssr=SsrMode::Async />
                    <Route path=StaticSegment(seg::OUTBOX) view=OutboxPage ssr=SsrMode::Async />
                    <Route path=StaticSegment(seg::TOPOLOGY) view=TopologyPage ssr=SsrMode::Async />
                    <Route path=StaticSegment(seg::REPLAYS) view=ReplaysPage ssr=SsrMode::Async />
                    <Route path=StaticSegment(seg::USERS) view=UsersPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment(seg::REPLAYS), ParamSegment("id")) view=PlanPage ssr=SsrMode::Async />
                    <Route path=StaticSegment(seg::DEAD_LETTERS) view=DeadLettersPage ssr=SsrMode::Async />
                    <Route
                        path=(StaticSegment(seg::DEAD_LETTERS), StaticSegment(seg::GROUPS))
                        view=GroupsPage
                        ssr=SsrMode::Async
                    />
                    <Route
                        path=(StaticSegment(seg::DEAD_LETTERS), StaticSegment(seg::GROUPS), ParamSegment("id"))
                        view=GroupPage
                        ssr=SsrMode::Async
                    />
                    <Route
                        path=(
                            StaticSegment(seg::DEAD_LETTERS),
                            StaticSegment(seg::GROUPS),
                            ParamSegment("id"),
                            StaticSegment(seg::REPLAY),
                        )
                        view=GroupReplayPage
                        ssr=SsrMode::Async
                    />
                    <Route
                        path=(StaticSegment(seg::DEAD_LETTERS), ParamSegment("id"))
                        view=DeadLetterPage
                        ssr=SsrMode::Async
                    />
                    <Route
                        path=(StaticSegment(seg::OUTBOX), ParamSegment("source"), ParamSegment("id"))
                        view=OutboxRowPage
                        ssr=SsrMode::Async
                    />
                </Routes>
            </Frame>
        </Router>
    }
}

#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
    // Buttons work from here on: what the page-load bench (end2end/bench) waits for.
    if let Some(root) = leptos::prelude::document().document_element() {
        let _ = root.set_attribute("data-hydrated", "");
    }
}
