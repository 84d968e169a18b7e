//! Dead letters: read from RabbitMQ DLQs, stored whole, grouped by how they failed.
//!
//! Policy (design invariant 1): the ingester acks a dead letter only after the transaction
//! that stores it has committed; a redelivery of the same message maps to the same row via a
//! natural key, so a crash between commit and ack costs nothing. Bodies are bytes and headers
//! keep their AMQP types, so what is stored can be replayed exactly as it arrived.
//!
//! - `headers`: AMQP header tables ⇄ typed JSON, lossless.
//! - `x_death`, `reason`: what RabbitMQ and the application say about the failure;
//!   `conventions`: the failure headers frameworks set when they republish (origin, facts).
//! - `fingerprint`: which failures are "the same"; `received`: a delivery and its derivations.
//! - `store`, `model`: the tables and their rows; `store_batch`: many rows in one commit;
//!   `body`: bytes for display; `export`: messages as NDJSON lines, streamed for downloads.
//! - `queue_health`: unreadable counts and stuck queues, for the DLQ cards.
//! - `unreadable`: what of a delivery the (bounded, lenient) AMQP parser could not read.
//! - `ingest`: the consumer role; `watch`: which queues it consumes (live, in PostgreSQL);
//!   `depth`: broker-side queue depth samples (taken beside the ingester).
//! - `awaiting`: per-queue counts awaiting triage (kept by triggers); `inflow`: dead letters
//!   per minute per queue and group; `breakdown`: what a group's bodies are when no error
//!   header says; `downstream`: the dead letters of an outbox event.

pub mod awaiting;
pub mod body;
pub mod breakdown;
pub mod conventions;
pub mod depth;
pub mod downstream;
pub mod export;
pub mod filter_words;
pub mod fingerprint;
pub mod headers;
pub mod inflow;
pub mod ingest;
pub mod kind;
pub mod missing;
pub mod model;
pub mod queue_health;
pub mod reason;
pub mod received;
pub mod store;
pub mod store_batch;
pub mod unreadable;
pub mod watch;
pub mod x_death;

pub use received::Received;
