//! A returned (unroutable) message settles its own publish, also when the broker acknowledges
//! it in one `multiple` ack with routable ones (lapin alone hands the return to any publish of
//! that ack). Checked by message id against the real broker.

use std::{sync::Arc, time::Duration};

use engine::{
    amqp::{
        blocked::BlockState,
        confirm::{Outcome, settle},
    },
    publish::{Lanes, Published, returned},
};
use futures::future::join_all;
use lapin::{
    BasicProperties,
    options::{QueueDeclareOptions, QueueDeleteOptions},
};
use testkit::{amqp_url, unique};

#[tokio::test]
async fn each_returned_message_settles_the_publish_it_names() {
    let conn = engine::amqp::connect(&amqp_url(), "revenant-test").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let queue = unique("publish.returns");
    let nowhere = unique("publish.nowhere");
    let opts = QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare(queue.as_str().into(), opts, Default::default()).await.unwrap();

    let mut lanes = Lanes::open(&conn, 1, Arc::new(BlockState::default()), Duration::from_secs(20)).await.unwrap();
    // Persistent messages to a durable queue are confirmed after the disk write, which the
    // broker does for many at once: one `multiple` ack then covers routable and unroutable.
    let (rounds, per_round) = (6, 400);
    let mut wrong = Vec::new();
    let mut routable = 0u32;
    for round in 0..rounds {
        let mut confirms = Vec::with_capacity(per_round);
        for i in 0..per_round {
            let unroutable = (i * 7 + round) % 11 == 0;
            let id = format!("r{round}-{i}");
            let props = BasicProperties::default().with_message_id(id.as_str().into()).with_delivery_mode(2);
            let key = if unroutable { nowhere.as_str() } else { queue.as_str() };
            match lanes.publish(None, "".into(), key.into(), b"{}", props, (id, unroutable)).await.unwrap() {
                Published::Sent(c) => confirms.push(c),
                Published::NoExchange(..) => panic!("the default exchange exists"),
            }
            routable += u32::from(!unroutable);
        }
        for ((id, unroutable), res, _) in join_all(confirms).await {
            let outcome = settle(res);
            let ok = matches!(
                (&outcome, unroutable),
                (Outcome::Refused { returned: true, .. }, true) | (Outcome::Acked, false)
            );
            if !ok {
                wrong.push(format!("{id} (unroutable: {unroutable}): {outcome:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{} publishes settled as another's: {:?}", wrong.len(), &wrong[..wrong.len().min(10)]);
    let declared = ch.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions { passive: true, ..Default::default() },
        Default::default(),
    );
    assert_eq!(declared.await.unwrap().message_count(), routable, "every routable message reached the queue");
    lanes.close("test done").await;
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await.unwrap();
}

#[tokio::test]
async fn lapins_acknowledgement_lock_is_seen_free_on_an_idle_channel() {
    // The matching waits for this to be true after each ack; a lapin upgrade that changes its
    // `Debug` must fail here, not slow every confirm down.
    let conn = engine::amqp::connect(&amqp_url(), "revenant-test").await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    assert!(returned::ack_lock_free(&ch), "{ch:?}");
}
