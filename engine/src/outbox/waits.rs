//! Where a relay session's time went, logged when the session ends: the figures that say
//! what held the relay below the broker's pace (docs/BENCHMARKS.md).
//!
//! Policy: each wait of the session's loop is charged to the one reason it could not publish
//! more — the confirm window full, the mark flusher's bound reached, no claimed row left while
//! a claim runs — or to idle; the time spent publishing is counted apart. Cheap: two
//! `Instant::now()` per loop turn.

use std::time::{Duration, Instant};

/// Why the session waited, decided before it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    /// `window` publishes await their confirms.
    WindowFull,
    /// Confirms are not taken: the unflushed marks reached `mark_batch` (or the crash bound).
    MarksFull,
    /// Nothing claimed is left to send and the next claim has not answered.
    Starved,
    /// Nothing to send and no claim running: waiting for rows (the adaptive poll).
    Idle,
}

impl Held {
    pub(super) fn of(window_full: bool, marks_full: bool, buffer_empty: bool, claiming: bool) -> Held {
        if window_full {
            Held::WindowFull
        } else if marks_full {
            Held::MarksFull
        } else if buffer_empty && claiming {
            Held::Starved
        } else {
            Held::Idle
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Waits {
    pub publishing: Duration,
    pub window_full: Duration,
    pub marks_full: Duration,
    pub starved: Duration,
    pub idle: Duration,
    pub claims: u64,
}

impl Waits {
    pub(super) fn waited(&mut self, held: Held, since: Instant) {
        let d = since.elapsed();
        match held {
            Held::WindowFull => self.window_full += d,
            Held::MarksFull => self.marks_full += d,
            Held::Starved => self.starved += d,
            Held::Idle => self.idle += d,
        }
    }

    pub(super) fn log(&self, took: Duration) {
        let ms = |d: Duration| d.as_millis() as u64;
        tracing::info!(
            took_ms = ms(took),
            publishing_ms = ms(self.publishing),
            window_full_ms = ms(self.window_full),
            marks_full_ms = ms(self.marks_full),
            starved_ms = ms(self.starved),
            idle_ms = ms(self.idle),
            claims = self.claims,
            "relay session ended"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_charged_to_the_first_reason_that_holds() {
        assert_eq!(Held::of(true, true, true, true), Held::WindowFull);
        assert_eq!(Held::of(false, true, true, true), Held::MarksFull);
        assert_eq!(Held::of(false, false, true, true), Held::Starved);
        assert_eq!(Held::of(false, false, true, false), Held::Idle);
        assert_eq!(Held::of(false, false, false, true), Held::Idle, "rows to send: not starved");
    }
}
