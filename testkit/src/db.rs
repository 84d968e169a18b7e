//! A fresh, migrated database per test, dropped with the test; leftovers swept at start.
//!
//! Tests use `TEST_DATABASE_URL` (default: the local `postgres` database) only to create
//! and drop their own databases, named `revenant_t_<uuid>`.
//!
//! Policy (crates.io's test databases are the model): the migrations run once, into a
//! template database named after them (`revenant_tpl_<hash of the migrations>`, built under an
//! advisory lock by whichever test process comes first, then renamed into place); each test's
//! database is a copy of it (`CREATE DATABASE … TEMPLATE`), which takes milliseconds instead
//! of a migration run. A `TestDb` drops its database when it goes out of scope, a failing
//! test's included (the drop runs while the panic unwinds). What a killed run leaves behind,
//! and templates of other migrations, are swept after an hour.

use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection, PgPool};

pub fn admin_url() -> String {
    std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub struct TestDb {
    pub pool: PgPool,
    pub url: String,
    pub name: String,
}

fn with_db(url: &str, db: &str) -> String {
    match url.rfind('/') {
        Some(i) => format!("{}/{}", &url[..i], db),
        None => format!("{url}/{db}"),
    }
}

static SWEEP: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

static TEMPLATE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();

/// The template database of these migrations: its name changes when any migration does.
fn template_name() -> String {
    let mut h = Sha256::new();
    for m in sqlx::migrate!("../migrations").iter() {
        h.update(m.version.to_le_bytes());
        h.update(&m.checksum);
    }
    format!("revenant_tpl_{}", hex::encode(&h.finalize()[..8]))
}

/// The migrated template, built once by whichever process gets the advisory lock first.
async fn template(admin: &mut PgConnection) -> String {
    let name = template_name();
    sqlx::query!("SELECT pg_advisory_lock(hashtext('revenant test template'))")
        .fetch_one(&mut *admin)
        .await
        .expect("lock the test template");
    let exists: bool =
        sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS "e!""#, &name)
            .fetch_one(&mut *admin)
            .await
            .expect("look for the test template");
    if !exists {
        let building = format!("{name}_building");
        for sql in
            [format!("DROP DATABASE IF EXISTS \"{building}\" WITH (FORCE)"), format!("CREATE DATABASE \"{building}\"")]
        {
            // Runtime-checked: names made at run time.
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut *admin).await.expect("create the test template");
        }
        let pool = engine::db::connect(&with_db(&admin_url(), &building), 2).await.expect("connect to the template");
        engine::db::migrate(&pool).await.expect("migrate the test template");
        pool.close().await;
        // Runtime-checked: names made at run time.
        sqlx::query(sqlx::AssertSqlSafe(format!("ALTER DATABASE \"{building}\" RENAME TO \"{name}\"")))
            .execute(&mut *admin)
            .await
            .expect("put the test template in place");
    }
    sqlx::query!("SELECT pg_advisory_unlock(hashtext('revenant test template'))")
        .fetch_one(&mut *admin)
        .await
        .expect("unlock the test template");
    name
}

/// Drops test databases older than an hour, and templates of other migrations: what a killed
/// earlier run left behind.
async fn sweep(admin: &mut PgConnection) {
    let old: Vec<String> = sqlx::query_scalar!(
        r#"SELECT d.datname::text AS "datname!" FROM pg_database d
         WHERE (d.datname LIKE 'revenant\_t\_%' OR d.datname LIKE 'revenant\_tpl\_%') AND d.datname <> $1
           AND (pg_stat_file('base/' || d.oid || '/PG_VERSION')).modification < now() - interval '1 hour'"#,
        template_name()
    )
    .fetch_all(&mut *admin)
    .await
    .unwrap_or_default();
    for name in old {
        engine::outbox::logical::slots::drop_all_of(admin, &name).await;
        // Runtime-checked: DROP DATABASE of a name found at run time.
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")))
            .execute(&mut *admin)
            .await;
    }
}

/// A fresh database with Revenant's migrations applied: a copy of the migrated template.
pub async fn fresh_db() -> TestDb {
    new_db(true).await
}

/// A fresh database with nothing in it (a service's database, say), dropped like `fresh_db`'s.
pub async fn blank_db() -> TestDb {
    new_db(false).await
}

async fn new_db(migrated: bool) -> TestDb {
    let admin = admin_url();
    let mut conn = PgConnection::connect(&admin).await.expect("connect to TEST_DATABASE_URL");
    // Once per test process, not per test.
    SWEEP.get_or_init(|| sweep(&mut conn)).await;
    let from = if migrated {
        let t = TEMPLATE.get_or_init(|| template(&mut conn)).await;
        format!(" TEMPLATE \"{t}\"")
    } else {
        String::new()
    };
    let name = format!("revenant_t_{}", uuid::Uuid::new_v4().simple());
    // Runtime-checked: CREATE DATABASE of a name made at run time.
    let create = sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"{from}"))).execute(&mut conn);
    match tokio::time::timeout(CREATE_WITHIN, create).await {
        Ok(done) => {
            done.expect("create test database");
        }
        Err(_) => panic!("creating {name} took over {CREATE_WITHIN:?}. Waiting: {}", waits(&admin).await),
    }
    let _ = conn.close().await;
    let url = with_db(&admin, &name);
    let pool = engine::db::connect(&url, 10).await.expect("connect to test database");
    TestDb { pool, url, name }
}

/// How long a test database's creation may take before the test fails saying what the
/// cluster waits on.
const CREATE_WITHIN: std::time::Duration = std::time::Duration::from_secs(120);

/// How long a test database's drop may take (it forces a checkpoint, and ends the database's
/// connections first): past this, the database is left to the next run's sweep rather than
/// holding the test, and what the cluster was waiting on is printed.
const DROP_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

impl Drop for TestDb {
    /// Drops the database, also when the test failed: on a thread of its own (a drop cannot
    /// await), which this one waits for, so the next test never finds it.
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.name);
        if name.is_empty() {
            return;
        }
        let admin = admin_url();
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async {
                let drop = async {
                    let mut conn = PgConnection::connect(&admin).await.ok()?;
                    engine::outbox::logical::slots::drop_all_of(&mut conn, &name).await;
                    // Runtime-checked: DROP DATABASE of a name made at run time.
                    let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await.ok()
                };
                match tokio::time::timeout(DROP_WITHIN, drop).await {
                    Ok(done) => done.map(|_| ()),
                    Err(_) => {
                        eprintln!(
                            "testing: dropping {name} took over {DROP_WITHIN:?}; left to the next sweep. Waiting: {}",
                            waits(&admin).await
                        );
                        None
                    }
                }
            })
        });
        let _ = dropped.join();
    }
}

/// What the cluster's backends are waiting on, one line: for a drop or create that does not
/// finish.
async fn waits(admin: &str) -> String {
    let Ok(mut conn) = PgConnection::connect(admin).await else { return "(cannot connect)".into() };
    let rows: Vec<String> = sqlx::query_scalar(
        "SELECT format('%s pid %s in %s: %s/%s %s', backend_type, pid, coalesce(datname, '-'), \
                coalesce(wait_event_type, '-'), coalesce(wait_event, '-'), left(coalesce(query, ''), 60)) \
         FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND wait_event_type IS DISTINCT FROM 'Activity' \
           AND state IS DISTINCT FROM 'idle'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap_or_default();
    rows.join("; ")
}
