//! The sign-in throttle.
//!
//! Policy: an attempt is recorded *before* its password is checked, and then counted, so
//! parallel guesses cannot all pass a count taken before any of them is recorded: the k-th
//! attempt to commit sees at least k rows, and only the first `MAX_FAILURES` in a window are
//! ever checked. Attempts count per (user name, address) — so nobody elsewhere can lock a user
//! out by guessing their name — and per address across names (`MAX_PER_ADDRESS`), so one
//! address cannot try many names. A successful sign-in removes its (user name, address)
//! attempts; the others age out of the window and are purged by `purge`.

use sqlx::PgPool;

/// Attempts per (user name, address) in a window, the one being made included.
pub const MAX_FAILURES: i64 = 5;
/// Attempts per address across all user names in a window.
pub const MAX_PER_ADDRESS: i64 = 30;
pub const FAILURE_WINDOW_SECS: i64 = 300;

/// Records an attempt and says whether it may be checked.
pub async fn admit(pool: &PgPool, username: &str, ip: &str) -> Result<bool, sqlx::Error> {
    sqlx::query!("INSERT INTO login_failures (username, source_ip) VALUES ($1, $2)", username, ip)
        .execute(pool)
        .await?;
    let counts = sqlx::query!(
        r#"SELECT count(*) FILTER (WHERE username = $1) AS "pair!", count(*) AS "address!" FROM login_failures
         WHERE source_ip = $2 AND at > now() - make_interval(secs => $3)"#,
        username,
        ip,
        FAILURE_WINDOW_SECS as f64,
    )
    .fetch_one(pool)
    .await?;
    Ok(counts.pair <= MAX_FAILURES && counts.address <= MAX_PER_ADDRESS)
}

/// After a successful sign-in: this pair's attempts no longer count.
pub async fn clear(pool: &PgPool, username: &str, ip: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM login_failures WHERE username = $1 AND source_ip = $2", username, ip)
        .execute(pool)
        .await?;
    Ok(())
}

/// What `purge` removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    pub attempts: u64,
    pub sessions: u64,
}

/// Removes attempts older than the window and expired sessions; run on a schedule.
pub async fn purge(pool: &PgPool) -> Result<Purged, sqlx::Error> {
    let attempts = sqlx::query!(
        "DELETE FROM login_failures WHERE at < now() - make_interval(secs => $1)",
        FAILURE_WINDOW_SECS as f64
    )
    .execute(pool)
    .await?
    .rows_affected();
    let sessions = sqlx::query!("DELETE FROM sessions WHERE expires_at < now()").execute(pool).await?.rows_affected();
    Ok(Purged { attempts, sessions })
}

/// Purges every `every` until `shutdown`; a failed purge is logged and tried again later.
pub async fn run_purge(
    pool: PgPool,
    every: std::time::Duration,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    loop {
        match purge(&pool).await {
            Ok(p) if p.attempts + p.sessions > 0 => {
                tracing::info!(attempts = p.attempts, sessions = p.sessions, "purged old sign-in attempts and sessions")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot purge old sign-in attempts and sessions"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(every) => {}
        }
    }
}
