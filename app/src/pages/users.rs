//! Users (admins only): add a user, change a role, disable or enable, set a new password.
//! Every change is audited in the same transaction; an admin cannot lock themselves out. A
//! change of role, a disable or enable and a new password end the user's sessions.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::layout::{ErrorBox, PageTitle};
use crate::widgets::Pill;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UserView {
    pub username: String,
    pub role: String,
    pub disabled: bool,
    pub created_at: String,
}

#[server(prefix = "/api", endpoint = "users/list")]
pub async fn users_list() -> Result<Vec<UserView>, AppError> {
    crate::guard::require(engine::auth::Role::Admin)?;
    let state = crate::state::app_state()?;
    Ok(engine::auth::list_users(&state.pool)
        .await?
        .into_iter()
        .map(|u| UserView {
            username: u.username,
            role: u.role,
            disabled: u.disabled,
            created_at: crate::format::time(u.created_at),
        })
        .collect())
}

/// `change` is `add`, `role`, `disable` / `enable` or `password`.
#[server(prefix = "/api", endpoint = "users/change")]
pub async fn users_change(
    change: String,
    username: String,
    role: Option<String>,
    password: Option<String>,
) -> Result<String, AppError> {
    use engine::auth::{self, AuthError, Role};
    let me = crate::guard::require(Role::Admin)?;
    let state = crate::state::app_state()?;
    let username = username.trim().to_string();
    let parse_role = |r: &Option<String>| {
        r.as_deref()
            .and_then(Role::parse)
            .ok_or_else(|| AppError::Invalid("role: choose viewer, operator or admin".into()))
    };
    if username == me.username && !matches!(change.as_str(), "add" | "password") {
        return Err(AppError::Invalid("you cannot change your own role or disable yourself".into()));
    }
    let mut tx = state.pool.begin().await?;
    let (action, done) = match change.as_str() {
        "add" => {
            let role = parse_role(&role)?;
            match auth::create_user(&mut *tx, &username, password.as_deref().unwrap_or(""), role).await {
                Ok(_) => ("user.add", format!("added {username} as {}", role.as_str())),
                Err(e @ (AuthError::BadUsername | AuthError::WeakPassword | AuthError::TooLong)) => {
                    return Err(AppError::Invalid(e.to_string()));
                }
                Err(e @ AuthError::Exists(_)) => return Err(AppError::Conflict(e.to_string())),
                Err(e) => return Err(AppError::internal(e)),
            }
        }
        "role" => {
            let role = parse_role(&role)?;
            if !auth::set_role(&mut tx, &username, role).await? {
                return Err(AppError::NotFound(format!("no user named {username}")));
            }
            ("user.set_role", format!("{username} is now {}", role.as_str()))
        }
        "disable" | "enable" => {
            let off = change == "disable";
            if !auth::set_disabled(&mut tx, &username, off).await? {
                return Err(AppError::NotFound(format!("no user named {username}")));
            }
            (if off { "user.disable" } else { "user.enable" }, format!("{username} {}d", change))
        }
        "password" => match auth::set_password(&mut tx, &username, password.as_deref().unwrap_or("")).await {
            Ok(true) => ("user.set_password", format!("new password set for {username}; their sessions ended")),
            Ok(false) => return Err(AppError::NotFound(format!("no user named {username}"))),
            Err(e @ (AuthError::WeakPassword | AuthError::TooLong)) => return Err(AppError::Invalid(e.to_string())),
            Err(e) => return Err(AppError::internal(e)),
        },
        other => return Err(AppError::Invalid(format!("unknown change `{other}`"))),
    };
    let ip = crate::guard::client_ip();
    engine::audit::record(
        &mut *tx,
        engine::audit::Entry {
            actor: &me,
            source_ip: ip.as_deref(),
            action,
            target: Some(username.clone()),
            filter: None,
            item_count: 1,
            outcome: "ok",
            detail: role.map(|r| serde_json::json!({ "role": r })),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(done)
}

#[component]
pub fn UsersPage() -> impl IntoView {
    let change = ServerAction::<UsersChange>::new();
    let users = Resource::new(move || change.version().get(), |_| users_list());
    let name = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let role = RwSignal::new("viewer".to_string());
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
                                                <td><Pill text=u.role.clone() /></td>
                                                <td>{if u.disabled { "disabled" } else { "active" }}</td>
                                                <td class="text-xs muted">{u.created_at}</td>
                                                <td class="flex gap-1">
                                                    <select class="input" aria-label=format!("role of {}", u.username)
                                                        on:change=move |ev| send("role", n1.clone(), Some(event_target_value(&ev)), None)>
                                                        {["viewer", "operator", "admin"].map(|r| view! { <option value=r selected=u.role == r>{r}</option> }).collect_view()}
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
                    <option value="viewer">"viewer"</option><option value="operator">"operator"</option><option value="admin">"admin"</option>
                </select>
            </label>
            <button class="btn btn-primary" on:click=move |_| send("add", name.get_untracked(), Some(role.get_untracked()), Some(password.get_untracked()))>"Add user"</button>
            <button class="btn" title="Sets this user's password and ends their sessions" on:click=move |_| send("password", name.get_untracked(), None, Some(password.get_untracked()))>"Set password"</button>
        </div>
    }
}
