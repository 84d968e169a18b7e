//! The real server on port 0 with its own database, driven over HTTP.

mod audit;
mod chaos;
mod chaos_mapped;
mod cli;
mod dlq_cli;
mod hardening;
mod harness;
mod metrics;
mod pages;
mod security;
