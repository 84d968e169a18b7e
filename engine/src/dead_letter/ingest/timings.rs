//! Where one consumer's time went, logged when it stops (as the relay logs its waits and the
//! replay sender its stages): what to read when the ingester is slower than the broker.

use std::time::Duration;

#[derive(Default)]
pub(super) struct Timings {
    pub deliveries: u64,
    pub batches: u64,
    /// Decoding and fingerprinting deliveries, on the consumer loop.
    pub parse: Duration,
    /// Inserting and committing batches, on their own tasks (beside the loop).
    pub store: Duration,
    /// Acking committed batches, on the loop.
    pub ack: Duration,
    /// The loop waiting with a full batch and every commit slot taken: PostgreSQL's pace.
    pub slots_full: Duration,
    /// The loop waiting for deliveries with the prefetch used up by batches committing: the
    /// broker sends no more until a commit lets them be acked (PostgreSQL's pace too).
    pub prefetch_full: Duration,
    /// The loop waiting for deliveries while a batch gathers or commits: the broker's pace.
    pub gathering: Duration,
    /// Nothing received and nothing storing.
    pub idle: Duration,
}

/// What the loop was waiting for, from its state before the wait.
pub(super) enum Waiting {
    SlotsFull,
    PrefetchFull,
    Gathering,
    Idle,
}

/// The consumer's state before a wait.
pub(super) struct State {
    pub batch_full: bool,
    /// A commit slot is free.
    pub room: bool,
    /// Deliveries gathering and in batches committing: all unacked.
    pub gathering: usize,
    pub storing: usize,
    pub prefetch: u16,
}

impl Waiting {
    pub fn of(s: State) -> Self {
        let unacked = s.gathering + s.storing;
        if s.batch_full && !s.room {
            Waiting::SlotsFull
        } else if s.prefetch > 0 && unacked >= usize::from(s.prefetch) {
            Waiting::PrefetchFull
        } else if unacked > 0 {
            Waiting::Gathering
        } else {
            Waiting::Idle
        }
    }
}

impl Timings {
    pub fn waited(&mut self, why: Waiting, d: Duration) {
        match why {
            Waiting::SlotsFull => self.slots_full += d,
            Waiting::PrefetchFull => self.prefetch_full += d,
            Waiting::Gathering => self.gathering += d,
            Waiting::Idle => self.idle += d,
        }
    }

    pub fn log(&self, queue: &str) {
        let ms = |d: Duration| d.as_millis() as u64;
        tracing::info!(
            queue,
            deliveries = self.deliveries,
            batches = self.batches,
            parse_ms = ms(self.parse),
            store_ms = ms(self.store),
            ack_ms = ms(self.ack),
            slots_full_ms = ms(self.slots_full),
            prefetch_full_ms = ms(self.prefetch_full),
            gathering_ms = ms(self.gathering),
            idle_ms = ms(self.idle),
            "ingest consumer stopped"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(batch_full: bool, room: bool, gathering: usize, storing: usize) -> State {
        State { batch_full, room, gathering, storing, prefetch: 500 }
    }

    #[test]
    fn a_wait_is_charged_to_what_held_the_loop() {
        assert!(matches!(Waiting::of(state(true, false, 250, 500)), Waiting::SlotsFull));
        assert!(matches!(Waiting::of(state(false, false, 0, 500)), Waiting::PrefetchFull), "no credit until a commit");
        assert!(matches!(Waiting::of(state(false, true, 10, 250)), Waiting::Gathering));
        assert!(matches!(Waiting::of(state(false, true, 0, 0)), Waiting::Idle));
    }
}
