//! The sign-in page: a plain form that works with or without JavaScript.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::auth::Login;
use crate::layout::ErrorBox;

#[component]
pub fn LoginPage() -> impl IntoView {
    let action = ServerAction::<Login>::new();
    let query = use_query_map();
    let next = move || query.with(|q| q.get("next").unwrap_or_else(|| "/".to_string()));
    view! {
        <leptos_meta::Title text="Sign in" />
        <div class="max-w-sm mx-auto mt-16 card p-6">
            <h1 class="text-lg font-semibold mb-4">"Sign in to Revenant"</h1>
            <ActionForm action attr:class="flex flex-col gap-3">
                <label class="text-sm flex flex-col gap-1">
                    "User name"
                    <input class="input" name="username" autocomplete="username" required />
                </label>
                <label class="text-sm flex flex-col gap-1">
                    "Password"
                    <input class="input" type="password" name="password" autocomplete="current-password" required />
                </label>
                <input type="hidden" name="next" prop:value=next />
                <button class="btn btn-primary justify-center" type="submit">"Sign in"</button>
            </ActionForm>
            {move || action.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mt-3"><ErrorBox err /></div> })}
        </div>
    }
}
