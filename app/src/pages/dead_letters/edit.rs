//! "Edit before replay" on a dead letter's page: operators save a new version of its body
//! and headers; everyone sees the latest edit's diff against the original, which is kept.
//! Replays of the message (the "Replay this message…" panel) then send the edit.

use leptos::prelude::*;

use super::api::{DlEdit, EditView, EditsView};
use crate::auth::CallerAnswer;
use crate::error::AppError;
use crate::layout::ErrorBox;
use crate::widgets::Time;

/// `edits` and `caller` are made by the page, outside its Suspense (`detail.rs`); a save
/// bumps `saved`, which loads `edits` again.
#[component]
pub fn EditPanel(
    id: i64,
    edits: Resource<Result<EditsView, AppError>>,
    caller: Resource<CallerAnswer>,
    saved: RwSignal<u32>,
) -> impl IntoView {
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                let can = matches!(caller.await, Ok(Some(ref c)) if c.can_operate());
                match edits.await {
                    Err(err) => view! { <ErrorBox err /> }.into_any(),
                    Ok(v) => view! { <EditCard v can id saved /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn EditCard(v: EditsView, can: bool, id: i64, saved: RwSignal<u32>) -> impl IntoView {
    let open = RwSignal::new(false);
    let editable = v.body.is_some();
    let body = RwSignal::new(v.body.clone().unwrap_or_default());
    let headers = RwSignal::new(v.headers.clone());
    let note = RwSignal::new(String::new());
    let save = ServerAction::<DlEdit>::new();
    Effect::new(move |_| {
        if let Some(Ok(_)) = save.value().get() {
            open.set(false);
            saved.update(|n| *n += 1);
        }
    });
    let status = match &v.latest {
        Some(e) => format!("Replays send edit #{} (header x-revenant-edited: {}).", e.id, e.id),
        None => "Not edited: replays send the message as it was received.".to_string(),
    };
    let body_note = v.body_note.clone();
    view! {
        <div class="card p-2 text-sm flex flex-col gap-2" data-testid="edit-card">
            <div class="flex flex-wrap items-center gap-2">
                <h2 class="font-semibold">"Edit before replay"</h2>
                <span class="muted" data-testid="edit-status">{status}</span>
                {(can && v.locked.is_none()).then(|| view! {
                    <button class="btn ml-auto" on:click=move |_| open.update(|o| *o = !*o)>
                        {move || if open.get() { "Close the editor" } else { "Edit before replay…" }}
                    </button>
                })}
            </div>
            {v.locked.clone().map(|m| view! { <p class="muted">{m}</p> })}
            <Show when=move || open.get()>
                <div class="flex flex-col gap-2" data-testid="edit-form">
                    {if editable {
                        view! {
                            <label class="flex flex-col gap-1">"Body"
                                <textarea class="input font-mono text-xs h-48" aria-label="edited body" spellcheck="false"
                                    prop:value=move || body.get() on:input=move |ev| body.set(event_target_value(&ev))></textarea>
                            </label>
                        }.into_any()
                    } else {
                        view! { <p class="muted">{body_note.clone()}" Only the headers can be changed."</p> }.into_any()
                    }}
                    <label class="flex flex-col gap-1">"Headers (plain JSON: {\"name\": value})"
                        <textarea class="input font-mono text-xs h-40" aria-label="edited headers" spellcheck="false"
                            prop:value=move || headers.get() on:input=move |ev| headers.set(event_target_value(&ev))></textarea>
                    </label>
                    <p class="muted text-xs">
                        "A header left as it is keeps its AMQP type. A new or changed value is sent as: string → longstr, "
                        "whole number → i64, other number → f64, true/false → bool, null → void, object → table, list → array. "
                        "Leave a header out to remove it. The message id and the other properties stay as received."
                    </p>
                    <input class="input" placeholder="note (why this edit)" aria-label="edit note"
                        prop:value=move || note.get() on:input=move |ev| note.set(event_target_value(&ev)) />
                    <div>
                        <button class="btn btn-primary" on:click=move |_| {
                            save.dispatch(DlEdit {
                                id,
                                body: editable.then(|| body.get_untracked()),
                                headers: headers.get_untracked(),
                                note: note.get_untracked(),
                            });
                        }>"Save edit"</button>
                    </div>
                    {move || save.value().get().and_then(|r| r.err()).map(|err| view! { <ErrorBox err /> })}
                </div>
            </Show>
            {v.latest.map(|e| view! { <EditDiff e /> })}
        </div>
    }
}

/// The latest edit against the original: body lines removed (red) and added (green), and
/// the headers added, removed or changed. Every string is rendered as text.
#[component]
fn EditDiff(e: EditView) -> impl IntoView {
    let who = format!("Edit #{} by {} at ", e.id, e.edited_by);
    let at = e.edited_at;
    let lines = e.body_lines;
    let has_lines = !lines.is_empty();
    let header_rows = e.headers;
    let no_header_change = header_rows.is_empty();
    view! {
        <div class="flex flex-col gap-1 border-t border-slate-200 dark:border-slate-800 pt-2" data-testid="edit-diff">
            <p>{who}<Time at />{e.note.map(|n| view! { <span class="muted">" — "{n}</span> })}</p>
            <p class="muted" data-testid="body-summary">{e.body_summary}</p>
            {has_lines.then(|| view! {
                <div class="font-mono text-xs whitespace-pre-wrap break-all border border-slate-200 dark:border-slate-800 rounded max-h-96 overflow-auto" tabindex="0" data-testid="body-diff">
                    {lines.into_iter().map(|l| {
                        let (class, mark) = match l.kind.as_str() {
                            "removed" => ("px-1 bg-red-100 text-red-900 dark:bg-red-950 dark:text-red-200", "- "),
                            "added" => ("px-1 bg-emerald-100 text-emerald-900 dark:bg-emerald-950 dark:text-emerald-200", "+ "),
                            "folded" => ("px-1 muted italic", ""),
                            _ => ("px-1", "  "),
                        };
                        view! { <div class=class data-kind=l.kind>{mark}{l.text}</div> }
                    }).collect_view()}
                </div>
            })}
            {if no_header_change {
                view! { <p class="muted">"headers unchanged"</p> }.into_any()
            } else {
                view! {
                    <table class="tbl" data-testid="header-diff">
                        <thead><tr><th>"Header"</th><th>"Change"</th><th>"Original"</th><th>"Edited"</th></tr></thead>
                        <tbody>
                            {header_rows.into_iter().map(|h| view! {
                                <tr>
                                    <td class="font-mono text-xs">{h.name}</td>
                                    <td class="text-xs">{h.change}</td>
                                    <td class="font-mono text-xs break-all text-red-800 dark:text-red-300">{h.before}</td>
                                    <td class="font-mono text-xs break-all text-emerald-800 dark:text-emerald-300">{h.after}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </div>
    }
}
