//! Revenant's console: the page shell, routes, and (per page module) the components with
//! the server functions they call. Built twice: `ssr` for the server, `hydrate` for wasm.
#![recursion_limit = "256"]

pub mod error;
pub mod layout;
pub mod pages;
#[cfg(feature = "ssr")]
pub mod state;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::{
    SsrMode, StaticSegment,
    components::{Route, Router, Routes},
};

use crate::layout::Frame;
use crate::pages::{not_found::NotFound, overview::OverviewPage};

/// The HTML document around every page; the server renders it per request.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body class="bg-slate-50 text-slate-900 dark:bg-slate-950 dark:text-slate-100 antialiased">
                <App />
            </body>
        </html>
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
}
