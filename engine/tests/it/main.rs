//! Engine integration tests against the real PostgreSQL and RabbitMQ on this machine:
//! a fresh database per test (`testkit::fresh_db`), uniquely named queues.

// `count!` (a compile-checked `SELECT count(*)`) and the rest of the test kit.
#[macro_use]
extern crate testkit;

mod alerts;
mod audit;
mod auth;
mod awaiting_counts;
mod breakdown;
mod closed_sets;
mod group_kinds;
mod inflow;
mod ingest;
mod ingest_batch;
mod ingest_corpus;
mod ingest_hostile;
mod ingest_watch;
mod list_body_search;
mod logical;
mod pass_through;
mod previous_page;
mod publish_returns;
mod relay;
mod relay_logical;
mod relay_mapped;
mod relay_mapped_logical;
mod relay_unconfirmed;
mod replay;
mod replay_edit;
mod sources;
mod topology;
mod triage;
