//! "Copy" buttons: a text onto the clipboard, and a word saying whether it got there.
//!
//! The clipboard is the browser's (`navigator.clipboard`, which exists only in a secure
//! context: HTTPS, or localhost). The server renders the button and never touches the
//! clipboard, so server rendering is unaffected; a click only ever happens in the browser.

use leptos::prelude::*;

type Said = RwSignal<Option<&'static str>>;

/// A small button copying `text`, with "Copied" beside it for two seconds.
#[component]
pub fn CopyButton(
    #[prop(into)] text: String,
    label: &'static str,
    #[prop(optional)] testid: Option<&'static str>,
) -> impl IntoView {
    let said: Said = RwSignal::new(None);
    let text = StoredValue::new(text);
    view! {
        <span class="inline-flex items-center gap-1">
            <button type="button" class="btn text-xs px-2 py-0.5" data-testid=testid
                on:click=move |_| write(text.get_value(), said)>{label}</button>
            {move || said.get().map(|m| view! { <span class="text-xs text-emerald-700 dark:text-emerald-400" role="status">{m}</span> })}
        </span>
    }
}

#[cfg(feature = "hydrate")]
fn write(text: String, said: Said) {
    leptos::task::spawn_local(async move {
        let copied = match web_sys::window() {
            // Outside a secure context `navigator.clipboard` is undefined: calling it would throw.
            Some(w) if w.is_secure_context() => {
                wasm_bindgen_futures::JsFuture::from(w.navigator().clipboard().write_text(&text)).await.is_ok()
            }
            _ => false,
        };
        said.set(Some(if copied { "Copied" } else { "Cannot copy here (the clipboard needs HTTPS): select the text" }));
        set_timeout(move || said.set(None), std::time::Duration::from_secs(2));
    });
}

/// The server renders the button; clicks happen in the browser only.
#[cfg(not(feature = "hydrate"))]
fn write(_text: String, _said: Said) {}
