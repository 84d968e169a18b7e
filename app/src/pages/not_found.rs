//! The 404 page.

use leptos::prelude::*;

#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    {
        if let Some(resp) = use_context::<leptos_axum::ResponseOptions>() {
            resp.set_status(http::StatusCode::NOT_FOUND);
        }
    }
    view! {
        <crate::layout::PageTitle title="Not found" />
        <p class="text-sm">"There is no page here. "<a class="underline" href="/">"Back to the overview"</a></p>
    }
}
