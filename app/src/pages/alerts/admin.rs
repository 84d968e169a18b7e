//! A rule's admin controls: send a test to its webhook, silence for a while with a reason,
//! unsilence, and delete behind a confirm step.

use leptos::prelude::*;
use leptos_router::{NavigateOptions, hooks::use_navigate};

use super::api::{AlertsDelete, AlertsSilence, AlertsTest, AlertsUnsilence, Outcome};
use super::form::hydrated;
use crate::layout::ErrorBox;

#[component]
pub fn SilenceBox(id: i64, silenced: bool, changed: RwSignal<u32>, notice: RwSignal<Option<String>>) -> impl IntoView {
    let silence = ServerAction::<AlertsSilence>::new();
    let unsilence = ServerAction::<AlertsUnsilence>::new();
    let ready = hydrated();
    let errors = Memo::new(move |_| match silence.value().get() {
        Some(Ok(Outcome::Invalid(errs))) => errs,
        _ => Vec::new(),
    });
    Effect::new(move |_| {
        if let Some(Ok(Outcome::Saved { .. })) = silence.value().get() {
            notice.set(Some("Rule silenced: it is still evaluated, but no webhook is sent.".into()));
            changed.update(|n| *n += 1);
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(())) = unsilence.value().get() {
            notice.set(Some("Rule unsilenced.".into()));
            changed.update(|n| *n += 1);
        }
    });
    let err = move |field: &'static str| {
        move || {
            errors.with(|es| es.iter().find(|e| e.field == field).map(|e| e.message.clone())).map(|m| {
                view! { <p id=format!("silence-{field}-error") class="text-xs text-red-700 dark:text-red-300">{m}</p> }
            })
        }
    };
    view! {
        <section class="card p-3 text-sm" data-testid="silence" aria-label="Silence">
            <h2 class="font-semibold mb-2">"Silence"</h2>
            <ActionForm action=silence attr:class="flex flex-wrap items-start gap-2">
                <input type="hidden" name="id" value=id.to_string() />
                <div class="flex flex-col gap-0.5">
                    <label for="silence-amount">"For"</label>
                    <div class="flex gap-1">
                        <input id="silence-amount" class="input w-20" name="amount" value="1" inputmode="numeric"
                            aria-describedby="silence-until-error" />
                        <select class="input" name="unit" aria-label="unit">
                            <option value="hours">"hours"</option>
                            <option value="minutes">"minutes"</option>
                        </select>
                    </div>
                    {err("until")}
                </div>
                <div class="flex flex-col gap-0.5 grow">
                    <label for="silence-reason">"Reason"</label>
                    <input id="silence-reason" class="input" name="reason" placeholder="maintenance of the orders consumer"
                        aria-describedby="silence-reason-error" />
                    {err("reason")}
                </div>
                <button class="btn self-end" type="submit" disabled=move || !ready.get() || silence.pending().get()>"Silence"</button>
            </ActionForm>
            {silenced.then(|| view! {
                <button class="btn mt-2" disabled=move || !ready.get() || unsilence.pending().get()
                    on:click=move |_| { unsilence.dispatch(AlertsUnsilence { id }); }>"Unsilence now"</button>
            })}
            {move || silence.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mt-2"><ErrorBox err /></div> })}
            {move || unsilence.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mt-2"><ErrorBox err /></div> })}
        </section>
    }
}

#[component]
pub fn DeleteBox(id: i64, name: String) -> impl IntoView {
    let delete = ServerAction::<AlertsDelete>::new();
    let confirming = RwSignal::new(false);
    let ready = hydrated();
    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(())) = delete.value().get() {
            navigate("/alerts", NavigateOptions::default());
        }
    });
    view! {
        <section class="card p-3 text-sm" data-testid="delete" aria-label="Delete">
            {move || if confirming.get() {
                view! {
                    <div role="dialog" class="flex flex-wrap items-center gap-2">
                        <span>"Delete “"{name.clone()}"” with its history and delivery records? This cannot be undone."</span>
                        <button class="btn btn-danger" disabled=move || delete.pending().get()
                            on:click=move |_| { delete.dispatch(AlertsDelete { id }); }>"Delete rule"</button>
                        <button class="btn" on:click=move |_| confirming.set(false)>"Cancel"</button>
                    </div>
                }.into_any()
            } else {
                view! { <button class="btn" disabled=move || !ready.get() on:click=move |_| confirming.set(true)>"Delete…"</button> }.into_any()
            }}
            {move || delete.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mt-2"><ErrorBox err /></div> })}
        </section>
    }
}

/// "Send test": one request to the rule's webhook now, and what came back.
#[component]
pub fn TestBox(id: i64) -> impl IntoView {
    let test = ServerAction::<AlertsTest>::new();
    view! {
        <section class="card p-3 text-sm" data-testid="send-test" aria-label="Send test">
            <div class="flex items-center gap-2">
                <button class="btn" type="button" disabled=move || test.pending().get()
                    on:click=move |_| { test.dispatch(AlertsTest { id }); }>"Send test"</button>
                <span class="muted text-xs">"one request to the webhook now, marked as a test"</span>
            </div>
            {move || test.value().get().map(|r| match r {
                Ok(m) => view! { <p class="mt-2 text-xs break-all" role="status" data-testid="send-test-result">{m}</p> }.into_any(),
                Err(err) => view! { <div class="mt-2"><ErrorBox err /></div> }.into_any(),
            })}
        </section>
    }
}
