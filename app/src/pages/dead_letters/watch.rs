//! Starting and stopping the ingest of a queue from the page (admins): the same watched set
//! and audit entry as `revenant dlq add|remove`. The server decides who may; the buttons are
//! only hidden from those who may not. Starting a queue that may not be a dead-letter queue
//! shows the server's reasons and waits for the queue's name typed out.

use leptos::prelude::*;

use super::api::{DlWatch, WatchOutcome};
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
    // Set when the server asks for the queue's name before starting it.
    let confirming = RwSignal::new(None::<(Vec<String>, bool)>);
    let typed = RwSignal::new(String::new());
    Effect::new(move |_| match act.value().get() {
        Some(Ok(WatchOutcome::Done(m))) => {
            confirming.set(None);
            manage.notice.set(Some(m));
            manage.acted.update(|v| *v += 1);
        }
        Some(Ok(WatchOutcome::Confirm { reasons, mismatch, .. })) => confirming.set(Some((reasons, mismatch))),
        _ => {}
    });
    let (label, testid) = if start { ("Start ingesting", "dlq-start") } else { ("Stop ingesting", "dlq-stop") };
    let title = if start {
        "Every running ingester starts consuming this queue within a few seconds"
    } else {
        "Ingesters close their consumer; what the queue holds stays in RabbitMQ"
    };
    let q = queue.clone();
    let (q2, q3) = (queue.clone(), queue);
    view! {
        <button class="btn text-xs" type="button" data-testid=testid title=title
            disabled=move || act.pending().get()
            on:click=move |_| { act.dispatch(DlWatch { queue: q.clone(), start, confirm: None }); }>
            {label}
        </button>
        {move || act.value().get().and_then(|r| r.err()).map(|err| view! { <ErrorBox err /> })}
        {move || confirming.get().map(|(reasons, mismatch)| {
            let (q, name, hint) = (q2.clone(), q3.clone(), q3.clone());
            view! {
                <div class="card p-2 mt-1 text-xs w-full" data-testid="dlq-start-check">
                    <p class="font-medium text-amber-800 dark:text-amber-300">"This may not be a dead-letter queue: ingesting it takes its messages."</p>
                    <ul class="list-disc ml-4" data-testid="dlq-start-why">
                        {reasons.into_iter().map(|r| view! { <li>{r}</li> }).collect_view()}
                    </ul>
                    <label class="block mt-1">"Type the queue name to start anyway"
                        <input class="input text-xs font-mono block w-full" data-testid="dlq-start-name" placeholder=hint
                            prop:value=move || typed.get() on:input=move |ev| typed.set(event_target_value(&ev)) />
                    </label>
                    {mismatch.then(|| view! { <p class="text-red-700 dark:text-red-400">"That is not the queue's name."</p> })}
                    <div class="flex gap-2 mt-1">
                        <button class="btn text-xs" type="button" data-testid="dlq-start-confirm"
                            disabled=move || act.pending().get() || typed.get().trim() != name
                            on:click=move |_| { act.dispatch(DlWatch { queue: q.clone(), start: true, confirm: Some(typed.get_untracked()) }); }>
                            "Start ingesting anyway"
                        </button>
                        <button class="btn text-xs" type="button" on:click=move |_| { confirming.set(None); typed.set(String::new()); }>
                            "Cancel"
                        </button>
                    </div>
                </div>
            }
        })}
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
