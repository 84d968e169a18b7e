//! Per-key order for a replay plan (`Order::RoutingKey`, `Order::Header`).
//!
//! Policy: at most one message per key is in flight; a key's later messages wait (parked)
//! until its confirm, so each key's messages reach the broker in first-failure order while
//! different keys go in parallel up to the plan's window. When a key's message fails, its
//! later messages are held back: marked failed with the reason, so their dead letters await
//! triage again, and the other keys go on. Items without a key are sent without order. A
//! sender that takes a plan over starts with the keys its earlier failures hold back.

use std::collections::{HashMap, HashSet, VecDeque};

use super::items::Outgoing;

/// What to do with the next item.
pub(super) enum Next {
    Send(Outgoing),
    /// Not to be sent: an earlier message of its key failed (the reason to record).
    Hold(Outgoing, String),
}

pub(super) struct Keys {
    /// "routing key" or "header `x`", for the reasons it writes.
    label: String,
    /// Keys with a message in flight, and which message (dead letter id → key).
    busy: HashSet<String>,
    in_flight: HashMap<i64, String>,
    /// Later messages of busy keys, in seq order per key.
    parked: HashMap<String, VecDeque<Outgoing>>,
    parked_count: usize,
    /// Messages whose key has just become free: sent before anything newer from the buffer.
    ready: VecDeque<Outgoing>,
    /// Keys an earlier failure holds back, with the dead letter that failed.
    held: HashMap<String, i64>,
}

impl Keys {
    pub(super) fn new(label: String, held: Vec<(String, i64)>) -> Self {
        Self {
            label,
            busy: HashSet::new(),
            in_flight: HashMap::new(),
            parked: HashMap::new(),
            parked_count: 0,
            ready: VecDeque::new(),
            held: held.into_iter().collect(),
        }
    }

    /// The next item to send or hold: a freed key's waiting message first, then the
    /// buffer's front; a busy key's messages are parked on the way. None when nothing can go.
    pub(super) fn next(&mut self, buffer: &mut VecDeque<Outgoing>) -> Option<Next> {
        if let Some(o) = self.ready.pop_front() {
            return Some(Next::Send(o));
        }
        while let Some(o) = buffer.pop_front() {
            let Some(key) = o.order_key.as_deref() else {
                return Some(Next::Send(o));
            };
            if let Some(first) = self.held.get(key) {
                let why = self.held_reason(key, *first);
                return Some(Next::Hold(o, why));
            }
            if self.busy.contains(key) {
                self.parked.entry(key.to_string()).or_default().push_back(o);
                self.parked_count += 1;
                continue;
            }
            return Some(Next::Send(o));
        }
        None
    }

    /// Whether `next` has something without reading the buffer.
    pub(super) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Messages waiting for their key: the sender stops reading ahead past a bound.
    pub(super) fn parked(&self) -> usize {
        self.parked_count
    }

    /// Nothing parked or ready: every read item was sent, held or is in flight.
    pub(super) fn idle(&self) -> bool {
        self.ready.is_empty() && self.parked_count == 0
    }

    /// `o` is about to be published: its key is busy until [`Keys::settled`].
    pub(super) fn sending(&mut self, o: &Outgoing) {
        if let Some(key) = &o.order_key {
            self.busy.insert(key.clone());
            self.in_flight.insert(o.dead_letter.id, key.clone());
        }
    }

    /// The outcome of dead letter `id`: on success its key's next message becomes ready; on
    /// failure the key is held and its waiting messages come back to be held with the reason.
    pub(super) fn settled(&mut self, id: i64, ok: bool) -> Vec<(Outgoing, String)> {
        let Some(key) = self.in_flight.remove(&id) else {
            return Vec::new();
        };
        self.busy.remove(&key);
        let mut waiting = self.parked.remove(&key).unwrap_or_default();
        if ok {
            if let Some(first) = waiting.pop_front() {
                self.parked_count -= 1;
                self.ready.push_back(first);
            }
            if !waiting.is_empty() {
                self.parked.insert(key, waiting);
            }
            return Vec::new();
        }
        self.parked_count -= waiting.len();
        let why = self.held_reason(&key, id);
        self.held.insert(key, id);
        waiting.into_iter().map(|o| (o, why.clone())).collect()
    }

