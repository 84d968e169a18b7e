//! Exponential backoff with full jitter, capped.
//!
//! Policy: the n-th retry waits a uniformly random time in `[0, min(max, base * 2^(n-1))]`
//! ("full jitter"). Full jitter rather than a fixed doubling because many relays — or many
//! rows that failed together when a broker went away — would otherwise retry in lock-step
//! and hit the broker in waves.

use std::time::Duration;

use rand::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        // A cap below the base would make every delay the cap; treat the base as the floor of the cap.
        Self { base, max: max.max(base) }
    }

    /// The upper bound of the wait before retry number `attempt` (1 = first retry).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(63);
        // Saturating arithmetic in nanoseconds: base * 2^exp can overflow long before the cap.
        let base = self.base.as_nanos().min(u64::MAX as u128) as u64;
        let scaled = base.checked_shl(exp).filter(|v| v >> exp == base).unwrap_or(u64::MAX);
        Duration::from_nanos(scaled).min(self.max)
    }

    /// A random wait in `[0, ceiling(attempt)]`.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.delay_with(attempt, &mut rand::rng())
    }

    pub fn delay_with(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let ceiling = self.ceiling(attempt).as_nanos() as u64;
        Duration::from_nanos(rng.random_range(0..=ceiling))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::StdRng};

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn the_ceiling_doubles_per_attempt_from_the_base() {
        let b = Backoff::new(ms(100), ms(60_000));
        assert_eq!(b.ceiling(1), ms(100));
        assert_eq!(b.ceiling(2), ms(200));
        assert_eq!(b.ceiling(3), ms(400));
        assert_eq!(b.ceiling(8), ms(12_800));
    }

    #[test]
    fn the_ceiling_never_exceeds_the_cap_even_for_huge_attempt_numbers() {
        let b = Backoff::new(ms(500), ms(300_000));
        assert_eq!(b.ceiling(10), ms(256_000));
        assert_eq!(b.ceiling(11), ms(300_000));
        assert_eq!(b.ceiling(64), ms(300_000));
        assert_eq!(b.ceiling(u32::MAX), ms(300_000));
    }

    #[test]
    fn attempt_zero_is_treated_as_the_first_retry() {
        let b = Backoff::new(ms(100), ms(1_000));
        assert_eq!(b.ceiling(0), ms(100));
    }

    #[test]
    fn delays_are_spread_over_the_whole_range_and_stay_inside_it() {
        let b = Backoff::new(ms(100), ms(10_000));
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<Duration> = (0..2_000).map(|_| b.delay_with(5, &mut rng)).collect();
        assert!(delays.iter().all(|d| *d <= ms(1_600)));
        // Full jitter: some waits are short, some near the ceiling, not all the same.
        assert!(delays.iter().any(|d| *d < ms(160)), "no short delay drawn");
        assert!(delays.iter().any(|d| *d > ms(1_440)), "no long delay drawn");
    }

    #[test]
    fn a_cap_below_the_base_is_raised_to_the_base() {
        let b = Backoff::new(ms(500), ms(100));
        assert_eq!(b.ceiling(3), ms(500));
    }
}
