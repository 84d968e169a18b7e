//! Which publish a returned message belongs to: each confirm channel's confirms pass through
//! one task that gives every returned message to the publish it names.
//!
//! Why: lapin hands a returned (unroutable, `mandatory`) message to whichever confirm it
//! completes next. When the broker acknowledges several publishes in one `basic.ack` with
//! `multiple`, lapin completes them in hash-map order, so the return of publish 7 can come back
//! on publish 5's confirm: 7 would count as delivered (an outbox event marked published and
//! never sent again: lost) and 5 as returned (sent twice). RabbitMQ coalesces confirms exactly
//! under load, so this is not rare.
//!
//! Policy:
//! - every publish carries an identity read from its own properties ([`identity`]: the
//!   `message_id`, which the relay sets to the event id, and the `x-revenant-replay-id` header,
//!   unique per replayed item), and a returned message carries the same properties back;
//! - when a confirm completes, the task first waits until lapin has finished the `basic.ack` that
//!   completed it ([`ack_done`]: the acknowledgement lock is free), so every confirm of that ack
//!   is complete; then it moves every returned message to the publish whose identity it carries.
//!   A return whose publish has not completed yet (its ack comes later) waits for it;
//! - a return without an identity (a message with neither), or with its own publish's, stays
//!   where lapin put it;
//! - the outcome is the publish's own ack or nack with its own return, so
//!   [`crate::amqp::confirm::settle`] decides as before.

use std::{
    collections::{HashMap, VecDeque},
    future::poll_fn,
    task::Poll,
    time::Duration,
};

use futures::future::BoxFuture;
use lapin::{BasicProperties, Channel, Confirmation, message::BasicReturnMessage, types::AMQPValue};
use tokio::sync::{mpsc, oneshot};

use crate::amqp::{blocked::Unanswered, confirm::Awaited};

/// Returns kept for a publish whose confirm has not completed yet, at most.
const STASH_MAX: usize = 4096;

/// One publish handed to its channel's task.
pub struct Entry {
    identity: Option<String>,
    pub(super) confirm: BoxFuture<'static, Awaited>,
    reply: oneshot::Sender<Awaited>,
}

impl Entry {
    /// `confirm` is the publish's confirm (bounded by the caller's timeout); the outcome goes
    /// to the receiver.
    pub fn new(props: &BasicProperties, confirm: BoxFuture<'static, Awaited>) -> (Entry, oneshot::Receiver<Awaited>) {
        let (reply, rx) = oneshot::channel();
        (Entry { identity: identity(props), confirm, reply }, rx)
    }
}

/// What the caller gets when the task is gone before answering (its channel's lanes were
/// dropped): no answer, so the message may have been delivered; never counted as failed.
pub fn no_answer() -> Awaited {
    Err(Unanswered(Duration::ZERO))
}

/// A publish's identity: its `message_id` and `x-revenant-replay-id`, if it has either.
pub fn identity(props: &BasicProperties) -> Option<String> {
    let id = props.message_id().as_ref().map(|m| m.as_str());
    let replay =
        props.headers().as_ref().and_then(|h| h.inner().get(crate::replay::REPLAY_ID_HEADER)).and_then(|v| match v {
            AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
            AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
            _ => None,
        });
    match (id, replay) {
        (None, None) => None,
        (id, replay) => Some(format!("{}\u{0}{}", id.unwrap_or(""), replay.unwrap_or_default())),
    }
}

/// Starts the task of one confirm channel; it ends when the sender is dropped and every
/// publish handed to it has its outcome.
pub fn spawn(channel: Channel) -> mpsc::UnboundedSender<Entry> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(run(move || ack_lock_free(&channel), rx));
    tx
}

struct Slot {
    identity: Option<String>,
    confirm: BoxFuture<'static, Awaited>,
    done: Option<Awaited>,
    reply: oneshot::Sender<Awaited>,
}

/// `ack_free`: whether lapin is outside an acknowledgement just now (see [`ack_done`]).
async fn run(ack_free: impl Fn() -> bool, mut rx: mpsc::UnboundedReceiver<Entry>) {
    let mut slots: VecDeque<Slot> = VecDeque::new();
    let mut stash = Stash::default();
    let mut open = true;
    loop {
        let progressed = poll_fn(|cx| {
            while open {
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(e)) => {
                        slots.push_back(Slot { identity: e.identity, confirm: e.confirm, done: None, reply: e.reply })
                    }
                    Poll::Ready(None) => open = false,
                    Poll::Pending => break,
                }
            }
            let mut any = false;
            for s in slots.iter_mut().filter(|s| s.done.is_none()) {
                if let Poll::Ready(r) = s.confirm.as_mut().poll(cx) {
                    s.done = Some(r);
                    any = true;
                }
            }
            if any {
                Poll::Ready(true)
            } else if !open && slots.is_empty() {
                Poll::Ready(false)
            } else {
                Poll::Pending
            }
        })
        .await;
        if !progressed {
            return;
        }
        // Every confirm that ack completed is ready once lapin lets go of the ack. Another ack
        // can be applied while a pass polls the slots, so that the carrier of a return is seen
        // pending and its publish, later in the pass, done: that publish would settle without
        // its return (an unroutable event counted as delivered: 3 of 165 runs of
        // `publish_returns` on a loaded two-core machine). So passes repeat, each after the ack
        // lock is free, until one finds nothing newly done: nothing was applied during the one
        // before it. Polled with this task's own waker (a no-op waker would replace it, and a
        // confirm or its timeout that comes later would wake nobody).
        let mut seen = slots.iter().filter(|s| s.done.is_some()).count();
        loop {
            ack_done(&ack_free).await;
            poll_fn(|cx| {
                for s in slots.iter_mut().filter(|s| s.done.is_none()) {
                    if let Poll::Ready(r) = s.confirm.as_mut().poll(cx) {
                        s.done = Some(r);
                    }
                }
                Poll::Ready(())
            })
            .await;
            let now = slots.iter().filter(|s| s.done.is_some()).count();
            if now == seen {
                break;
            }
            seen = now;
        }
        settle(&mut slots, &mut stash);
    }
}

