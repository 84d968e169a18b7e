//! `revenant user …`: manage local users from the command line (the first admin comes from
//! here). Every change is audited as `cli:<login>`, in the same transaction as the change.

use anyhow::{Context, bail};
use clap::{Subcommand, ValueEnum};
use engine::auth::{self, AuthError, Role};

#[derive(Subcommand)]
pub enum UserCommand {
    /// Add a user. The password is read from REVENANT_PASSWORD, or from standard input.
    Add {
        #[arg(long)]
        username: String,
        #[arg(long, value_enum)]
        role: RoleArg,
        /// Succeed without change when the user already exists.
        #[arg(long)]
        if_missing: bool,
    },
    /// Change a user's role.
    SetRole {
        #[arg(long)]
        username: String,
        #[arg(long, value_enum)]
        role: RoleArg,
    },
    /// Disable a user (their sessions end at once).
    Disable {
        #[arg(long)]
        username: String,
    },
    /// Enable a disabled user (old sessions stay ended: they sign in again).
    Enable {
        #[arg(long)]
        username: String,
    },
    /// Set a user's password (REVENANT_PASSWORD or standard input); their sessions end.
    SetPassword {
        #[arg(long)]
        username: String,
    },
}

/// A role as the command line takes it: clap lists the values and refuses others by name.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    /// Reads every page.
    Viewer,
    /// Also retries, archives and replays.
    Operator,
    /// Also manages users, alert rules and contracts.
    Admin,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Role {
        match r {
            RoleArg::Viewer => Role::Viewer,
            RoleArg::Operator => Role::Operator,
            RoleArg::Admin => Role::Admin,
        }
    }
}

fn read_password() -> anyhow::Result<String> {
    if let Ok(p) = std::env::var("REVENANT_PASSWORD") {
        return Ok(p);
    }
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).context("cannot read the password from standard input")?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}

pub async fn run(cmd: UserCommand, pool: &sqlx::PgPool) -> anyhow::Result<()> {
    let actor = engine::audit::cli_principal();
    let mut tx = pool.begin().await?;
    let (action, target, count) = match cmd {
        UserCommand::Add { username, role, if_missing } => {
            let role = Role::from(role);
            let password = read_password()?;
            match auth::create_user(&mut *tx, &username, &password, role).await {
                Ok(_) => ("user.add", username, 1),
                Err(AuthError::Exists(_)) if if_missing => {
                    println!("user {username} already exists; unchanged");
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
        UserCommand::SetRole { username, role } => {
            if !auth::set_role(&mut tx, &username, Role::from(role)).await? {
                bail!("no user named {username}");
            }
            ("user.set_role", username, 1)
        }
        UserCommand::Disable { username } => {
            if !auth::set_disabled(&mut tx, &username, true).await? {
                bail!("no user named {username}");
            }
            ("user.disable", username, 1)
        }
        UserCommand::Enable { username } => {
            if !auth::set_disabled(&mut tx, &username, false).await? {
                bail!("no user named {username}");
            }
            ("user.enable", username, 1)
        }
        UserCommand::SetPassword { username } => {
            let password = read_password()?;
            if !auth::set_password(&mut tx, &username, &password).await? {
                bail!("no user named {username}");
            }
            ("user.set_password", username, 1)
        }
    };
    engine::audit::record(
        &mut *tx,
        engine::audit::Entry {
            actor: &actor,
            source_ip: None,
            action,
            target: Some(target.clone()),
            filter: None,
            item_count: count,
            outcome: "ok",
            detail: None,
        },
    )
    .await?;
    tx.commit().await?;
    println!("{action}: {target}");
    Ok(())
}
