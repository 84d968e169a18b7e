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
    /// The loop waiting for deliveries while a batch gathers or commits: the broker's pace.
    pub gathering: Duration,
    /// Nothing received and nothing storing.
    pub idle: Duration,
}

/// What the loop was waiting for, from its state before the wait.
pub(super) enum Waiting {
    SlotsFull,
    Gathering,
    Idle,
}

impl Waiting {
    pub fn of(batch_full: bool, room: bool, gathering: bool, storing: bool) -> Self {
        match (batch_full && !room, gathering || storing) {
            (true, _) => Waiting::SlotsFull,
            (false, true) => Waiting::Gathering,
            (false, false) => Waiting::Idle,
        }
    }
}

impl Timings {
    pub fn waited(&mut self, why: Waiting, d: Duration) {
        match why {
            Waiting::SlotsFull => self.slots_full += d,
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
            gathering_ms = ms(self.gathering),
            idle_ms = ms(self.idle),
            "ingest consumer stopped"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_charged_to_what_held_the_loop() {
        assert!(matches!(Waiting::of(true, false, true, true), Waiting::SlotsFull));
        assert!(
            matches!(Waiting::of(true, true, true, false), Waiting::Gathering),
            "a full batch with a free slot is stored at once"
        );
        assert!(matches!(Waiting::of(false, true, false, true), Waiting::Gathering));
        assert!(matches!(Waiting::of(false, true, false, false), Waiting::Idle));
    }
}
