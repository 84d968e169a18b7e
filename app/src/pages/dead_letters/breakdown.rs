//! A failure group's "why" when no error header says it: what its newest awaiting bodies are
//! (JSON, text, binary, compressed), a declared JSON content type the body does not match,
//! and the schema versions its messages carry.

use leptos::prelude::*;
use types::Breakdown;

fn share(n: i64, of: i64) -> String {
    if of == 0 { "0 %".into() } else { format!("{} %", (n * 100 + of / 2) / of) }
}

#[component]
pub fn BreakdownCard(b: Breakdown, no_error: bool, group: i64) -> impl IntoView {
    if b.sampled == 0 {
        return view! { <p class="muted text-sm mb-3" data-testid="group-breakdown">"No message of this group awaits triage."</p> }
            .into_any();
    }
    let of = b.sampled;
    let headline = match (b.mixed(), no_error) {
        (true, _) => "These messages differ: the difference is the likely cause.",
        (false, true) => "No error header, and the bodies look alike: read a body below.",
        (false, false) => "The bodies look alike.",
    };
    let shapes = b
        .shapes
        .iter()
        .map(|(s, n)| view! { <li data-shape=s.as_str()>{format!("{} {n} ({})", s.as_str(), share(*n, of))}</li> })
        .collect_view();
    let mismatch = (b.declared_json_not_json > 0).then(|| {
        view! {
            <li data-testid="declared-json-not-json" class="text-red-700 dark:text-red-400">
                {format!("{} declared JSON (content_type) but the body is not JSON", b.declared_json_not_json)}
            </li>
        }
    });
    let untyped =
        (b.no_content_type > 0).then(|| view! { <li>{format!("{} without a content_type", b.no_content_type)}</li> });
    // Each shape links to the group's list narrowed to it: from there "Replay all matching"
    // takes that shape alone.
    let key_sets = (!b.key_sets.is_empty()).then(|| {
        let each = b
            .key_sets
            .iter()
            .map(|(label, n, example)| {
                let list = format!(
                    "/dead-letters{}",
                    crate::widgets::query_string(&[("group", Some(group.to_string())), ("shape", Some(label.clone()))])
                );
                view! {
                    <li>
                        <a class="underline font-mono" href=list>{label.clone()}</a>
                        {format!(" {n} ({}) · e.g. ", share(*n, of))}
                        <a class="underline" href=types::routes::dead_letter(*example)>{format!("#{example}")}</a>
                    </li>
                }
            })
            .collect_view();
        view! { <ul class="text-xs mt-1 space-y-0.5" data-testid="key-sets">{each}</ul> }
    });
    let versions = (!b.schema_versions.is_empty()).then(|| {
        let each = b
            .schema_versions
            .iter()
            .map(|(v, n)| match v {
                Some(v) => format!("{v}: {n}"),
                None => format!("none: {n}"),
            })
            .collect::<Vec<_>>()
            .join(" · ");
        view! { <li data-testid="schema-versions">{format!("schema version {each}")}</li> }
    });
    view! {
        <div class="card mb-3 px-3 py-2 text-sm" data-testid="group-breakdown">
            <h2 class="font-semibold">{format!("What the newest {of} bodies are")}</h2>
            <p class="muted text-xs mb-1">{headline}</p>
            <ul class="flex flex-wrap gap-x-4 gap-y-0.5 text-xs tabular-nums">{shapes}</ul>
            {key_sets}
            <ul class="text-xs mt-1 space-y-0.5">{mismatch}{untyped}{versions}</ul>
        </div>
    }
    .into_any()
}
