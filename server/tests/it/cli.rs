//! The binary refuses bad configuration with one clear line and a non-zero exit.

use std::process::{Command, Output};

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_revenant"));
    cmd.args(args).env_remove("DATABASE_URL").env_remove("AMQP_URL").env_remove("REVENANT_CONFIG");
    cmd.current_dir(std::env::temp_dir());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run revenant")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_string()
}

#[test]
fn a_database_url_of_the_wrong_kind_is_refused_by_name() {
    let o = run(&["migrate"], &[("DATABASE_URL", "mysql://localhost/x"), ("AMQP_URL", "amqp://localhost")]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("`database_url` (DATABASE_URL)"), "{e}");
}

#[test]
fn a_missing_amqp_url_is_refused_by_name() {
    let o = run(&["serve"], &[("DATABASE_URL", "postgres://localhost/x")]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o), "revenant: setting `amqp_url` (AMQP_URL) is required");
}

#[test]
fn an_unreachable_database_stops_start_up_with_one_line() {
    let o =
        run(&["migrate"], &[("DATABASE_URL", "postgres://postgres@127.0.0.1:1/x"), ("AMQP_URL", "amqp://localhost")]);
    assert!(!o.status.success());
    let e = stderr(&o);
    let last = e.lines().last().unwrap_or_default();
    assert!(last.starts_with("revenant: cannot connect to PostgreSQL (DATABASE_URL)"), "{e}");
}

#[test]
fn a_bad_setting_in_the_config_file_is_refused_by_name() {
    let path = std::env::temp_dir().join(format!("revenant-cli-{}.toml", std::process::id()));
    std::fs::write(&path, "database_url = \"postgres://x/y\"\namqp_url = \"amqp://x\"\n[relay]\nwindow = \"many\"\n")
        .unwrap();
    let o = run(&["migrate"], &[("REVENANT_CONFIG", path.to_str().unwrap())]);
    std::fs::remove_file(&path).ok();
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("window"), "{e}");
}

/// `revenant user set-password` and `disable` / `enable` end the user's sessions, audited.
#[tokio::test]
async fn a_new_password_from_the_cli_ends_the_users_sessions() {
    let db = testkit::fresh_db().await;
    let env = [
        ("DATABASE_URL", db.url.as_str()),
        ("AMQP_URL", "amqp://127.0.0.1:5672"),
        ("REVENANT_PASSWORD", "first password"),
    ];
    let ok = |o: Output| assert!(o.status.success(), "{}", stderr(&o));
    ok(run(&["user", "add", "--username", "ivy", "--role", "operator"], &env));
    let hour = std::time::Duration::from_secs(3600);
    let (token, _) = engine::auth::login(&db.pool, "ivy", "first password", "10.0.0.1", hour).await.unwrap();
    let env2 = [env[0], env[1], ("REVENANT_PASSWORD", "second password")];
    ok(run(&["user", "set-password", "--username", "ivy"], &env2));
    assert!(engine::auth::session_principal(&db.pool, &token).await.unwrap().is_none());
    let (token, _) = engine::auth::login(&db.pool, "ivy", "second password", "10.0.0.1", hour).await.unwrap();
    ok(run(&["user", "disable", "--username", "ivy"], &env2));
    ok(run(&["user", "enable", "--username", "ivy"], &env2));
    assert!(engine::auth::session_principal(&db.pool, &token).await.unwrap().is_none(), "enable revived a session");
    let actions: Vec<String> =
        sqlx::query_scalar!("SELECT action FROM audit_log ORDER BY id").fetch_all(&db.pool).await.unwrap();
    assert_eq!(actions, ["user.add", "user.set_password", "user.disable", "user.enable"]);
    let o = run(&["user", "set-password", "--username", "nobody"], &env2);
    assert!(!o.status.success() && stderr(&o).contains("no user named nobody"), "{}", stderr(&o));
}
