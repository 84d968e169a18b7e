//! The outbox action bar: retry / archive the picked rows, or freeze everything matching the
//! filter, see how many rows that is, and confirm.

use std::collections::BTreeSet;

use leptos::prelude::*;

use super::api::{OutboxAct, OutboxExecute, OutboxFreeze, OutboxQuery};
use crate::layout::ErrorBox;

#[component]
pub fn ActionBar(
    source: String,
    q: OutboxQuery,
    selected: RwSignal<BTreeSet<String>>,
    acted: RwSignal<u32>,
    can_archive: bool,
    notice: RwSignal<Option<String>>,
) -> impl IntoView {
    let act = ServerAction::<OutboxAct>::new();
    let freeze = ServerAction::<OutboxFreeze>::new();
    let execute = ServerAction::<OutboxExecute>::new();
    let reason = RwSignal::new(String::new());
    let message = notice;

    Effect::new(move |_| {
        if let Some(Ok(n)) = act.value().get() {
            message.set(Some(format!("{n} rows changed.")));
            selected.set(BTreeSet::new());
            acted.update(|v| *v += 1);
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(n)) = execute.value().get() {
            message.set(Some(format!("{n} rows changed.")));
            freeze.value().set(None);
            acted.update(|v| *v += 1);
        }
    });

    let src1 = source.clone();
    let on_selected = move |action: &'static str| {
        let ids: Vec<String> = selected.get_untracked().into_iter().collect();
        let r = reason.get_untracked();
        act.dispatch(OutboxAct {
            source: src1.clone(),
            action: action.into(),
            ids,
            reason: if r.trim().is_empty() { None } else { Some(r) },
        });
    };
    let on_selected2 = on_selected.clone();
    let q2 = q.clone();
    let on_all = move |action: &'static str| {
        let r = reason.get_untracked();
        message.set(None);
        freeze.dispatch(OutboxFreeze {
            q: q2.clone(),
            action: action.into(),
            reason: if r.trim().is_empty() { None } else { Some(r) },
        });
    };
    let on_all2 = on_all.clone();
    let none_selected = move || selected.with(|s| s.is_empty());

    view! {
        <div class="card px-3 py-2 mb-3 flex flex-wrap items-center gap-2 text-sm" data-testid="outbox-actions">
            <span class="muted">{move || format!("{} selected", selected.with(|s| s.len()))}</span>
            <button class="btn" disabled=none_selected on:click=move |_| on_selected("retry")>"Retry selected"</button>
            {can_archive.then(|| view! {
                <input class="input w-64" placeholder="reason (needed to archive)" aria-label="archive reason"
                    prop:value=move || reason.get() on:input=move |ev| reason.set(event_target_value(&ev)) />
                <button class="btn" disabled=none_selected on:click=move |_| on_selected2("archive")>"Archive selected"</button>
            })}
            <span class="mx-2 muted">"|"</span>
            <button class="btn" on:click=move |_| on_all("retry")>"Retry all matching…"</button>
            {can_archive.then(|| view! {
                <button class="btn" on:click=move |_| on_all2("archive")>"Archive all matching…"</button>
            })}
        </div>
        {move || act.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mb-2"><ErrorBox err /></div> })}
        {move || freeze.value().get().map(|r| match r {
            Err(err) => view! { <div class="mb-2"><ErrorBox err /></div> }.into_any(),
            Ok(f) if f.count == 0 => view! { <p class="mb-2 text-sm">"Nothing matches: no rows to act on."</p> }.into_any(),
            Ok(f) => {
                let id = f.selection_id.clone();
                view! {
                    <div role="dialog" class="card border-amber-400 px-3 py-2 mb-3 text-sm flex items-center gap-3" data-testid="confirm-bulk">
                        <span>
                            "This will "<b>{f.action.clone()}</b>" "<b data-testid="frozen-count">{f.count}</b>
                            " rows of "{f.source.clone()}", frozen now: rows that match later are not included."
                        </span>
                        <button class="btn btn-primary" on:click=move |_| { execute.dispatch(OutboxExecute { selection_id: id.clone() }); }>"Confirm"</button>
                        <button class="btn" on:click=move |_| freeze.value().set(None)>"Cancel"</button>
                    </div>
                }.into_any()
            }
        })}
        {move || execute.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mb-2"><ErrorBox err /></div> })}
    }
}
