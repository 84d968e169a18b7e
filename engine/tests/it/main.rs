//! Engine integration tests against the real PostgreSQL and RabbitMQ on this machine:
//! a fresh database per test (`engine::testing::fresh_db`), uniquely named queues.

mod alerts;
mod auth;
mod demo;
mod ingest;
mod ingest_batch;
mod ingest_corpus;
mod ingest_watch;
mod relay;
mod relay_mapped;
mod replay;
mod replay_edit;
mod sources;
mod topology;
mod triage;
