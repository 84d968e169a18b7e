//! The users page's server functions (admins only) and wire types.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UserView {
    pub username: String,
    pub role: types::Role,
    pub disabled: bool,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

#[server(prefix = "/api", endpoint = "users/list")]
pub async fn users_list() -> Result<Vec<UserView>, AppError> {
    crate::guard::require(engine::auth::Role::Admin)?;
    let state = crate::state::app_state()?;
    Ok(engine::auth::list_users(&state.pool)
        .await?
        .into_iter()
        .map(|u| UserView { username: u.username, role: u.role, disabled: u.disabled, created_at: u.created_at })
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
