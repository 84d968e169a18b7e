//! Archive picked dead letters, or freeze everything matching the filter and confirm; on the
//! archived list, restore picked ones, and (admins) purge archived ones past a retention.

use std::collections::BTreeSet;

use leptos::prelude::*;

use super::api::{DlArchive, DlExecuteArchive, DlFreezeArchive, DlPurge, DlPurgeCount, DlQuery, DlRestore};
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

/// The archived list's actions: restore picked messages (operators); purge archived messages
/// older than N days that match the filter (admins), after seeing how many.
#[component]
pub fn RestoreBar(
    q: DlQuery,
    selected: RwSignal<BTreeSet<i64>>,
    acted: RwSignal<u32>,
    notice: RwSignal<Option<String>>,
    is_admin: bool,
) -> impl IntoView {
    let restore = ServerAction::<DlRestore>::new();
    let count = ServerAction::<DlPurgeCount>::new();
    let purge = ServerAction::<DlPurge>::new();
    let days = RwSignal::new("30".to_string());
    Effect::new(move |_| {
        if let Some(Ok(n)) = restore.value().get() {
            notice.set(Some(format!("{n} messages restored to awaiting triage.")));
            selected.set(BTreeSet::new());
            acted.update(|v| *v += 1);
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(n)) = purge.value().get() {
            notice.set(Some(format!("{n} archived messages purged.")));
            count.value().set(None);
            acted.update(|v| *v += 1);
        }
    });
    let none_selected = move || selected.with(|s| s.is_empty());
    let q2 = q.clone();
    view! {
        <div class="card px-3 py-2 mb-3 flex flex-wrap items-center gap-2 text-sm" data-testid="dl-archived-actions">
            <span class="muted">{move || format!("{} selected", selected.with(|s| s.len()))}</span>
            <button class="btn" disabled=none_selected on:click=move |_| {
                notice.set(None);
                restore.dispatch(DlRestore { ids: selected.get_untracked().into_iter().collect() });
            }>"Restore selected"</button>
            {is_admin.then(|| view! {
                <span class="ml-auto flex flex-wrap items-center gap-2">
                    <label class="flex items-center gap-1">"retention (days)"
                        <input class="input w-16" aria-label="purge retention in days" inputmode="numeric"
                            prop:value=move || days.get() on:input=move |ev| days.set(event_target_value(&ev)) />
                    </label>
                    <button class="btn" on:click=move |_| {
                        notice.set(None);
                        count.dispatch(DlPurgeCount { q: q.clone(), older_than_days: days.get_untracked() });
                    }>{move || format!("Purge archived older than {} days (matching the filter)…", days.get().trim())}</button>
                </span>
            })}
        </div>
        {move || restore.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mb-2"><ErrorBox err /></div> })}
        {move || count.value().get().map(|r| match r {
            Err(err) => view! { <div class="mb-2"><ErrorBox err /></div> }.into_any(),
            Ok(c) if c.count == 0 => view! {
                <p class="mb-2 text-sm muted" data-testid="purge-none">{format!("No archived messages older than {} days match the filter.", c.days)}</p>
            }.into_any(),
            Ok(c) => {
                let q = q2.clone();
                let days = c.days.to_string();
                view! {
                    <div role="dialog" class="card border-red-400 px-3 py-2 mb-3 text-sm flex flex-wrap items-center gap-3" data-testid="confirm-purge">
                        <span>"This will permanently delete "<b data-testid="purge-count">{c.text.clone()}</b>
                            {format!(" archived messages ingested more than {} days ago that match the filter, with their replay items and edits. This cannot be undone.", c.days)}</span>
                        <span class="flex gap-2 whitespace-nowrap">
                            <button class="btn btn-danger" on:click=move |_| {
                                purge.dispatch(DlPurge { q: q.clone(), older_than_days: days.clone() });
                            }>"Delete permanently"</button>
                            <button class="btn" on:click=move |_| count.value().set(None)>"Cancel"</button>
                        </span>
                    </div>
                }.into_any()
            }
        })}
        {move || purge.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mb-2"><ErrorBox err /></div> })}
    }
}
