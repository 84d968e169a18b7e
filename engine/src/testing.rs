//! Test harness: a fresh, migrated database per test, and leftovers swept at start.
//!
//! Tests use `TEST_DATABASE_URL` (default: the local `postgres` database) only to create
//! and drop their own databases, named `revenant_t_<uuid>`.

use sqlx::{Connection, PgConnection, PgPool};

pub fn admin_url() -> String {
    std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub fn amqp_url() -> String {
    std::env::var("TEST_AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
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

/// Drops test databases older than an hour: what a killed earlier run left behind.
async fn sweep(admin: &mut PgConnection) {
    let old: Vec<String> = sqlx::query_scalar!(
        r#"SELECT d.datname::text AS "datname!" FROM pg_database d
         WHERE d.datname LIKE 'revenant_t_%'
           AND (pg_stat_file('base/' || d.oid || '/PG_VERSION')).modification < now() - interval '1 hour'"#
    )
    .fetch_all(&mut *admin)
    .await
    .unwrap_or_default();
    for name in old {
        // Runtime-checked: DROP DATABASE of a name found at run time.
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")))
            .execute(&mut *admin)
            .await;
    }
}

/// A fresh database with Revenant's migrations applied.
pub async fn fresh_db() -> TestDb {
    let db = blank_db().await;
    crate::db::migrate(&db.pool).await.expect("migrate test database");
    db
}

/// A fresh database with nothing in it (a service's database, say), dropped like `fresh_db`'s.
pub async fn blank_db() -> TestDb {
    let admin = admin_url();
    let mut conn = PgConnection::connect(&admin).await.expect("connect to TEST_DATABASE_URL");
    // Once per test process, not per test.
    SWEEP.get_or_init(|| sweep(&mut conn)).await;
    let name = format!("revenant_t_{}", uuid::Uuid::new_v4().simple());
    // Runtime-checked: CREATE DATABASE of a name made at run time.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut conn)
        .await
        .expect("create test database");
    let url = with_db(&admin, &name);
    let pool = crate::db::connect(&url, 10).await.expect("connect to test database");
    TestDb { pool, url, name }
}

impl TestDb {
    /// Drops the database; tests that end early leave it for the next sweep.
    pub async fn drop_db(self) {
        self.pool.close().await;
        if let Ok(mut conn) = PgConnection::connect(&admin_url()).await {
            // Runtime-checked: DROP DATABASE of a name made at run time.
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name)))
                .execute(&mut conn)
                .await;
        }
    }
}

/// A unique name for a queue or exchange in a test.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}.{}", uuid::Uuid::new_v4().simple())
}
