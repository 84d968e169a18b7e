//! Starting and stopping the ingest of a queue from the page (admins): the same watched set
//! and audit entry as `revenant dlq add|remove`. The server decides who may; the buttons are
//! only hidden from those who may not.

use leptos::prelude::*;

use super::api::DlWatch;
use crate::layout::ErrorBox;

/// What the buttons need to report back and refresh the page.
#[derive(Clone, Copy)]
pub struct Manage {
    pub acted: RwSignal<u32>,
    pub notice: RwSignal<Option<String>>,
}

#[component]
pub fn WatchButton(queue: String, start: bool, manage: Manage) -> impl IntoView {
    let act = ServerAction::<DlWatch>::new();
    Effect::new(move |_| {
        if let Some(Ok(m)) = act.value().get() {
            manage.notice.set(Some(m));
            manage.acted.update(|v| *v += 1);
        }
    });
    let (label, testid) = if start { ("Start ingesting", "dlq-start") } else { ("Stop ingesting", "dlq-stop") };
    let title = if start {
        "Every running ingester starts consuming this queue within a few seconds"
    } else {
        "Ingesters close their consumer; what the queue holds stays in RabbitMQ"
    };
    let q = queue.clone();
    view! {
        <button class="btn text-xs" type="button" data-testid=testid title=title
            disabled=move || act.pending().get()
            on:click=move |_| { act.dispatch(DlWatch { queue: q.clone(), start }); }>
            {label}
        </button>
        {move || act.value().get().and_then(|r| r.err()).map(|err| view! { <ErrorBox err /> })}
    }
}

/// Dead-letter queues on the broker that nothing ingests, each with a start button for admins.
#[component]
pub fn Discovered(found: Vec<String>, manage: Option<Manage>) -> impl IntoView {
    view! {
        <div class="text-sm mb-3 text-amber-800 dark:text-amber-300" data-testid="discovered">
            <p>"Dead-letter queues on the broker that Revenant does not ingest: nothing in them is seen until they are."</p>
            <ul class="mt-1 flex flex-wrap gap-2">
                {found.into_iter().map(|q| view! {
                    <li class="flex items-center gap-2 card px-2 py-1">
                        <span class="font-mono break-all">{q.clone()}</span>
                        {manage.map(|m| view! { <WatchButton queue=q.clone() start=true manage=m /> })}
                    </li>
                }).collect_view()}
            </ul>
            {manage.is_none().then(|| view! {
                <p class="muted text-xs mt-1">"An admin can start ingesting them here, or with `revenant dlq add QUEUE`."</p>
            })}
        </div>
    }
}