/// A confirm's ack (true) or nack, and the return it carries.
type AckAndReturn = (bool, Option<BasicReturnMessage>);

/// Gives every completed publish its own return and its outcome; keeps the others.
fn settle(slots: &mut VecDeque<Slot>, stash: &mut Stash) {
    let mut done: Vec<(Slot, Awaited)> = Vec::new();
    let mut waiting = VecDeque::with_capacity(slots.len());
    for mut s in slots.drain(..) {
        match s.done.take() {
            Some(r) => done.push((s, r)),
            None => waiting.push_back(s),
        }
    }
    *slots = waiting;
    // First every return of this round to the stash (unless it is its carrier's own), then each
    // publish takes its own: a swap within one ack needs both moved first.
    let mut owned: Vec<(Slot, Result<AckAndReturn, Awaited>)> = Vec::with_capacity(done.len());
    for (s, r) in done {
        let parts = match r {
            Ok(Ok(Confirmation::Ack(ret))) => Ok((true, ret)),
            Ok(Ok(Confirmation::Nack(ret))) => Ok((false, ret)),
            other => Err(other),
        };
        let parts = parts.map(|(ack, ret)| match ret {
            Some(ret) => {
                let named = identity(&ret.delivery.properties);
                if named.is_none() || named == s.identity {
                    (ack, Some(ret))
                } else {
                    stash.put(named.unwrap_or_default(), ret);
                    (ack, None)
                }
            }
            None => (ack, None),
        });
        owned.push((s, parts));
    }
    for (s, parts) in owned {
        let outcome = match parts {
            Ok((ack, mut ret)) => {
                if ret.is_none() {
                    ret = s.identity.as_deref().and_then(|id| stash.take(id));
                }
                Ok(Ok(if ack { Confirmation::Ack(ret) } else { Confirmation::Nack(ret) }))
            }
            Err(other) => other,
        };
        let _ = s.reply.send(outcome);
    }
}

/// Waits until lapin is not inside an acknowledgement (it completes every confirm of one
/// `basic.ack` under one lock, and its `Debug` shows the acknowledgements' fields only when
/// that lock is free). Bounded: after `ACK_WAIT` tries it goes on and says so.
async fn ack_done(ack_free: &impl Fn() -> bool) {
    const ACK_WAIT: usize = 10_000;
    for _ in 0..ACK_WAIT {
        if ack_free() {
            return;
        }
        tokio::task::yield_now().await;
    }
    tracing::warn!("lapin's acknowledgement lock stayed taken; returned messages are matched without waiting for it");
}

/// Whether lapin's acknowledgement lock was free just now.
pub fn ack_lock_free(channel: &Channel) -> bool {
    format!("{channel:?}").contains("Acknowledgements { delivery_tag")
}

/// Returned messages waiting for their publish's confirm, by identity, oldest first.
#[derive(Default)]
struct Stash {
    by_identity: HashMap<String, VecDeque<BasicReturnMessage>>,
    order: VecDeque<String>,
}

impl Stash {
    fn put(&mut self, identity: String, ret: BasicReturnMessage) {
        if self.order.len() >= STASH_MAX
            && let Some(oldest) = self.order.pop_front()
            && let Some(q) = self.by_identity.get_mut(&oldest)
        {
            q.pop_front();
            if q.is_empty() {
                self.by_identity.remove(&oldest);
            }
            tracing::warn!(identity = %oldest.replace('\u{0}', " "), "a returned message named no publish in flight; dropped");
        }
        self.order.push_back(identity.clone());
        self.by_identity.entry(identity).or_default().push_back(ret);
    }

    fn take(&mut self, identity: &str) -> Option<BasicReturnMessage> {
        let q = self.by_identity.get_mut(identity)?;
        let ret = q.pop_front();
        if q.is_empty() {
            self.by_identity.remove(identity);
        }
        if let Some(i) = self.order.iter().position(|o| o == identity) {
            self.order.remove(i);
        }
        ret
    }
}

#[cfg(test)]
mod tests {
    use lapin::message::Delivery;

    use super::*;