    fn held_reason(&self, key: &str, first: i64) -> String {
        let shown: String = key.chars().take(120).collect();
        let more = if shown.len() < key.len() { "…" } else { "" };
        format!(
            "held back: dead letter {first} with the same {} `{shown}{more}` failed before it in this ordered replay",
            self.label
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dead_letter::model::DeadLetter;

    fn item(id: i64, key: Option<&str>) -> Outgoing {
        let mut dead_letter = DeadLetter::sample();
        dead_letter.id = id;
        Outgoing {
            plan_id: 1,
            seq: id,
            exchange: String::new(),
            routing_key: "q".into(),
            order_key: key.map(str::to_string),
            dead_letter,
        }
    }

    fn send(keys: &mut Keys, buffer: &mut VecDeque<Outgoing>) -> Option<i64> {
        match keys.next(buffer)? {
            Next::Send(o) => {
                keys.sending(&o);
                Some(o.dead_letter.id)
            }
            Next::Hold(o, _) => panic!("{} held", o.dead_letter.id),
        }
    }

    #[test]
    fn one_message_per_key_is_in_flight_and_keys_go_in_parallel() {
        let mut keys = Keys::new("routing key".into(), vec![]);
        let mut buffer: VecDeque<_> =
            [item(1, Some("a")), item(2, Some("a")), item(3, Some("b")), item(4, None), item(5, Some("a"))].into();
        assert_eq!(send(&mut keys, &mut buffer), Some(1));
        // 2 waits for 1; b and the keyless one go.
        assert_eq!(send(&mut keys, &mut buffer), Some(3));
        assert_eq!(send(&mut keys, &mut buffer), Some(4));
        assert_eq!(send(&mut keys, &mut buffer), None);
        assert_eq!(keys.parked(), 2);
        assert!(keys.settled(1, true).is_empty());
        assert_eq!(send(&mut keys, &mut buffer), Some(2));
        assert_eq!(send(&mut keys, &mut buffer), None, "5 waits for 2");
        assert!(keys.settled(2, true).is_empty());
        assert_eq!(send(&mut keys, &mut buffer), Some(5));
        assert!(
            keys.settled(5, true).is_empty() && keys.settled(3, true).is_empty() && keys.settled(4, true).is_empty()
        );
        assert!(keys.idle());
    }

    #[test]
    fn a_failure_holds_back_its_keys_later_messages_and_no_other_key() {
        let mut keys = Keys::new("header `order-id`".into(), vec![]);
        let mut buffer: VecDeque<_> =
            [item(1, Some("a")), item(2, Some("a")), item(3, Some("b")), item(4, Some("a"))].into();
        assert_eq!(send(&mut keys, &mut buffer), Some(1));
        assert_eq!(send(&mut keys, &mut buffer), Some(3));
        let held = keys.settled(1, false);
        assert_eq!(held.iter().map(|(o, _)| o.dead_letter.id).collect::<Vec<_>>(), [2]);
        assert!(held[0].1.contains("dead letter 1") && held[0].1.contains("`a`"), "{}", held[0].1);
        // 4 was still in the buffer: it is held when reached.
        assert!(matches!(keys.next(&mut buffer), Some(Next::Hold(o, _)) if o.dead_letter.id == 4));
        assert!(keys.settled(3, true).is_empty());
        assert!(keys.idle());
    }

    #[test]
    fn a_sender_taking_over_starts_with_the_held_keys() {
        let mut keys = Keys::new("routing key".into(), vec![("a".into(), 7)]);
        let mut buffer: VecDeque<_> = [item(8, Some("a")), item(9, Some("b"))].into();
        assert!(matches!(keys.next(&mut buffer), Some(Next::Hold(_, why)) if why.contains("dead letter 7")));
        assert_eq!(send(&mut keys, &mut buffer), Some(9));
    }
}
