//! The real server on port 0 with its own database, driven over HTTP.

// `count!` (a compile-checked `SELECT count(*)`) and the rest of the test kit.
#[macro_use]
extern crate testkit;

mod audit;
mod chaos;
mod chaos_logical;
mod chaos_mapped;
mod cli;
mod cluster;
mod dlq_cli;
mod dlq_watch;
mod export;
mod export_limits;
mod hardening;
mod harness;
mod hostile;
mod metrics;
mod page_loads;
mod pages;
mod probe;
mod security;