    fn ret(id: &str) -> BasicReturnMessage {
        let mut delivery = Delivery::mock(0, "".into(), "nowhere".into(), false, Vec::new());
        delivery.properties = BasicProperties::default().with_message_id(id.into());
        BasicReturnMessage { delivery, reply_code: 312, reply_text: "NO_ROUTE".into() }
    }

    fn slot(id: &str, done: Option<Awaited>) -> (Slot, oneshot::Receiver<Awaited>) {
        let props = BasicProperties::default().with_message_id(id.into());
        let (entry, rx) = Entry::new(&props, Box::pin(std::future::pending()));
        (Slot { identity: entry.identity, confirm: entry.confirm, done, reply: entry.reply }, rx)
    }

    fn returned_id(r: Awaited) -> Option<String> {
        match r {
            Ok(Ok(Confirmation::Ack(Some(m)) | Confirmation::Nack(Some(m)))) => {
                m.delivery.properties.message_id().as_ref().map(|s| s.to_string())
            }
            Ok(Ok(Confirmation::Ack(None))) => None,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_return_on_another_publishs_confirm_goes_to_the_publish_it_names() {
        let mut stash = Stash::default();
        let (a, mut ra) = slot("a", Some(Ok(Ok(Confirmation::Ack(Some(ret("c")))))));
        let (b, mut rb) = slot("b", Some(Ok(Ok(Confirmation::Ack(Some(ret("a")))))));
        let (c, mut rc) = slot("c", Some(Ok(Ok(Confirmation::Ack(None)))));
        let (d, mut rd) = slot("d", None);
        let mut slots = VecDeque::from([a, b, c, d]);
        settle(&mut slots, &mut stash);
        assert_eq!(slots.len(), 1, "the publish without a confirm waits");
        assert_eq!(returned_id(ra.try_recv().unwrap()).as_deref(), Some("a"));
        assert_eq!(returned_id(rb.try_recv().unwrap()), None, "b was acked and not returned");
        assert_eq!(returned_id(rc.try_recv().unwrap()).as_deref(), Some("c"));
        assert!(rd.try_recv().is_err());
    }

    #[test]
    fn a_return_whose_publish_is_confirmed_later_waits_for_it() {
        let mut stash = Stash::default();
        let (a, mut ra) = slot("a", Some(Ok(Ok(Confirmation::Ack(Some(ret("b")))))));
        let (b, mut rb) = slot("b", None);
        let mut slots = VecDeque::from([a, b]);
        settle(&mut slots, &mut stash);
        assert_eq!(returned_id(ra.try_recv().unwrap()), None);
        slots[0].done = Some(Ok(Ok(Confirmation::Ack(None))));
        settle(&mut slots, &mut stash);
        assert_eq!(returned_id(rb.try_recv().unwrap()).as_deref(), Some("b"));
        assert!(slots.is_empty() && stash.order.is_empty());
    }

    #[test]
    fn a_return_without_identity_stays_where_lapin_put_it() {
        let mut stash = Stash::default();
        let mut anon = ret("x");
        anon.delivery.properties = BasicProperties::default();
        let (a, mut ra) = slot("a", Some(Ok(Ok(Confirmation::Nack(Some(anon))))));
        let mut slots = VecDeque::from([a]);
        settle(&mut slots, &mut stash);
        assert!(matches!(ra.try_recv().unwrap(), Ok(Ok(Confirmation::Nack(Some(_))))));
    }

    #[tokio::test]
    async fn a_confirm_still_pending_when_another_completes_is_still_awaited() {
        // A confirm still pending when another completes still reaches its caller, its own
        // timeout included. (The task once re-polled pending confirms with a no-op waker after
        // each ack; the cluster alarm test then saw 127 and 139 duplicates against a bound of
        // 47, and 0–4 once they were polled with the task's own waker.)
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(|| true, rx));
        let props = BasicProperties::default();
        let (now, now_rx) = Entry::new(&props, Box::pin(async { Ok(Ok(Confirmation::Ack(None))) }));
        let later: BoxFuture<'static, Awaited> = Box::pin(async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Err(Unanswered(Duration::from_millis(200)))
        });
        let (later, later_rx) = Entry::new(&props, later);
        tx.send(later).unwrap();
        tx.send(now).unwrap();
        let wait = Duration::from_secs(5);
        assert!(matches!(tokio::time::timeout(wait, now_rx).await, Ok(Ok(Ok(Ok(Confirmation::Ack(None)))))));
        let res = tokio::time::timeout(wait, later_rx).await;
        assert!(matches!(res, Ok(Ok(Err(Unanswered(_))))), "the later confirm's own outcome, in time: {res:?}");
    }

    #[test]
    fn the_identity_is_the_message_id_and_the_replay_id() {
        let mut h = lapin::types::FieldTable::default();
        h.insert(crate::replay::REPLAY_ID_HEADER.into(), AMQPValue::LongString("7:42".into()));
        let replayed = BasicProperties::default().with_message_id("m".into()).with_headers(h);
        assert_eq!(identity(&replayed).as_deref(), Some("m\u{0}7:42"));
        assert_eq!(identity(&BasicProperties::default()), None);
    }
}
