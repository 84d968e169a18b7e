//! The links under a keyset-paginated list: first page, previous, next.

use leptos::prelude::*;

/// "First page", "← Previous" and the next link (worded by the list: "Older →", "Next page →"),
/// each shown only when there is somewhere to go. `first` is None on the first page.
#[component]
pub fn Pager(
    first: Option<String>,
    prev: Option<String>,
    next: Option<String>,
    next_label: &'static str,
) -> impl IntoView {
    let any = first.is_some() || prev.is_some() || next.is_some();
    any.then(|| {
        view! {
            <nav class="flex flex-wrap gap-2 mt-3" aria-label="Pages" data-testid="pager">
                {first.map(|h| view! { <a class="btn" href=h>"First page"</a> })}
                {prev.map(|h| view! { <a class="btn" href=h rel="prev">"← Previous"</a> })}
                {next.map(|h| view! { <a class="btn" href=h rel="next">{next_label}</a> })}
            </nav>
        }
    })
}
