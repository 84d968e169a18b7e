//! The confirmed-publish pipeline the relay (every capture mode) and replay share: confirm
//! channels and the publish made on them ([`lanes`]), the outcome of a confirm
//! ([`crate::amqp::confirm::settle`]: acked, refused or unknown), the blocked-broker clock
//! ([`crate::amqp::blocked`]), and the group-commit mark flusher with its one retry policy and
//! its one crash bound ([`flusher`]). Only what a path claims or reads, and its rules per row or
//! item, stay in the path.

pub mod flusher;
pub mod lanes;
pub mod returned;

pub use flusher::{Flushed, Flusher, MarkWriter, duplicate_bound};
pub use lanes::{Confirm, DEFAULT_CHANNELS, Lanes, PublishError, Published};
