//! The one way tests wait for something that happens in the background.

use std::{
    fmt::Debug,
    time::{Duration, Instant},
};

/// How often a condition is checked.
const EVERY: Duration = Duration::from_millis(50);

/// Checks `probe` every 50 ms until it answers `Ok`, and returns that answer. Past `within`,
/// fails the test naming `what` and the last `Err` — what the probe saw instead.
pub async fn eventually<T, Seen: Debug>(
    what: &str,
    within: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, Seen>,
) -> T {
    let start = Instant::now();
    loop {
        match probe().await {
            Ok(done) => return done,
            Err(seen) if start.elapsed() >= within => panic!("{what}: not within {within:?}; last seen: {seen:?}"),
            Err(_) => tokio::time::sleep(EVERY).await,
        }
    }
}

/// [`eventually`] for a yes/no condition; returns how long it took.
pub async fn until(what: &str, within: Duration, mut check: impl AsyncFnMut() -> bool) -> Duration {
    let start = Instant::now();
    eventually(what, within, async || if check().await { Ok(()) } else { Err("no") }).await;
    start.elapsed()
}

/// [`eventually`] for a count query: polls `sql` (one bigint, runtime-checked: each caller
/// passes its own) until `done` holds for it, for up to 30 s; returns the count.
pub async fn count_until(what: &str, pool: &sqlx::PgPool, sql: &'static str, done: impl Fn(i64) -> bool) -> i64 {
    eventually(&format!("{what} (`{sql}`)"), Duration::from_secs(30), async || {
        // Runtime-checked: the count query each test passes.
        let n = sqlx::query_scalar::<_, i64>(sql).fetch_one(pool).await.unwrap();
        if done(n) { Ok(n) } else { Err(n) }
    })
    .await
}
