//! Revenant's domain, server-side only: configuration, schema, and the roles that move
//! messages (outbox relay, dead-letter ingest, replay, alerts), with the audit and user
//! stores they write to. The `app` crate uses it only under its `ssr` feature.

pub mod alerts;
pub mod amqp;
pub mod audit;
pub mod auth;
pub mod db;
pub mod dead_letter;
pub mod group_commit;
pub mod health;
pub mod heartbeats;
pub mod host;
pub mod management;
pub mod metrics;
pub mod outbox;
pub mod publish;
pub mod replay;
pub mod settings;
pub mod sources;
pub mod topology;
pub mod triage;
