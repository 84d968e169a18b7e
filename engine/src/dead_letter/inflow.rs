//! Dead letters stored per minute, per DLQ and per failure group, over the last hour: kept by
//! a trigger in `dead_letter_inflow` (migrations/0017_dead_letter_inflow.sql). What tells an
//! on-call engineer whether an incident is getting worse or better; the broker's depth does
//! not (it stays near 0 while an ingester keeps up).

use chrono::{DateTime, Duration, DurationRound, Utc};
use sqlx::PgExecutor;

/// Minutes in a series: the last hour, the current minute last.
pub const MINUTES: usize = 60;

/// What a day of inflow is kept for.
const RETENTION_HOURS: i64 = 24;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub minute: DateTime<Utc>,
    pub queue: String,
    /// 0: dead letters without a group.
    pub group_id: i64,
    pub n: i64,
}

/// The first minute of a series ending at `now`'s minute.
pub fn series_start(now: DateTime<Utc>) -> DateTime<Utc> {
    let minute = now.duration_trunc(Duration::minutes(1)).unwrap_or(now);
    minute - Duration::minutes(MINUTES as i64 - 1)
}

/// Every bucket of the last hour (a few rows per minute and series).
pub async fn last_hour(db: impl PgExecutor<'_>, now: DateTime<Utc>) -> Result<Vec<Bucket>, sqlx::Error> {
    sqlx::query_as!(
        Bucket,
        "SELECT minute, queue, group_id, n FROM dead_letter_inflow WHERE minute >= $1 ORDER BY minute",
        series_start(now)
    )
    .fetch_all(db)
    .await
}

/// One group's buckets of the last hour.
pub async fn group_last_hour(
    db: impl PgExecutor<'_>,
    group_id: i64,
    now: DateTime<Utc>,
) -> Result<Vec<Bucket>, sqlx::Error> {
    sqlx::query_as!(
        Bucket,
        "SELECT minute, queue, group_id, n FROM dead_letter_inflow WHERE group_id = $1 AND minute >= $2
         ORDER BY minute",
        group_id,
        series_start(now)
    )
    .fetch_all(db)
    .await
}

/// Per-minute counts, oldest first, [`MINUTES`] long, of the buckets `keep` selects (minutes
/// without a bucket are 0).
pub fn series(buckets: &[Bucket], now: DateTime<Utc>, keep: impl Fn(&Bucket) -> bool) -> Vec<i64> {
    let start = series_start(now);
    let mut out = vec![0; MINUTES];
    for b in buckets.iter().filter(|b| keep(b)) {
        let i = (b.minute - start).num_minutes();
        if (0..MINUTES as i64).contains(&i) {
            out[i as usize] += b.n;
        }
    }
    out
}

pub async fn prune(db: impl PgExecutor<'_>) -> Result<u64, sqlx::Error> {
    let cutoff = Utc::now() - Duration::hours(RETENTION_HOURS);
    Ok(sqlx::query!("DELETE FROM dead_letter_inflow WHERE minute < $1", cutoff).execute(db).await?.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn bucket(minute: &str, queue: &str, group_id: i64, n: i64) -> Bucket {
        Bucket { minute: at(minute), queue: queue.into(), group_id, n }
    }

    #[test]
    fn a_series_is_an_hour_of_minutes_ending_now_with_gaps_as_zero() {
        let now = at("2026-12-04T22:30:45Z");
        assert_eq!(series_start(now), at("2026-12-04T21:31:00Z"));
        let b = [
            bucket("2026-12-04T21:30:00Z", "a", 1, 9), // before the hour
            bucket("2026-12-04T21:31:00Z", "a", 1, 2),
            bucket("2026-12-04T22:30:00Z", "a", 1, 3),
            bucket("2026-12-04T22:30:00Z", "a", 2, 4),
            bucket("2026-12-04T22:30:00Z", "b", 1, 5),
        ];
        let a = series(&b, now, |b| b.queue == "a");
        assert_eq!(a.len(), MINUTES);
        assert_eq!((a[0], a[MINUTES - 1], a.iter().sum::<i64>()), (2, 7, 9));
        let g2 = series(&b, now, |b| b.group_id == 2);
        assert_eq!(g2.iter().sum::<i64>(), 4);
    }
}
