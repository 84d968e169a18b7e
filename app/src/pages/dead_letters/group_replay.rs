//! A failure group's replay to its origin queue as a page of its own: the preview rendered by
//! the server and a plain form that creates the plan. It is where the group page's primary
//! button leads before the page's script has loaded (on a slow phone link, seconds), so the
//! on-call engineer an alert sent there can replay at once; once the script runs, the button
//! opens the full planner in place instead.

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use super::api::DlQuery;
use crate::layout::{ErrorBox, PageTitle};
use crate::pages::replays::api::{PreviewView, Refused, ReplayGroup, SelectionInput, TargetInput, replay_preview};

/// The paces offered, in messages per second ("" = as fast as the broker confirms).
const RATES: [(&str, &str); 4] = [("10", "10 / s"), ("50", "50 / s"), ("200", "200 / s"), ("", "no limit")];

#[component]
pub fn GroupReplayPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let id = move || params.with(|p| p.get("id").and_then(|v| v.parse::<i64>().ok()).unwrap_or(0));
    let preview = Resource::new(id, |g| {
        let selection = SelectionInput::Filter(DlQuery { group: Some(g.to_string()), ..Default::default() });
        replay_preview(selection, TargetInput { mode: "origin".into(), ..Default::default() })
    });
    let refused = move || query.with(|q| q.get("refused").as_deref().and_then(Refused::parse));
    view! {
        <PageTitle title="Replay a failure group" />
        {move || {
            let g = id();
            view! {
                <p class="text-sm mb-3 flex gap-3">
                    <a class="underline" href=types::routes::failure_group(g)>{format!("← failure group #{g}")}</a>
                </p>
            }
        }}
        {move || refused().map(|r| view! {
            <p class="mb-3 text-sm text-red-700 dark:text-red-300" role="alert" data-testid="replay-refused">{r.sentence()}</p>
        })}
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match preview.await {
                    Err(err) => view! { <ErrorBox err /> }.into_any(),
                    Ok(p) => view! { <Preview p group=id() /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// What the plan would send and where, then the form.
#[component]
fn Preview(p: PreviewView, group: i64) -> impl IntoView {
    let action = ServerAction::<ReplayGroup>::new();
    let queues = p.origin_queues.join(", ");
    let count = p.count;
    let reaches: Vec<String> = p
        .targets
        .iter()
        .map(|t| match (&t.queue, &t.exists) {
            (Some(q), Some(false)) => format!("{} to {q}, which does NOT exist on the broker", t.count),
            (Some(q), _) => format!(
                "{} to {q} (only that queue; {} consumers)",
                t.count,
                t.consumers.map(|c| c.to_string()).unwrap_or_else(|| "?".into())
            ),
            (None, _) => format!("{} with no destination known", t.count),
        })
        .collect();
    view! {
        <div class="card p-3 text-sm flex flex-col gap-2 max-w-3xl" data-testid="group-replay-page">
            <h2 class="font-semibold">{format!("Replay {count} to {}", if queues.is_empty() { "the queue each died in".to_string() } else { queues })}</h2>
            <p class="text-xs muted" data-testid="preview-selection">{format!("The set: {}. It is frozen when the plan is created.", p.selection)}</p>
            <p><b data-testid="preview-count">{count}</b>" messages will be replayed"
                {(p.already_replayed > 0).then(|| format!(" — {} of them were replayed before", p.already_replayed))}</p>
            <ul class="list-disc ml-5" data-testid="preview-targets">
                {reaches.into_iter().map(|r| view! { <li>{r}</li> }).collect_view()}
            </ul>
            {p.broker_error.clone().map(|e| view! { <p class="text-red-700 dark:text-red-300">"Could not check the targets on the broker: "{e}</p> })}
            {(p.without_destination > 0).then(|| view! {
                <p class="text-red-700 dark:text-red-300">{format!("{} name no destination (no x-death, no failure headers): replay them from the group page to a queue you name.", p.without_destination)}</p>
            })}
            {(count > 0).then(|| view! {
                <ActionForm action attr:class="flex flex-wrap items-end gap-3 mt-1" attr:data-testid="group-replay-form">
                    <input type="hidden" name="group" value=group.to_string() />
                    <label class="flex flex-col gap-0.5">"Pace"
                        <select class="input" name="rate">
                            {RATES.iter().map(|(v, label)| view! { <option value=*v selected=*v == "50">{*label}</option> }).collect_view()}
                        </select>
                    </label>
                    {if p.needs_typed_confirmation {
                        view! {
                            <label class="flex flex-col gap-0.5">{format!("Type {count} to confirm")}
                                <input class="input w-28" name="confirm_count" inputmode="numeric" autocomplete="off" required />
                            </label>
                        }.into_any()
                    } else {
                        view! { <input type="hidden" name="confirm_count" value=count.to_string() /> }.into_any()
                    }}
                    <button class="btn btn-primary" type="submit">{format!("Replay {count} messages")}</button>
                </ActionForm>
            })}
            <p class="text-xs muted">"Auto-pauses if half of what it sends dies again. Another target, an order or a later start: "
                <a class="underline" href=types::routes::failure_group(group)>"the group page's planner"</a>"."</p>
        </div>
    }
}
