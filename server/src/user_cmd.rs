//! `revenant user …`: manage local users from the command line (the first admin comes from
//! here). Every change is audited as `cli:<login>`, in the same transaction as the change.

use anyhow::{Context, bail};
use clap::Subcommand;
use engine::auth::{self, AuthError, Role};

#[derive(Subcommand)]
pub enum UserCommand {
    /// Add a user. The password is read from REVENANT_PASSWORD, or from standard input.
    Add {
        #[arg(long)]
        username: String,
        /// viewer, operator or admin
        #[arg(long)]
        role: String,
        /// Succeed without change when the user already exists.
        #[arg(long)]
        if_missing: bool,
    },
    /// Change a user's role.
    SetRole {
        #[arg(long)]
        username: String,
        #[arg(long)]
        role: String,
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

fn parse_role(s: &str) -> anyhow::Result<Role> {
    Role::parse(s).with_context(|| format!("role `{s}` is not one of viewer, operator, admin"))
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
            let role = parse_role(&role)?;
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
            if !auth::set_role(&mut tx, &username, parse_role(&role)?).await? {
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
