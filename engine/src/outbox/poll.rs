//! When an idle relay looks for new rows again: adaptive polling, nothing on the writer's commit.
//!
//! Policy: no trigger NOTIFYs on insert (PostgreSQL serialises every committing transaction
//! that has sent a NOTIFY, which halved a service's commit rate at 16 writers), so the relay
//! finds new rows by claiming. While rows keep coming it claims back to back; once a claim
//! comes back short it waits `min`, and each further empty claim doubles the wait up to `max`.
//! A claim that finds rows starts again from `min`. So a busy table is read continuously, a
//! table that just went quiet is looked at again within milliseconds, and an idle one costs
//! one indexed, empty claim per `max` (it writes nothing, so no WAL and no commit).

use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Poll {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Poll {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        let min = min.min(max);
        Self { min, max, next: min }
    }

    /// A claim found rows: the next empty one waits `min` again.
    pub(crate) fn busy(&mut self) {
        self.next = self.min;
    }

    /// A claim came back short: how long to wait before the next, which then waits longer.
    pub(crate) fn idle(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn waits_double_from_min_to_max_and_rows_start_them_over() {
        let mut p = Poll::new(10 * MS, 250 * MS);
        let waits: Vec<u128> = (0..7).map(|_| p.idle().as_millis()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 250, 250]);
        p.busy();
        assert_eq!(p.idle(), 10 * MS);
    }

    #[test]
    fn a_min_above_the_max_is_the_max() {
        let mut p = Poll::new(500 * MS, 100 * MS);
        assert_eq!((p.idle(), p.idle()), (100 * MS, 100 * MS));
    }
}
