//! A message body or payload, shown safely: always a text node (never HTML), with its kind.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
use types::BodyKind;

/// What the server sends for a body: already rendered (JSON pretty, text, or hex).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BodyView {
    pub kind: BodyKind,
    pub text: String,
    pub truncated: bool,
    pub total_bytes: usize,
}

#[cfg(feature = "ssr")]
impl BodyView {
    pub fn render(bytes: &[u8], max: usize) -> BodyView {
        let r = engine::dead_letter::body::render(bytes, max);
        BodyView { kind: r.kind, text: r.text, truncated: r.truncated, total_bytes: r.total_bytes }
    }
}

/// The body in a <pre>, as text; a "show all" link when it was cut.
#[component]
pub fn Body(body: BodyView, #[prop(into)] full_href: String) -> impl IntoView {
    let label = match body.kind {
        BodyKind::Json => "JSON",
        BodyKind::Text => "text",
        BodyKind::Hex => "binary (hex)",
    };
    view! {
        <div class="card">
            <div class="flex items-center gap-2 px-3 py-1.5 border-b border-slate-200 dark:border-slate-800 text-xs muted">
                <span data-testid="body-kind">{label}</span>
                <span>"· "{crate::format::bytes(body.total_bytes as i64)}</span>
                {body.truncated.then(|| view! {
                    <span class="text-amber-700 dark:text-amber-400">"· truncated"</span>
                    <a class="underline ml-auto" href=full_href.clone()>"Show all"</a>
                })}
            </div>
            <pre data-testid="body" tabindex="0" class="p-3 text-xs font-mono whitespace-pre-wrap break-all max-h-[32rem] overflow-auto">{body.text}</pre>
        </div>
    }
}
