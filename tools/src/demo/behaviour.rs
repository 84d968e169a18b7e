//! How each demo consumer treats a message: pure decisions, no I/O, so each failure mode
//! is tested on its own.
//!
//! Policy: consumers succeed mostly and fail the ways real ones do. A body without
//! `orderId` is republished to the DLX by the consumer itself with `x-exception-type` /
//! `x-exception-message` (as Spring's and MassTransit's error handling do), so its failure
//! group says why; a body that is not JSON is a plain `nack(requeue=false)`, so the console
//! also shows a bare `rejected` with no application story. One message in ten fails once
//! and succeeds on redelivery. Outages follow a fixed schedule from the demo's start, so a
//! DLQ depth alert fires and recovers within minutes.

use std::time::Duration;

use super::topology::DemoQueue;

/// What to do with one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Ack,
    /// `nack(requeue=true)`: a transient error; the redelivery succeeds.
    Retry,
    /// `nack(requeue=false)`: RabbitMQ dead-letters it with reason `rejected`.
    Reject,
    /// Publish a copy with the exception headers to the DLX, then ack the original.
    DeadLetter {
        error_type: String,
        message: String,
    },
    /// Keep the delivery unacked until the outage ends, then ack it: the consumer is
    /// stalled, so the queue behind it expires (TTL) or overflows (max-length).
    Hold(Duration),
}

/// A recurring outage: down for `down_for`, starting `starts_at` into every `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    pub period: Duration,
    pub starts_at: Duration,
    pub down_for: Duration,
}

impl Outage {
    /// How long the outage still lasts at `elapsed` since the demo started; None when up.
    pub fn remaining(&self, elapsed: Duration) -> Option<Duration> {
        if self.period.is_zero() {
            return None;
        }
        let phase = Duration::from_nanos((elapsed.as_nanos() % self.period.as_nanos()) as u64);
        let end = self.starts_at + self.down_for;
        (phase >= self.starts_at && phase < end).then(|| end - phase)
    }
}

/// Each queue's outage, staggered so a newcomer sees one within the first two minutes.
pub fn outage(q: DemoQueue) -> Option<Outage> {
    let s = Duration::from_secs;
    match q {
        // The carrier's API: down 60 s out of every 5 minutes.
        DemoQueue::Shipping => Some(Outage { period: s(300), starts_at: s(120), down_for: s(60) }),
        // The mailer restarts: 45 s every 4 minutes, longer than the 5 s TTL.
        DemoQueue::Notifications => Some(Outage { period: s(240), starts_at: s(60), down_for: s(45) }),
        // The audit sink stalls 30 s every 5 minutes: ~2 events/s overflow a 20-message queue.
        DemoQueue::AuditTrail => Some(Outage { period: s(300), starts_at: s(200), down_for: s(30) }),
        DemoQueue::OrdersCreated | DemoQueue::OrdersPaid => None,
    }
}

/// What a consumer reads of a delivery.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    pub body: &'a [u8],
    pub message_id: Option<&'a str>,
    pub redelivered: bool,
}

/// One message in ten, chosen by its id so the redelivery of the same message succeeds.
fn is_flaky(message_id: Option<&str>) -> bool {
    message_id.is_some_and(|id| id.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b))) % 10 == 0)
}

/// The decision for `msg` on queue `q`, `elapsed` since the demo started.
pub fn decide(q: DemoQueue, msg: &Incoming<'_>, elapsed: Duration) -> Action {
    let down = outage(q).and_then(|o| o.remaining(elapsed));
    match q {
        DemoQueue::Notifications | DemoQueue::AuditTrail => return down.map_or(Action::Ack, Action::Hold),
        // The dependency is down: everything is rejected, nothing retried.
        DemoQueue::Shipping if down.is_some() => return Action::Reject,
        _ => {}
    }
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(msg.body) else {
        return Action::Reject;
    };
    if doc.get("orderId").is_none() {
        let order = doc.get("order_id").map_or_else(|| "?".to_string(), |v| v.to_string());
        let (error_type, message) = match q {
            DemoQueue::OrdersCreated => ("KeyError".to_string(), "'orderId'".to_string()),
            _ => ("ValidationError".to_string(), format!("field orderId missing in order {order}")),
        };
        return Action::DeadLetter { error_type, message };
    }
    if !msg.redelivered && is_flaky(msg.message_id) {
        return Action::Retry;
    }
    Action::Ack
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: Duration = Duration::ZERO;

    fn msg(body: &[u8]) -> Incoming<'_> {
        Incoming { body, message_id: Some("m-1"), redelivered: false }
    }

    #[test]
    fn a_valid_order_is_acked() {
        assert_eq!(decide(DemoQueue::OrdersPaid, &msg(br#"{"orderId":1}"#), START), Action::Ack);
    }

    #[test]
    fn a_renamed_field_is_dead_lettered_with_the_order_id_in_the_message() {
        let a = decide(DemoQueue::OrdersPaid, &msg(br#"{"order_id":1234}"#), START);
        assert_eq!(
            a,
            Action::DeadLetter {
                error_type: "ValidationError".into(),
                message: "field orderId missing in order 1234".into()
            }
        );
        let a = decide(DemoQueue::OrdersCreated, &msg(br#"{"order_id":1}"#), START);
        assert!(matches!(a, Action::DeadLetter { error_type, .. } if error_type == "KeyError"));
    }

    #[test]
    fn a_body_that_is_not_json_is_rejected() {
        assert_eq!(decide(DemoQueue::OrdersCreated, &msg(b"order 2 created"), START), Action::Reject);
    }

    #[test]
    fn a_flaky_message_fails_once_and_succeeds_when_redelivered() {
        let id = (0..100).map(|i| format!("id-{i}")).find(|id| is_flaky(Some(id))).unwrap();
        let mut m = Incoming { body: br#"{"orderId":1}"#, message_id: Some(&id), redelivered: false };
        assert_eq!(decide(DemoQueue::OrdersCreated, &m, START), Action::Retry);
        m.redelivered = true;
        assert_eq!(decide(DemoQueue::OrdersCreated, &m, START), Action::Ack);
    }

    #[test]
    fn shipping_rejects_everything_while_its_dependency_is_down_and_recovers() {
        let good = msg(br#"{"orderId":1}"#);
        assert_eq!(decide(DemoQueue::Shipping, &good, Duration::from_secs(150)), Action::Reject);
        assert_eq!(decide(DemoQueue::Shipping, &good, Duration::from_secs(450)), Action::Reject);
        assert_eq!(decide(DemoQueue::Shipping, &good, Duration::from_secs(181)), Action::Ack);
    }

    #[test]
    fn the_mailer_holds_messages_until_its_outage_ends() {
        let a = decide(DemoQueue::Notifications, &msg(b"x"), Duration::from_secs(70));
        assert_eq!(a, Action::Hold(Duration::from_secs(35)));
        assert_eq!(decide(DemoQueue::Notifications, &msg(b"x"), Duration::from_secs(10)), Action::Ack);
    }
}
