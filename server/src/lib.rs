//! The `revenant` binary's pieces, as a library so integration tests can start the real
//! router: web console, request security, probes, downloads, background roles, CLI commands.

pub mod dlq_cmd;
pub mod export;
pub mod probes;
pub mod roles;
pub mod security;
pub mod stall;
pub mod state;
pub mod telemetry;
pub mod user_cmd;
pub mod web;
