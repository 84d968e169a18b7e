//! Users (admins only): add a user, change a role, disable or enable, set a new password.
//! Every change is audited in the same transaction; an admin cannot lock themselves out. A
//! change of role, a disable or enable and a new password end the user's sessions.

use crate::layout::{ErrorBox, PageTitle};
use crate::widgets::{Pill, Time};
use leptos::prelude::*;

pub mod api;
use api::*;

#[component]
pub fn UsersPage() -> impl IntoView {
    let change = ServerAction::<UsersChange>::new();
    let users = Resource::new(move || change.version().get(), |_| users_list());
    let name = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let role = RwSignal::new(types::Role::Viewer.as_str().to_string());
    let send = move |c: &str, u: String, r: Option<String>, p: Option<String>| {
        change.dispatch(UsersChange { change: c.into(), username: u, role: r, password: p });
    };
    view! {
        <PageTitle title="Users" />
        {move || change.value().get().map(|r| match r {
            Ok(m) => view! { <p role="status" class="mb-2 text-sm text-emerald-700 dark:text-emerald-400">{m}</p> }.into_any(),
            Err(err) => view! { <div class="mb-2"><ErrorBox err /></div> }.into_any(),
        })}
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match users.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(list) => view! {
                        <div class="card mb-4">
                            <table class="tbl" data-testid="users">
                                <thead><tr><th>"User"</th><th>"Role"</th><th>"State"</th><th>"Created"</th><th>"Change"</th></tr></thead>
                                <tbody>
                                    {list.into_iter().map(|u| {
                                        let (n1, n2) = (u.username.clone(), u.username.clone());
                                        let toggle = if u.disabled { "enable" } else { "disable" };
                                        view! {
                                            <tr>
                                                <td>{u.username.clone()}</td>
                                                <td><Pill text=u.role /></td>
                                                <td>{if u.disabled { "disabled" } else { "active" }}</td>
                                                <td class="text-xs muted"><Time at=u.created_at /></td>
                                                <td class="flex gap-1">
                                                    <select class="input" aria-label=format!("role of {}", u.username)
                                                        on:change=move |ev| send("role", n1.clone(), Some(event_target_value(&ev)), None)>
                                                        {types::Role::ALL.map(|r| view! { <option value=r.as_str() selected=u.role == r>{r.as_str()}</option> }).collect_view()}
                                                    </select>
                                                    <button class="btn" on:click=move |_| send(toggle, n2.clone(), None, None)>{toggle}</button>
                                                </td>
                                            </tr>
                                        }
                                    }).collect_view()}
                                </tbody>
                            </table>
                        </div>
                    }.into_any(),
                }
            })}
        </Suspense>
        <div class="card p-3 flex flex-wrap gap-2 items-end text-sm" data-testid="add-user">
            <label class="flex flex-col gap-0.5">"User name"<input class="input" prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev)) /></label>
            <label class="flex flex-col gap-0.5">"Password (10+ characters)"<input class="input" type="password" autocomplete="new-password" prop:value=move || password.get() on:input=move |ev| password.set(event_target_value(&ev)) /></label>
            <label class="flex flex-col gap-0.5">"Role"
                <select class="input" on:change=move |ev| role.set(event_target_value(&ev))>
                    {types::Role::ALL.map(|r| view! { <option value=r.as_str()>{r.as_str()}</option> }).collect_view()}
                </select>
            </label>
            <button class="btn btn-primary" on:click=move |_| send("add", name.get_untracked(), Some(role.get_untracked()), Some(password.get_untracked()))>"Add user"</button>
            <button class="btn" title="Sets this user's password and ends their sessions" on:click=move |_| send("password", name.get_untracked(), None, Some(password.get_untracked()))>"Set password"</button>
        </div>
    }
}
