//! Archive picked dead letters, or freeze everything matching the filter and confirm.

use std::collections::BTreeSet;

use leptos::prelude::*;

use super::api::{DlArchive, DlExecuteArchive, DlFreezeArchive, DlQuery};
use crate::layout::ErrorBox;

#[component]
pub fn ArchiveBar(
    q: DlQuery,
    selected: RwSignal<BTreeSet<i64>>,
    acted: RwSignal<u32>,
    notice: RwSignal<Option<String>>,
) -> impl IntoView {
    let archive = ServerAction::<DlArchive>::new();
    let freeze = ServerAction::<DlFreezeArchive>::new();
    let execute = ServerAction::<DlExecuteArchive>::new();
    let reason = RwSignal::new(String::new());
    Effect::new(move |_| {
        if let Some(Ok(n)) = archive.value().get() {
            notice.set(Some(format!("{n} messages archived.")));
            selected.set(BTreeSet::new());
            acted.update(|v| *v += 1);
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(n)) = execute.value().get() {
            notice.set(Some(format!("{n} messages archived.")));
            freeze.value().set(None);
            acted.update(|v| *v += 1);
        }
    });
    let none_selected = move || selected.with(|s| s.is_empty());
    view! {
        <div class="card px-3 py-2 mb-3 flex flex-wrap items-center gap-2 text-sm" data-testid="dl-actions">
            <span class="muted">{move || format!("{} selected", selected.with(|s| s.len()))}</span>
            <input class="input w-72" placeholder="reason (needed to archive)" aria-label="archive reason"
                prop:value=move || reason.get() on:input=move |ev| reason.set(event_target_value(&ev)) />
            <button class="btn" disabled=none_selected on:click=move |_| {
                archive.dispatch(DlArchive { ids: selected.get_untracked().into_iter().collect(), reason: reason.get_untracked() });
            }>"Archive selected"</button>
            <button class="btn" on:click=move |_| {
                notice.set(None);
                freeze.dispatch(DlFreezeArchive { q: q.clone(), reason: reason.get_untracked() });
            }>"Archive all matching…"</button>
        </div>
        {move || archive.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mb-2"><ErrorBox err /></div> })}
        {move || freeze.value().get().map(|r| match r {
            Err(err) => view! { <div class="mb-2"><ErrorBox err /></div> }.into_any(),
            Ok(f) => {
                let id = f.selection_id.clone();
                view! {
                    <div role="dialog" class="card border-amber-400 px-3 py-2 mb-3 text-sm flex items-center gap-3" data-testid="confirm-bulk">
                        <span>"This will archive "<b data-testid="frozen-count">{f.count}</b>" messages, frozen now: messages arriving later are not included."</span>
                        <button class="btn btn-primary" on:click=move |_| { execute.dispatch(DlExecuteArchive { selection_id: id.clone() }); }>"Confirm"</button>
                        <button class="btn" on:click=move |_| freeze.value().set(None)>"Cancel"</button>
                    </div>
                }.into_any()
            }
        })}
        {move || execute.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mb-2"><ErrorBox err /></div> })}
    }
}
