//! Queue contracts: the list (console and revenant.toml), and for operators a form to set
//! one and a button to delete a console one. The server decides who may; the form is only
//! hidden from those who may not.

use leptos::prelude::*;

use super::api::{ContractView, ContractsView, DeleteContract, SetContract};
use crate::layout::ErrorBox;
use crate::widgets::{Pill, Time};

const LEVELS: &[&str] = &["critical", "standard", "disposable"];

#[component]
pub fn Contracts(
    list: ContractsView,
    can_operate: bool,
    acted: RwSignal<u32>,
    notice: RwSignal<Option<String>>,
) -> impl IntoView {
    let delete = ServerAction::<DeleteContract>::new();
    Effect::new(move |_| {
        if let Some(Ok(c)) = delete.value().get() {
            notice.set(Some(format!("Contract {} deleted.", c.pattern)));
            acted.update(|v| *v += 1);
        }
    });
    let empty = list.contracts.is_empty();
    view! {
        <div tabindex="0" class="card overflow-x-auto mb-3">
            <table class="tbl" data-testid="topology-contracts">
                <thead><tr>
                    <th>"Pattern"</th><th>"Level"</th><th>"Set in"</th><th>"Note"</th><th>"By"</th><th></th>
                </tr></thead>
                <tbody>
                    {list.contracts.into_iter().map(|c| view! { <ContractRow c can_operate delete /> }).collect_view()}
                </tbody>
            </table>
            {empty.then(|| view! {
                <p class="p-3 muted text-sm">"No contracts yet: every queue is held to the standard level."</p>
            })}
        </div>
        {move || delete.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mb-2"><ErrorBox err /></div> })}
        {can_operate.then(|| view! { <ContractForm acted notice /> })}
    }
}

#[component]
fn ContractRow(c: ContractView, can_operate: bool, delete: ServerAction<DeleteContract>) -> impl IntoView {
    let origin = if c.origin == "console" {
        "console".to_string()
    } else if c.overridden {
        "from revenant.toml (replaced by the console contract)".to_string()
    } else {
        "from revenant.toml".to_string()
    };
    let by = c.created_by.map(|u| view! { {u}{c.updated_at.map(|at| view! { ", "<Time at /> })} });
    let button = c.id.filter(|_| can_operate).map(|id| {
        view! {
            <button class="btn" on:click=move |_| { delete.dispatch(DeleteContract { id }); }>"Delete"</button>
        }
    });
    view! {
        <tr class=("opacity-60", c.overridden)>
            <td class="font-mono text-xs break-all">{c.pattern}</td>
            <td><Pill text=c.level /></td>
            <td class="text-xs">{origin}</td>
            <td class="text-xs break-words max-w-sm">{c.note}</td>
            <td class="text-xs muted whitespace-nowrap">{by}</td>
            <td>{button}</td>
        </tr>
    }
}

#[component]
fn ContractForm(acted: RwSignal<u32>, notice: RwSignal<Option<String>>) -> impl IntoView {
    let set = ServerAction::<SetContract>::new();
    let pattern = RwSignal::new(String::new());
    let level = RwSignal::new("critical".to_string());
    let note = RwSignal::new(String::new());
    Effect::new(move |_| {
        if let Some(Ok(c)) = set.value().get() {
            notice.set(Some(format!("Contract {} set to {}.", c.pattern, c.level)));
            pattern.set(String::new());
            note.set(String::new());
            acted.update(|v| *v += 1);
        }
    });
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        notice.set(None);
        let n = note.get_untracked();
        set.dispatch(SetContract {
            pattern: pattern.get_untracked(),
            level: level.get_untracked(),
            note: if n.trim().is_empty() { None } else { Some(n) },
        });
    };
    view! {
        <form class="card px-3 py-2 flex flex-wrap items-end gap-2 text-sm" on:submit=submit data-testid="contract-form">
            <label class="flex flex-col gap-0.5">
                "Queue name or * glob"
                <input class="input w-56 font-mono" placeholder="orders.*" required
                    prop:value=move || pattern.get() on:input=move |ev| pattern.set(event_target_value(&ev)) />
            </label>
            <label class="flex flex-col gap-0.5">
                "Level"
                <select class="input" prop:value=move || level.get() on:change=move |ev| level.set(event_target_value(&ev))>
                    {LEVELS.iter().map(|l| view! { <option value=*l>{*l}</option> }).collect_view()}
                </select>
            </label>
            <label class="flex flex-col gap-0.5 grow">
                "Note (why)"
                <input class="input" placeholder="payments: losing one is an incident"
                    prop:value=move || note.get() on:input=move |ev| note.set(event_target_value(&ev)) />
            </label>
            <button class="btn btn-primary" type="submit" disabled=move || set.pending().get()>"Set contract"</button>
        </form>
        {move || set.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mt-2"><ErrorBox err /></div> })}
    }
}
