//! The real server on port 0 with its own database, driven over HTTP.

mod harness;
mod security;
