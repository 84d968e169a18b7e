//! Revenant's own transactional outbox and the relay that publishes it to RabbitMQ.
//!
//! Policy (docs/OUTBOX.md has the operator's version):
//! - a service writes its event into `outbox` in the same transaction as its business
//!   change ([`store::enqueue`]); publishing never happens inside that transaction;
//! - nothing runs on the service's commit: no trigger NOTIFYs on insert; relays find new
//!   rows by adaptive polling ([`poll`]);
//! - relays lease due rows with `FOR UPDATE SKIP LOCKED` in one short statement, publish
//!   them with publisher confirms (persistent, `mandatory`, `message_id` = event id), and mark
//!   confirmed rows in group commits every few ms or `mark_batch` confirms, so a `kill -9` can
//!   re-send at most the in-flight window plus the unflushed marks and never loses an event;
//! - a return (unroutable), a nack or a confirm timeout is a failed attempt: the row retries
//!   with capped, jittered backoff and ends `failed` after `max_attempts`; a row that can
//!   never be published as it stands is `failed` at once and blocks nothing behind it.

pub mod backoff;
mod driver;
mod heartbeat;
pub mod install;
pub mod logical;
mod mapped;
pub mod marks;
pub mod message;
mod native;
mod poll;
pub mod relay;
mod session;
mod standby;
pub mod stats;
pub mod store;
mod streamed;
mod waits;

pub use streamed::card as stream_card;
